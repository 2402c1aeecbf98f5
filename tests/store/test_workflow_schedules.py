"""A schedule that fires a workflow (a nightly DAG), as both stores apply it: each fire time makes the
whole workflow in the firing transaction, with its end job as the schedule's run, so the overlap
policy sees the run going until every job of the workflow has ended."""

from __future__ import annotations

import itertools
from typing import Any

import orjson

from core.model import build_job, decide_cancel, utcnow
from core.schedule import Schedule, SchedulePolicy
from core.store.base import ClaimRequest, JobFilter
from core.workflow import RUN_END_REF, run_end_spec
from tests.store.conftest import POLICY, StoreKit
from tests.store.test_conformance import a_schedule
from tests.store.test_schedule_policies import events, finish, plan

NOOP = {"kind": "python", "function": "agents.builtin:noop"}
TEMPLATE = {"workflow": {"name": "nightly-etl", "jobs": [
    {"ref": "extract", "queue": "etl", "task": NOOP},
    {"ref": "transform", "queue": "etl", "task": NOOP, "depends_on": ["extract"]},
    {"ref": "load", "queue": "etl", "task": NOOP, "depends_on": ["transform"]},
    {"ref": "report", "queue": "etl", "task": NOOP, "depends_on": ["extract"], "on_parent_failure": "run"},
]}, "queue": "etl"}  # fmt: skip


def end_job(s: Schedule) -> Any:
    def make(fire_time: float | None) -> Any:
        return build_job(run_end_spec(s.name, s.job, fire_time), utcnow(), POLICY)

    return make


async def take(kit: StoreKit, queue: str) -> list[int]:
    """An agent takes every queued job of `queue`."""
    return [j.id for j in await kit.store.claim_jobs(ClaimRequest("a1", 100, frozenset({queue})), utcnow())]


async def workflow_schedule(kit: StoreKit, overlap: str, first: float) -> Schedule:
    s = a_schedule(policy=SchedulePolicy(overlap=overlap), next_fire_at=first)
    s.job = TEMPLATE
    return await kit.store.create_schedule(s)


async def fire(kit: StoreKit, s: Schedule, *times: float) -> Any:
    fresh = await kit.store.get_schedule(s.id)
    return await kit.store.fire_schedule(fresh, plan(*times, expected=fresh.next_fire_at), end_job(fresh))


async def test_each_fire_time_makes_the_whole_workflow_with_its_end_job_as_the_run(kit: StoreKit) -> None:
    t = utcnow() - 300
    s = await workflow_schedule(kit, "skip", t)
    fired = await fire(kit, s, t)
    [end] = fired.jobs
    assert (end.ref, end.schedule_id, end.fire_time, end.state) == (RUN_END_REF, s.id, t, "blocked")
    wf, counts = await kit.store.get_workflow(end.workflow_id)
    assert (wf.name, wf.total, counts) == ("nightly-etl", 5, {"queued": 1, "blocked": 4}), (wf, counts)
    jobs = {j.ref: j for j in await kit.store.list_jobs(JobFilter(), None, 100)}
    assert set(jobs) == {"extract", "transform", "load", "report", RUN_END_REF}
    assert all(j.schedule_id is None for r, j in jobs.items() if r != RUN_END_REF), "only the end job is the run"

    # while any job of the workflow runs, the next fire time is skipped: the run is going
    while taken := await take(kit, "etl"):
        t += 60
        assert (await fire(kit, s, t)).decision.skip == [t], f"fire time {t} was not skipped"
        await finish(kit, taken)
    wf, counts = await kit.store.get_workflow(end.workflow_id)
    assert (wf.state, counts) == ("succeeded", {"succeeded": 5}), (wf, counts)
    stored = await kit.store.get_schedule(s.id)
    assert stored.skipped >= 3 and stored.fired == 1, (stored.skipped, stored.fired)
    [skipped, *_] = [orjson.loads(e.body)["data"] for e in kit.committed if e.type == "schedule.skipped"]
    assert f"(job {end.id}) is still running" in skipped["reason"], skipped

    again = await fire(kit, s, t + 60)
    assert len(again.jobs) == 1 and again.jobs[0].workflow_id != end.workflow_id, "the run ended: a new workflow"
    assert (await kit.store.get_workflow(again.jobs[0].workflow_id))[0].state == "running"


async def test_allow_runs_two_workflows_side_by_side_and_a_manual_run_makes_one_too(kit: StoreKit) -> None:
    t = utcnow() - 300
    s = await workflow_schedule(kit, "allow", t)
    a, b = (await fire(kit, s, t)).jobs[0], (await fire(kit, s, t + 60)).jobs[0]
    assert a.workflow_id != b.workflow_id
    manual = await kit.store.fire_schedule(await kit.store.get_schedule(s.id), None, end_job(s))
    assert manual.jobs[0].workflow_id not in (a.workflow_id, b.workflow_id) and manual.jobs[0].fire_time is None
    assert len(await kit.store.list_jobs(JobFilter(), None, 100)) == 15


# ---------------------------------------------------------------- every overlap policy, the run as the unit


