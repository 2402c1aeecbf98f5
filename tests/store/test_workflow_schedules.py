"""A schedule that fires a workflow (a nightly DAG), as both stores apply it: each fire time makes the
whole workflow in the firing transaction, with its end job as the schedule's run, so the overlap
policy sees the run going until every job of the workflow has ended."""

from __future__ import annotations

from typing import Any

import orjson

from core.model import build_job, utcnow
from core.schedule import Schedule, SchedulePolicy
from core.store.base import ClaimRequest, JobFilter
from core.workflow import RUN_END_REF, run_end_spec
from tests.store.conftest import POLICY, StoreKit
from tests.store.test_conformance import a_schedule
from tests.store.test_schedule_policies import finish, plan

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
