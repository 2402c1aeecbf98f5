"""Dependencies and workflows in the Store contract: run unchanged on SQLite and on PostgreSQL.

Each job gets a queue of its own, so a test claims exactly the job it means to run.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from core.errors import Conflict, InvalidInput
from core.model import (
    Job,
    RunResult,
    build_job,
    decide_cancel,
    decide_finish,
    decide_lease_expired,
    decide_pause,
    decide_resume,
    decide_retry,
    utcnow,
)
from core.store.base import ClaimRequest, JobFilter
from core.workflow import Deps
from tests.store.conftest import POLICY, StoreKit
from tests.store.test_conformance import NOOP, two_nodes


def job(queue: str, **spec: Any) -> Job:
    return build_job({"task": NOOP, "queue": queue, "name": queue, **spec}, utcnow(), POLICY)


async def add(store: Any, queue: str, parents: list[Job] = (), **spec: Any) -> Job:  # type: ignore[assignment]
    deps = [Deps([p.id for p in parents])] if parents else None
    [(j, _)] = await store.submit_jobs([job(queue, **spec)], deps)
    return j


async def run(store: Any, j: Job, outcome: str = "succeeded", error: str | None = None) -> Job:
    """Claim `j` (alone in its queue) and finish its attempt with `outcome`."""
    [claimed] = await store.claim_jobs(ClaimRequest("a1", 1, queues=frozenset({j.queue})), utcnow())
    assert claimed.id == j.id
    res = RunResult(j.id, claimed.attempt, outcome, error=error, result={"from": j.name})
    out = (await store.change_jobs({j.id: lambda x: decide_finish(x, res, utcnow(), POLICY)}))[j.id]
    assert isinstance(out, Job), out
    return out


async def states(store: Any, *jobs: Job) -> list[str]:
    return [(await store.get_job(j.id)).state for j in jobs]


def events_of(kit: StoreKit, job_id: int, type_: str) -> list[dict[str, Any]]:
    return [orjson.loads(e.body) for e in kit.committed if e.job_id == job_id and e.type == type_]


async def test_a_child_waits_blocked_and_is_queued_in_the_commit_of_its_last_parent(kit: StoreKit) -> None:
    s = kit.store
    a, b = await add(s, "a"), await add(s, "b")
    c = await add(s, "c", [a, b])
    assert c.state == "blocked" and c.deps_left == 2
    await run(s, a)
    assert await states(s, c) == ["blocked"], "one of two parents succeeded: the child still waits"
    await run(s, b)
    assert await states(s, c) == ["queued"]
    [queued] = events_of(kit, c.id, "job.queued")
    [b_done] = events_of(kit, b.id, "job.succeeded")
    assert queued["ts"] == b_done["ts"] and queued["seq"] > b_done["seq"], (
        f"the child must be queued in the transaction of its last parent's result: {b_done} then {queued}"
    )


async def test_a_dependency_on_succeeded_jobs_is_queued_at_once_and_a_later_run_at_is_scheduled(kit: StoreKit) -> None:
    s = kit.store
    a = await add(s, "a")
    await run(s, a)
    now_child = await add(s, "b", [a])
    assert now_child.state == "queued", "every parent succeeded already: nothing to wait for"
    x = await add(s, "x")
    later = await add(s, "later", [x], run_at=utcnow() + 3600)
    assert later.state == "blocked"
    await run(s, x)
    assert await states(s, later) == ["scheduled"], "released to its own run_at, not run at once"


async def test_bad_parents_are_refused_naming_the_field_and_nothing_is_written(kit: StoreKit) -> None:
    s = kit.store
    dead = await add(s, "d", max_attempts=1)
    await run(s, dead, "failed", error="boom")
    before = (await s.count_jobs(JobFilter()))[0]
    with pytest.raises(InvalidInput) as missing:
        await s.submit_jobs([job("c"), job("e")], [None, Deps([dead.id + 1000], where="jobs[1].depends_on")])
    assert missing.value.field == "jobs[1].depends_on[0]" and f"no job with id {dead.id + 1000}" in str(missing.value)
    with pytest.raises(InvalidInput) as failed:
        await s.submit_jobs([job("c")], [Deps([dead.id])])
    assert "ended dead" in str(failed.value) and failed.value.field == "depends_on[0]"
    assert (await s.count_jobs(JobFilter()))[0] == before, "a refused submit writes no job at all"


async def test_failure_policies_cancel_transitively_run_anyway_or_skip(kit: StoreKit) -> None:
    s = kit.store
    a = await add(s, "a", max_attempts=1)
    cancel = await add(s, "cancel", [a])
    grandchild = await add(s, "grandchild", [cancel])
    runs = await add(s, "runs", [a], on_parent_failure="run")
    skips = await add(s, "skips", [a], on_parent_failure="skip")
    after_skip = await add(s, "after_skip", [skips])
    await run(s, a, "failed", error="boom")
    assert await states(s, cancel, grandchild, runs, skips, after_skip) == [
        "cancelled", "cancelled", "queued", "skipped", "queued"]  # fmt: skip
    c = await s.get_job(cancel.id)
    assert c.last_error == f"parent job {a.id} ended dead or cancelled", c.last_error
    g = await s.get_job(grandchild.id)
    assert g.last_error == f"parent job {cancel.id} ended dead or cancelled", "the reason names the direct parent"


async def test_retrying_a_failed_parent_rearms_the_children_it_cancelled(kit: StoreKit) -> None:
    s = kit.store
    a = await add(s, "a", max_attempts=1)
    b = await add(s, "b", [a])
    c = await add(s, "c", [b])
    other = await add(s, "other")
    mixed = await add(s, "mixed", [b, other])
    await run(s, a, "failed", error="boom")
    assert await states(s, b, c, mixed) == ["cancelled"] * 3
    await s.change_jobs({a.id: lambda j: decide_retry(j, utcnow(), POLICY)})
    assert await states(s, a, b, c, mixed) == ["queued", "blocked", "blocked", "blocked"], "clear downstream"
    await run(s, a)
    assert await states(s, b, c) == ["queued", "blocked"]
    await run(s, b)
    assert await states(s, c, mixed) == ["queued", "blocked"], "mixed still waits on its other parent"
    await run(s, other)
    assert await states(s, mixed) == ["queued"]


async def test_a_late_success_of_a_parent_recorded_lost_releases_what_it_had_cancelled(kit: StoreKit) -> None:
    s = kit.store
    a = await add(s, "a", max_attempts=1)
    b = await add(s, "b", [a])
    c = await add(s, "c", [b])
    [claimed] = await s.claim_jobs(ClaimRequest("a1", 1, queues=frozenset({"a"})), utcnow())
    lost = RunResult(a.id, claimed.attempt, "lost", error="lease expired")
    await s.change_jobs({a.id: lambda j: decide_finish(j, lost, utcnow(), POLICY)})
    assert await states(s, a, b, c) == ["dead", "cancelled", "cancelled"]
    late = RunResult(a.id, claimed.attempt, "succeeded")  # the run had finished after all
    await s.change_jobs({a.id: lambda j: decide_finish(j, late, utcnow(), POLICY)})
    assert await states(s, a, b, c) == ["succeeded", "queued", "blocked"], "the late success counts as a success"


async def test_a_paused_blocked_job_is_released_when_resumed(kit: StoreKit) -> None:
    s = kit.store
    a = await add(s, "a")
    b = await add(s, "b", [a])
    await s.change_jobs({b.id: lambda j: decide_pause(j, utcnow(), POLICY)})
    await run(s, a)
    assert await states(s, b) == ["paused"], "a paused job is not released while paused"
    await s.change_jobs({b.id: lambda j: decide_resume(j, utcnow(), POLICY)})
    assert await states(s, b) == ["queued"]


async def test_a_workflow_goes_in_whole_and_ends_with_its_last_job(kit: StoreKit) -> None:
    s = kit.store
    jobs = [job("w-a"), job("w-b"), job("w-c")]
    for j, ref in zip(jobs, "abc", strict=True):
        j.ref = ref
    wf = await s.submit_workflow("nightly", jobs, [None, Deps(index=[0]), Deps(index=[0, 1])])
    got, counts = await s.get_workflow(wf.id)
    assert (got.name, got.state, got.total, counts) == ("nightly", "running", 3, {"queued": 1, "blocked": 2})
    nodes = await s.workflow_graph(wf.id)
    assert [(n["ref"], n["parents"]) for n in nodes] == [
        ("a", []),
        ("b", [jobs[0].id]),
        ("c", [jobs[0].id, jobs[1].id]),
    ]
    assert await s.job_edges(jobs[1].id) == ([jobs[0].id], [jobs[2].id])
    for j in jobs:
        await run(s, j)
    got, counts = await s.get_workflow(wf.id)
    assert (got.state, counts) == ("succeeded", {"succeeded": 3}) and got.finished_at is not None
    assert [e.type for e in kit.committed if e.type.startswith("workflow.")] == [
        "workflow.created",
        "workflow.succeeded",
    ]
    [(listed, _)] = await s.list_workflows("succeeded", None, 10)
    assert listed.id == wf.id and await s.list_workflows("running", None, 10) == []


async def test_cancelling_a_workflow_cancels_its_waiting_jobs_and_it_ends_cancelled(kit: StoreKit) -> None:
    s = kit.store
    jobs = [job("x-a"), job("x-b")]
    wf = await s.submit_workflow("wf", jobs, [None, Deps(index=[0])])
    await s.change_workflow(wf.id, "pause", lambda j: decide_pause(j, utcnow(), POLICY))
    assert await states(s, *jobs) == ["paused", "paused"]
    with pytest.raises(Conflict, match="paused already"):
        await s.change_workflow(wf.id, "pause", lambda j: decide_pause(j, utcnow(), POLICY))
    await s.change_workflow(wf.id, "resume", lambda j: decide_resume(j, utcnow(), POLICY))
    assert await states(s, *jobs) == ["queued", "blocked"]
    await s.change_workflow(wf.id, "cancel", lambda j: decide_cancel(j, utcnow(), POLICY))
    got, counts = await s.get_workflow(wf.id)
    assert (got.state, counts) == ("cancelled", {"cancelled": 2})
    with pytest.raises(Conflict) as refused:
        await s.change_workflow(wf.id, "pause", lambda j: decide_pause(j, utcnow(), POLICY))
    assert refused.value.extra.get("state") == "cancelled" and "it is cancelled" in str(refused.value)


@two_nodes
async def test_two_nodes_finishing_the_parents_of_one_child_together_release_it_once(kit: StoreKit) -> None:
    s1, s2 = kit.store, await kit.another()
    for round_ in range(5):
        a, b = await add(s1, f"a{round_}"), await add(s1, f"b{round_}")
        c = await add(s1, f"c{round_}", [a, b])
        ca = (await s1.claim_jobs(ClaimRequest("n1", 1, queues=frozenset({a.queue})), utcnow()))[0]
        cb = (await s2.claim_jobs(ClaimRequest("n2", 1, queues=frozenset({b.queue})), utcnow()))[0]

        def done(j: Job) -> Any:
            res = RunResult(j.id, 1, "succeeded")
            return {j.id: lambda x: decide_finish(x, res, utcnow(), POLICY)}

        await asyncio.gather(s1.change_jobs(done(ca)), s2.change_jobs(done(cb)))
        assert await states(s1, c) == ["queued"], f"round {round_}: the child must be released"
        released = [e for e in await s1.events_since(0, 100_000) if e.job_id == c.id and e.type == "job.queued"]
        assert len(released) == 1, f"round {round_}: released {len(released)} times, expected exactly once"


@two_nodes
async def test_a_node_dying_mid_workflow_the_other_reaps_and_finishes_it(kit: StoreKit) -> None:
    from core.store.postgres import PostgresStore

    s2 = kit.store
    s1 = PostgresStore(kit.url, POLICY, on_commit=lambda events: None)  # node 1: closed by the test, not the kit
    await s1.open()
    jobs = [job("die-a", max_attempts=2), job("die-b")]
    wf = await s1.submit_workflow("dies", jobs, [None, Deps(index=[0])])
    a, b = jobs
    [held] = await s1.claim_jobs(ClaimRequest("node1-agent", 1, queues=frozenset({a.queue})), utcnow())
    await s1.close()  # node 1 is gone with its agent; its lease runs out
    later = utcnow() + POLICY.lease_seconds + 1
    assert await s2.expired_lease_ids(later, 10) == [a.id]
    await s2.change_jobs({a.id: lambda j: decide_lease_expired(j, later, POLICY)})
    assert await states(s2, a, b) == ["failed", "blocked"], "the lost attempt counts; the child still waits"
    await s2.promote_due_jobs(later + 3600, 10)
    [again] = await s2.claim_jobs(ClaimRequest("node2-agent", 1, queues=frozenset({a.queue})), utcnow())
    assert again.id == a.id and again.attempt == held.attempt + 1
    res = RunResult(a.id, again.attempt, "succeeded")
    await s2.change_jobs({a.id: lambda j: decide_finish(j, res, utcnow(), POLICY)})
    assert await states(s2, b) == ["queued"], "node 2 released the child in the parent's commit"
    await run(s2, b)
    got, _ = await s2.get_workflow(wf.id)
    assert got.state == "succeeded"


@two_nodes
async def test_a_fan_in_finished_by_many_concurrent_batches_on_two_nodes_is_released(kit: StoreKit) -> None:
    s1, s2 = kit.store, await kit.another()
    n = 300
    jobs = [job("fan-root"), *(job("fan-mid") for _ in range(n)), job("fan-sink")]
    wf = await s1.submit_workflow(
        "fan", jobs, [None, *(Deps(index=[0]) for _ in range(n)), Deps(index=list(range(1, n + 1)))]
    )
    await run(s1, jobs[0])
    claimed = await s1.claim_jobs(ClaimRequest("a", n, queues=frozenset({"fan-mid"})), utcnow())
    assert len(claimed) == n

    def done(j: Job) -> Any:
        res = RunResult(j.id, j.attempt, "succeeded")
        return lambda x: decide_finish(x, res, utcnow(), POLICY)

    batches = [claimed[i : i + 10] for i in range(0, n, 10)]
    await asyncio.gather(
        *((s1 if k % 2 else s2).change_jobs({j.id: done(j) for j in b}) for k, b in enumerate(batches))
    )
    sink = await s1.get_job(jobs[-1].id)
    assert (sink.state, sink.deps_left) == ("queued", 0), (sink.state, sink.deps_left)
    _, counts = await s1.get_workflow(wf.id)
    assert counts == {"succeeded": n + 1, "queued": 1}, counts


async def test_retrying_a_failed_parent_leaves_a_job_a_person_cancelled_cancelled(kit: StoreKit) -> None:
    """A child with policy run or skip waits on after a parent failed (its other parent still runs);
    a person cancels it; the failed parent is retried: the child stays cancelled, while a child the
    failure itself cancelled waits again."""
    s = kit.store
    a = await add(s, "a", max_attempts=1)
    slow = await add(s, "slow")
    runs = await add(s, "runs", [a, slow], on_parent_failure="run")
    skips = await add(s, "skips", [a, slow], on_parent_failure="skip")
    cancelled_by_a = await add(s, "cancels", [a])
    await run(s, a, "failed", error="boom")
    assert await states(s, runs, skips, cancelled_by_a) == ["blocked", "blocked", "cancelled"]
    assert (await s.get_job(cancelled_by_a.id)).ended_by_parent == a.id
    now = utcnow()
    await s.change_jobs(
        {runs.id: lambda j: decide_cancel(j, now, POLICY), skips.id: lambda j: decide_cancel(j, now, POLICY)}
    )
    assert await states(s, runs, skips) == ["cancelled", "cancelled"]
    assert (await s.get_job(runs.id)).ended_by_parent is None, "a person's cancel is not a dependency's"
    await s.change_jobs({a.id: lambda j: decide_retry(j, utcnow(), POLICY)})
    assert await states(s, a, runs, skips, cancelled_by_a) == ["queued", "cancelled", "cancelled", "blocked"], (
        "only what the failure cancelled comes back"
    )
    assert (await s.get_job(cancelled_by_a.id)).ended_by_parent is None


async def test_a_root_releasing_10000_children_commits_in_seconds_and_the_counts_follow(kit: StoreKit) -> None:
    """A node's connections run small changes all day (claims, results). On PostgreSQL the job_counts
    trigger kept the plan of its query per connection; after small updates, the one statement that
    releases a fan-out root's 9,998 children compared 9,998 x 9,998 rows twice: 35-100 s holding the
    transaction (migration 0021). Now seconds, and the counts are right."""
    import time

    s = kit.store
    n = 10_000
    jobs = [job("fan", ref=f"j{i}") for i in range(n)]
    deps: list[Deps | None] = [None, *[Deps(index=[0]) for _ in range(n - 2)], Deps(index=list(range(1, n - 1)))]
    await s.submit_workflow("fan", jobs, deps)
    for _ in range(12):  # small changes on the store's connections first, as on a node
        await run(s, await add(s, "warm"))
    [root] = await s.claim_jobs(ClaimRequest("a1", 10, queues=frozenset({"fan"})), utcnow())
    res = RunResult(root.id, root.attempt, "succeeded")
    t = time.perf_counter()
    await s.change_jobs({root.id: lambda x: decide_finish(x, res, utcnow(), POLICY)})
    took = time.perf_counter() - t
    assert took < 20, f"the root's result took {took:.1f} s (it released {n - 2} children)"
    counts = (await s.stats(utcnow()))["by_queue"]["fan"]
    assert counts == {"succeeded": 1, "queued": n - 2, "blocked": 1}, counts