async def workflow_schedule_with(kit: StoreKit, first: float, **policy: Any) -> Schedule:
    s = a_schedule(policy=SchedulePolicy(**policy), next_fire_at=first)
    s.job = TEMPLATE
    return await kit.store.create_schedule(s)


async def jobs_by_workflow(kit: StoreKit) -> dict[int | None, dict[str, Any]]:
    """Every job, by workflow id then ref (a buffered run's end job alone is under None)."""
    out: dict[int | None, dict[str, Any]] = {}
    for j in await kit.store.list_jobs(JobFilter(), None, 500):
        out.setdefault(j.workflow_id, {})[j.ref] = j
    return out


async def run_to_the_end(kit: StoreKit, outcome_of: dict[str, str] | None = None) -> None:
    """An agent takes and finishes every job of queue etl until none is left (`outcome_of`: by ref)."""
    while taken := await kit.store.claim_jobs(ClaimRequest("a1", 100, frozenset({"etl"})), utcnow()):
        for j in taken:
            assert j.ref != RUN_END_REF, "a run's end job ends in place: no agent ever takes it"
            await finish(kit, [j.id], (outcome_of or {}).get(j.ref or "", "succeeded"))


async def test_the_end_job_ends_in_place_with_the_workflows_outcome(kit: StoreKit) -> None:
    t = utcnow() - 300
    s = await workflow_schedule_with(kit, t, overlap="allow")
    ok, bad = (await fire(kit, s, t)).jobs[0], (await fire(kit, s, t + 60)).jobs[0]
    await run_to_the_end(kit, {"extract": "succeeded"})
    assert (await kit.store.get_job(ok.id)).state == "succeeded"
    assert (await kit.store.get_job(bad.id)).state == "succeeded"
    third = (await fire(kit, s, t + 120)).jobs[0]
    await run_to_the_end(kit, {"transform": "dead"})  # load is cancelled with it; report still runs
    end = await kit.store.get_job(third.id)
    wf, counts = await kit.store.get_workflow(third.workflow_id)
    assert (end.state, wf.state) == ("dead", "failed"), (end, wf, counts)
    assert end.attempt == 0 and f"workflow {wf.id} failed: job" in (end.last_error or ""), end
    assert (await kit.store.get_schedule(s.id)).failures == 1, "a failed workflow is a failed run"


async def test_buffer_one_holds_the_whole_next_run_until_the_previous_workflow_ended(kit: StoreKit) -> None:
    t = utcnow() - 300
    s = await workflow_schedule_with(kit, t, overlap="buffer_one")
    first = (await fire(kit, s, t)).jobs[0]
    held = await fire(kit, s, t + 60)
    [buffered] = held.jobs
    assert (await fire(kit, s, t + 120)).decision.skip == [t + 120], "buffer_one holds one run, not two"
    by_wf = await jobs_by_workflow(kit)
    assert set(by_wf[None]) == {RUN_END_REF} and buffered.workflow_id is None, "a buffered run is its end job alone"
    assert len(by_wf) == 2 and len(by_wf[first.workflow_id]) == 5, f"nothing of the buffered run exists: {by_wf}"
    assert (await kit.store.get_job(buffered.id)).state == "blocked"

    # the first run's jobs end one by one; only in the transaction ending its last one does the next start
    taken = [j.id for j in await kit.store.claim_jobs(ClaimRequest("a1", 100, frozenset({"etl"})), utcnow())]
    await finish(kit, taken)  # extract: transform and report are queued now
    assert (await kit.store.get_job(buffered.id)).workflow_id is None, "the previous run is still going"
    while taken := [j.id for j in await kit.store.claim_jobs(ClaimRequest("a1", 100, frozenset({"etl"})), utcnow())]:
        if (await kit.store.get_job(buffered.id)).workflow_id is not None:
            break  # the next run started: these are its jobs
        await finish(kit, taken)
    assert (await kit.store.get_job(first.id)).state == "succeeded"
    nxt = await kit.store.get_job(buffered.id)
    assert nxt.workflow_id is not None and nxt.state == "blocked" and nxt.deps_left == 4, nxt
    wf, counts = await kit.store.get_workflow(nxt.workflow_id)
    assert (wf.total, wf.state) == (5, "running") and counts.get("running") == 1, (wf, counts)
    graph = {n["ref"]: n for n in await kit.store.workflow_graph(nxt.workflow_id)}
    assert len(graph[RUN_END_REF]["parents"]) == 4, graph
    assert [e for e in events(kit, "job.run_started") if e["workflow_id"] == nxt.workflow_id], "an event says so"


async def test_buffer_all_runs_buffered_workflows_one_after_another(kit: StoreKit) -> None:
    t = utcnow() - 600
    s = await workflow_schedule_with(kit, t, overlap="buffer_all")
    made = [(await fire(kit, s, t + 60 * i)).jobs[0] for i in range(3)]
    assert [j.workflow_id is None for j in made] == [False, True, True]
    spans: list[tuple[float, float]] = []
    for end in made:
        await run_one_workflow(kit, end.id)
        wf, _ = await kit.store.get_workflow((await kit.store.get_job(end.id)).workflow_id or 0)
        spans.append((wf.created_at, wf.finished_at or 0.0))
        assert wf.state == "succeeded", wf
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), f"buffered runs overlapped: {spans}"


async def run_one_workflow(kit: StoreKit, end_id: int) -> None:
    """Finish the jobs of the workflow of this end job (started by now) until it ended."""
    for _ in range(20):
        end = await kit.store.get_job(end_id)
        if end.state in ("succeeded", "dead", "cancelled"):
            return
        assert end.workflow_id is not None, f"run {end_id} should have started: {end}"
        taken = await kit.store.claim_jobs(ClaimRequest("a1", 100, frozenset({"etl"})), utcnow())
        assert all(j.workflow_id == end.workflow_id for j in taken), "only the started run's jobs are queued"
        await finish(kit, [j.id for j in taken])
    raise AssertionError(f"run {end_id} did not end")


async def test_cancel_previous_cancels_the_whole_run_and_starts_the_next_once_its_jobs_stopped(kit: StoreKit) -> None:
    t = utcnow() - 300
    s = await workflow_schedule_with(kit, t, overlap="cancel_previous")
    old = (await fire(kit, s, t)).jobs[0]
    [extract] = await kit.store.claim_jobs(ClaimRequest("a1", 100, frozenset({"etl"})), utcnow())  # running
    [new] = (await fire(kit, s, t + 60)).jobs
    assert new.workflow_id is None, "the new run waits while a job of the old one still runs"
    wf, counts = await kit.store.get_workflow(old.workflow_id)
    assert wf.cancel_requested and counts == {"running": 1, "cancelled": 3, "blocked": 1}, (wf, counts)
    end = await kit.store.get_job(old.id)
    assert (end.state, end.cancel_requested) == ("blocked", True), "the old run is going until its jobs stopped"
    assert (await kit.store.get_job(extract.id)).cancel_requested, "the running job is asked to stop"

    await finish(kit, [extract.id], "cancelled")  # the agent reports it stopped
    assert (await kit.store.get_job(old.id)).state == "cancelled"
    assert (await kit.store.get_workflow(old.workflow_id))[0].state == "cancelled"
    started = await kit.store.get_job(new.id)
    assert started.workflow_id is not None and started.deps_left == 4, started
    assert (await kit.store.get_schedule(s.id)).failures == 0, "a cancelled run is nobody's failure"

    # nothing of the run is running: it is cancelled and the next one starts in the same firing
    [third] = (await fire(kit, s, t + 120)).jobs
    assert (await kit.store.get_job(started.id)).state == "cancelled"
    assert (await kit.store.get_job(third.id)).workflow_id is not None, "started at once"
    assert events(kit, "schedule.cancelled_previous")[-1]["job_ids"] == [new.id]


async def test_pause_after_failures_counts_runs_whose_workflow_failed(kit: StoreKit) -> None:
    t = utcnow() - 600
    s = await workflow_schedule_with(kit, t, overlap="skip", pause_after_failures=2)
    for i, outcome in enumerate(("dead", "succeeded", "dead", "dead")):
        if i == 3:
            assert (await kit.store.get_schedule(s.id)).failures == 1
        await fire(kit, s, t + 60 * i)
        await run_to_the_end(kit, {"extract": outcome})
    stored = await kit.store.get_schedule(s.id)
    assert stored.paused and stored.failures == 2, stored
    assert "paused after 2 consecutive failed runs" in (stored.paused_reason or ""), stored.paused_reason
    assert "failed: job" in (stored.paused_reason or ""), "the reason names the workflow's failed job"
    assert events(kit, "schedule.paused"), "an event says so"


async def test_cancelling_a_scheduled_workflow_keeps_the_run_going_until_its_running_job_stopped(
    kit: StoreKit,
) -> None:
    t = utcnow() - 300
    s = await workflow_schedule_with(kit, t, overlap="skip")
    run = (await fire(kit, s, t)).jobs[0]
    [extract] = await kit.store.claim_jobs(ClaimRequest("a1", 100, frozenset({"etl"})), utcnow())
    await kit.store.change_workflow(run.workflow_id, "cancel", lambda j: decide_cancel(j, utcnow(), POLICY))
    assert (await kit.store.get_job(run.id)).state == "blocked"
    assert (await fire(kit, s, t + 60)).decision.skip == [t + 60], "skip: its job still runs"
    await finish(kit, [extract.id], "cancelled")
    assert (await kit.store.get_job(run.id)).state == "cancelled"
    assert len((await fire(kit, s, t + 120)).jobs) == 1


async def test_deleting_the_schedule_cancels_a_buffered_workflow_run(kit: StoreKit) -> None:
    t = utcnow() - 300
    s = await workflow_schedule_with(kit, t, overlap="buffer_one")
    await fire(kit, s, t)
    [buffered] = (await fire(kit, s, t + 60)).jobs
    await kit.store.delete_schedule(s.id)
    assert (await kit.store.get_job(buffered.id)).state == "cancelled"
    await run_to_the_end(kit)  # the first run still ends; nothing of the cancelled one ever starts
    assert None in await jobs_by_workflow(kit) and len(await jobs_by_workflow(kit)) == 2
