"""The Store contract: one suite, run unchanged on SQLite and on PostgreSQL (see conftest.kit).

Tests marked @two_nodes open a second PostgreSQL store on the same database: two core
nodes. They run on PostgreSQL only: one node owns an SQLite file alone.
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

import orjson
import pytest

from core.errors import Conflict, NotFound
from core.flow import QueueLimits
from core.model import (
    Job,
    RunResult,
    build_job,
    decide_cancel,
    decide_finish,
    decide_hand_back,
    decide_lease_expired,
    decide_lost,
    decide_pause,
    decide_priority,
    decide_resume,
    decide_retry,
    utcnow,
)
from core.schedule import FirePlan, Schedule, SchedulePolicy
from core.store.base import ClaimRequest, Event, EventFilter, JobFilter
from tests.store.conftest import POLICY, StoreKit

NOOP = {"kind": "python", "function": "agents.builtin:noop"}


def new_job(now: float | None = None, **spec: Any) -> Job:
    return build_job({"task": NOOP, **spec}, utcnow() if now is None else now, POLICY)


async def submit(store: Any, *specs: dict[str, Any], now: float | None = None) -> list[Job]:
    out = await store.submit_jobs([new_job(now, **s) for s in specs])
    return [j for j, _ in out]


def claim(agent: str = "a1", limit: int = 100, **kw: Any) -> ClaimRequest:
    return ClaimRequest(agent, limit, **kw)


#: Tests of several nodes (several PostgreSQL stores on one database): SQLite has one node only.
two_nodes = pytest.mark.parametrize("kit", ["postgres"], indirect=True)


def assert_gap_free(events: list[Event], what: str) -> None:
    seqs = [e.seq for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), f"{what}: expected seq 1..{len(seqs)} in order, got {seqs[:50]}..."


# ------------------------------------------------------------------ jobs


async def test_submit_and_get_round_trip_every_field(kit: StoreKit) -> None:
    spec = {"name": "report", "queue": "q1", "priority": 7, "tags": ["a", "b"], "timeout": 2.5, "max_attempts": 5,
            "backoff": {"base": 2.0, "cap": 60.0}, "labels": {"gpu": "true", "region": "eu"},
            "task": {"kind": "shell", "argv": ["echo", "é"], "env": {"X": "1"}}}  # fmt: skip
    job = new_job(**spec)
    [(stored, created)] = await kit.store.submit_jobs([job])
    assert created and stored.id > 0
    got = await kit.store.get_job(stored.id)
    assert got == stored, f"read back {got}, expected {stored}"
    assert got.task == spec["task"] and got.tags == ["a", "b"] and got.labels == {"gpu": "true", "region": "eu"}
    assert got.cancel_requested is False and got.result is None and got.state == "queued"


async def test_get_missing_job_is_not_found(kit: StoreKit) -> None:
    with pytest.raises(NotFound):
        await kit.store.get_job(12345)
    with pytest.raises(NotFound):
        await kit.store.list_attempts(12345)


async def test_list_jobs_every_filter_and_cursor_paging(kit: StoreKit) -> None:
    s = kit.store
    t0 = utcnow()
    jobs = await submit(s, *({"name": f"build-{i}", "queue": "ci" if i % 2 else "web", "tags": ["x"] if i % 3 == 0 else []}
                             for i in range(10)), now=t0)  # fmt: skip
    later = await submit(s, {"name": "deploy", "queue": "web", "delay": 60}, now=t0 + 10)
    ids = [j.id for j in [*jobs, *later]]

    async def listed(flt: JobFilter, before: int | None = None, limit: int = 100) -> list[int]:
        return [j.id for j in await s.list_jobs(flt, before, limit)]

    assert await listed(JobFilter()) == sorted(ids, reverse=True)
    assert await listed(JobFilter(states=["scheduled"])) == [later[0].id]
    assert await listed(JobFilter(states=["scheduled", "queued"])) == sorted(ids, reverse=True)
    assert await listed(JobFilter(queue="ci")) == sorted((j.id for j in jobs if j.queue == "ci"), reverse=True)
    assert await listed(JobFilter(name_prefix="build-1")) == [jobs[1].id]
    assert await listed(JobFilter(name_prefix="build")) == sorted((j.id for j in jobs), reverse=True)
    assert await listed(JobFilter(tag="x")) == sorted((j.id for j in jobs if j.tags), reverse=True)
    assert await listed(JobFilter(created_after=t0 + 5)) == [later[0].id]
    assert await listed(JobFilter(created_before=t0 + 5)) == sorted((j.id for j in jobs), reverse=True)
    assert await listed(JobFilter(queue="web", states=["queued"], tag="x")) == sorted(
        (j.id for j in jobs if j.queue == "web" and j.tags), reverse=True
    )
    pages, cursor = [], None
    while True:
        page = await listed(JobFilter(), cursor, 4)
        if not page:
            break
        pages.append(page)
        cursor = page[-1]
    assert [len(p) for p in pages] == [4, 4, 3]
    assert [i for p in pages for i in p] == sorted(ids, reverse=True)


async def test_a_big_batch_goes_in_whole_with_its_tags_queues_and_events(kit: StoreKit) -> None:
    specs = [{"name": f"bulk-{i}", "queue": f"q{i % 3}", "tags": ["even"] if i % 2 == 0 else []} for i in range(1500)]
    jobs = await submit(kit.store, *specs)
    ids = [j.id for j in jobs]
    assert len(set(ids)) == 1500 and ids == sorted(ids), "ids are new and follow the batch's order"
    assert [j.name for j in await kit.store.list_jobs(JobFilter(), None, 3)] == ["bulk-1499", "bulk-1498", "bulk-1497"]
    tagged = await kit.store.list_jobs(JobFilter(tag="even"), None, 2000)
    assert len(tagged) == 750
    assert sorted(q["name"] for q in await kit.store.list_queues()) == ["q0", "q1", "q2"]
    stored = await kit.store.events_since(0, 5000)
    assert_gap_free(stored, "events of a big batch")
    assert [(e.seq, e.body) for e in stored] == [(e.seq, e.body) for e in kit.committed]
    bodies = [orjson.loads(e.body) for e in stored]
    assert [(b["seq"], b["job_id"], b["data"]["job"]["name"]) for b in bodies] == [
        (i + 1, j.id, j.name) for i, j in enumerate(jobs)
    ]


async def test_idempotency_key_returns_the_first_job(kit: StoreKit) -> None:
    s = kit.store
    [(first, created)] = await s.submit_jobs([new_job(name="one", idempotency_key="k1")])
    assert created
    [(again, created)] = await s.submit_jobs([new_job(name="two", idempotency_key="k1")])
    assert not created and again.id == first.id and again.name == "one"
    out = await s.submit_jobs([new_job(idempotency_key="k2"), new_job(idempotency_key="k2"), new_job()])
    assert [c for _, c in out] == [True, False, True]
    assert out[0][0].id == out[1][0].id != out[2][0].id
    created_events = [e for e in kit.committed if e.type == "job.created"]
    assert len(created_events) == 3, f"one job.created per new job, got {[e.job_id for e in created_events]}"


@two_nodes
async def test_idempotency_two_nodes_submitting_the_same_key_make_one_job(kit: StoreKit) -> None:
    other = await kit.another()
    for round_ in range(10):
        key = f"race-{round_}"
        a, b = await asyncio.gather(
            kit.store.submit_jobs([new_job(idempotency_key=key)]), other.submit_jobs([new_job(idempotency_key=key)])
        )
        assert a[0][0].id == b[0][0].id, f"round {round_}: two jobs for one key: {a[0][0].id} and {b[0][0].id}"
        assert sorted([a[0][1], b[0][1]]) == [False, True]


# ------------------------------------------------------------------ claims


async def test_claims_run_by_priority_then_fifo(kit: StoreKit) -> None:
    t0 = utcnow()
    priorities = [0, 5, -3, 5, 10, 0]
    jobs = await submit(kit.store, *({"priority": p} for p in priorities), now=t0)
    order = [(j.priority, j.id) for j in sorted(jobs, key=lambda j: (-j.priority, j.id))]
    got = []
    for _ in range(3):
        got += [(j.priority, j.id) for j in await kit.store.claim_jobs(claim(limit=2), t0)]
    assert got == order
    assert await kit.store.claim_jobs(claim(), t0) == []


async def test_claims_leave_paused_queues_respect_caps_and_queue_choice(kit: StoreKit) -> None:
    s, now = kit.store, utcnow()
    await submit(s, *({"queue": q} for q in ["a"] * 3 + ["b"] * 3 + ["c"] * 3), now=now)
    await s.update_queue("b", {"paused": True}, now)
    await s.update_queue("c", {"concurrency": 2}, now)
    first = await s.claim_jobs(claim(paused=frozenset({"b"}), caps={"c": 2}), now)
    assert sorted(j.queue for j in first) == ["a", "a", "a", "c", "c"]
    again = await s.claim_jobs(claim(paused=frozenset({"b"}), caps={"c": 0}), now)
    assert again == [], f"queue c is at its limit and b is paused, yet claimed {[(j.id, j.queue) for j in again]}"
    await s.update_queue("b", {"paused": False}, now)
    only_c = await s.claim_jobs(claim(queues=frozenset({"c"}), caps={"c": 0}), now)
    assert only_c == [], "an agent for queue c took jobs while c is at its limit of 2"
    only_b = await s.claim_jobs(claim(queues=frozenset({"b"}), limit=2), now)
    assert [j.queue for j in only_b] == ["b", "b"]
    assert await s.running_counts() == {"a": 3, "b": 2, "c": 2}


async def test_claims_match_required_labels(kit: StoreKit) -> None:
    s, now = kit.store, utcnow()
    plain, gpu, eu_gpu = await submit(s, {}, {"labels": {"gpu": "true"}}, {"labels": {"gpu": "true", "region": "eu"}})
    assert [j.id for j in await s.claim_jobs(claim("cpu"), now)] == [plain.id]
    assert [j.id for j in await s.claim_jobs(claim("g", labels={"gpu": "true", "region": "us"}), now)] == [gpu.id]
    assert [j.id for j in await s.claim_jobs(claim("e", labels={"gpu": "true", "region": "eu"}), now)] == [eu_gpu.id]


async def test_a_claim_leases_the_job_and_writes_an_attempt_and_an_event(kit: StoreKit) -> None:
    s, now = kit.store, utcnow()
    [job] = await submit(s, {})
    [got] = await s.claim_jobs(claim("agent-7"), now)
    assert (got.id, got.state, got.agent, got.attempt) == (job.id, "running", "agent-7", 1)
    assert got.lease_expires_at == pytest.approx(now + POLICY.lease_seconds)
    assert await s.get_job(job.id) == got
    [attempt] = await s.list_attempts(job.id)
    assert (attempt["attempt"], attempt["agent"], attempt["outcome"]) == (1, "agent-7", "running")
    running = [e for e in kit.committed if e.type == "job.running"]
    assert [e.job_id for e in running] == [job.id]
    assert orjson.loads(running[0].body)["data"]["agent"] == "agent-7"


@two_nodes
async def test_two_nodes_claiming_together_never_take_the_same_job(kit: StoreKit) -> None:
    other = await kit.another()
    now = utcnow()
    jobs = await submit(kit.store, *({} for _ in range(400)))
    taken: dict[str, list[int]] = {"n1": [], "n2": []}

    async def drain(store: Any, node: str) -> None:
        while batch := await store.claim_jobs(claim(node, limit=7), now):
            taken[node] += [j.id for j in batch]

    await asyncio.gather(drain(kit.store, "n1"), drain(other, "n2"), drain(kit.store, "n1"), drain(other, "n2"))
    both = set(taken["n1"]) & set(taken["n2"])
    assert not both, f"jobs claimed by both nodes: {sorted(both)[:20]}"
    assert sorted(taken["n1"] + taken["n2"]) == sorted(j.id for j in jobs), "every job claimed exactly once"
    assert taken["n1"] and taken["n2"], f"both nodes should have claimed some: {len(taken['n1'])}/{len(taken['n2'])}"


@two_nodes
async def test_two_nodes_keep_a_queue_limit_between_them(kit: StoreKit) -> None:
    other = await kit.another()
    now = utcnow()
    await submit(kit.store, *({"queue": "tight"} for _ in range(20)))
    await kit.store.update_queue("tight", {"concurrency": 3}, now)
    # Each node thinks it may start 3 (its engine counted before the other claimed).
    a, b = await asyncio.gather(
        kit.store.claim_jobs(claim("n1", caps={"tight": 3}), now), other.claim_jobs(claim("n2", caps={"tight": 3}), now)
    )
    assert len(a) + len(b) == 3, f"limit 3 across nodes, but n1 took {len(a)} and n2 took {len(b)}"


@two_nodes
async def test_two_nodes_a_pause_or_limit_set_on_one_holds_on_the_other_before_it_hears(kit: StoreKit) -> None:
    other = await kit.another()
    now = utcnow()
    await submit(kit.store, *({"queue": "shared"} for _ in range(10)))
    assert len(await kit.store.claim_jobs(claim(limit=1), now)) == 1  # this node has read the limits now
    await other.update_queue("shared", {"paused": True}, now)
    assert await kit.store.claim_jobs(claim(), now) == [], "claimed from a queue paused through another node"
    await other.update_queue("shared", {"paused": False, "concurrency": 3}, now)
    taken = 0
    deadline = time.monotonic() + 5
    while taken < 2 and time.monotonic() < deadline:
        taken += len(await kit.store.claim_jobs(claim(), now))  # no caps: this engine has not heard of the limit
        assert taken <= 2, f"{taken} running in a queue limited to 3 with 1 running already"
        await asyncio.sleep(0.05)
    assert taken == 2, "the limit set elsewhere is learnt within a second or so"


# ------------------------------------------------------------------ changes


async def test_change_jobs_applies_legal_decisions_and_refuses_illegal_ones(kit: StoreKit) -> None:
    s, now = kit.store, utcnow()
    a, b, c = await submit(s, {}, {}, {"delay": 100})
    out = await s.change_jobs(
        {
            a.id: lambda j: decide_pause(j, now, POLICY),
            b.id: lambda j: decide_resume(j, now, POLICY),  # not paused: Conflict
            c.id: lambda j: decide_priority(j, 9, now, POLICY),
            999_999: lambda j: decide_cancel(j, now, POLICY),
        }
    )
    assert isinstance(out[a.id], Job) and out[a.id].state == "paused"
    assert isinstance(out[b.id], Conflict) and "not paused" in out[b.id].message
    assert isinstance(out[c.id], Job) and out[c.id].priority == 9
    assert isinstance(out[999_999], NotFound)
    assert (await s.get_job(a.id)).paused_from == "queued"
    assert (await s.get_job(b.id)).state == "queued", "a refused decision changes nothing"
    await s.change_jobs({a.id: lambda j: decide_resume(j, now, POLICY)})
    assert (await s.get_job(a.id)).state == "queued"
    # A finished job cannot be paused; it can be retried.
    await s.change_jobs({a.id: lambda j: decide_cancel(j, now, POLICY)})
    refused = (await s.change_jobs({a.id: lambda j: decide_pause(j, now, POLICY)}))[a.id]
    assert isinstance(refused, Conflict) and refused.extra.get("state") == "cancelled"
    retried = (await s.change_jobs({a.id: lambda j: decide_retry(j, now, POLICY)}))[a.id]
    assert isinstance(retried, Job) and retried.state == "queued"
    types = [e.type for e in kit.committed if e.job_id == a.id]
    assert types == ["job.created", "job.paused", "job.queued", "job.cancelled", "job.queued"], types


async def test_results_finish_attempts_and_stale_ones_are_refused(kit: StoreKit) -> None:
    s, now = kit.store, utcnow()
    ok, bad = await submit(s, {}, {"max_attempts": 1})
    await s.claim_jobs(claim(), now)

    def finish(outcome: str, attempt: int = 1, **kw: Any) -> Any:
        return lambda j: decide_finish(j, RunResult(j.id, attempt, outcome, **kw), now, POLICY)

    out = await s.change_jobs(
        {ok.id: finish("succeeded", output="hi\n", result={"n": 1}), bad.id: finish("failed", error="boom")}
    )
    assert out[ok.id].state == "succeeded" and out[bad.id].state == "dead"  # type: ignore[union-attr]
    assert (await s.get_job(ok.id)).result == {"n": 1}
    [attempt] = await s.list_attempts(ok.id)
    assert (attempt["outcome"], attempt["output"], attempt["result"]) == ("succeeded", "hi\n", {"n": 1})
    stale = (await s.change_jobs({ok.id: finish("failed", attempt=1)}))[ok.id]
    assert isinstance(stale, Conflict), f"a second result for a finished attempt must be refused, got {stale}"


async def test_a_job_handed_back_is_claimed_again_with_the_same_attempt_number(kit: StoreKit) -> None:
    s, now = kit.store, utcnow()
    [job] = await submit(s, {})
    await s.claim_jobs(claim("a1"), now)
    back = (await s.change_jobs({job.id: lambda j: decide_hand_back(j, 1, now, POLICY)}))[job.id]
    assert isinstance(back, Job) and (back.state, back.attempt) == ("queued", 0)
    [again] = await s.claim_jobs(claim("a2"), now)
    assert again.attempt == 1
    [attempt] = await s.list_attempts(job.id)
    assert (attempt["agent"], attempt["outcome"], attempt["finished_at"]) == ("a2", "running", None)


# ------------------------------------------------------------------ leases


async def test_leases_extend_expire_and_fence(kit: StoreKit) -> None:
    s, now = kit.store, utcnow()
    a, b = await submit(s, {}, {})
    await s.claim_jobs(claim("agent"), now)
    stale = await s.extend_leases("agent", [(a.id, 1), (b.id, 2), (b.id, 1)], now + 100)
    assert stale == [(b.id, 2)], f"attempt 2 of job {b.id} was never claimed: it is stale; got {stale}"
    assert await s.extend_leases("someone-else", [(a.id, 1)], now + 100) == [(a.id, 1)]
    assert (await s.get_job(a.id)).lease_expires_at == now + 100
    assert await s.expired_lease_ids(now + 50, 10) == []
    assert sorted(await s.expired_lease_ids(now + 101, 10)) == [a.id, b.id]
    later = now + 101
    out = await s.change_jobs(dict.fromkeys([a.id, b.id], lambda j: decide_lease_expired(j, later, POLICY)))
    assert {j.state for j in out.values() if isinstance(j, Job)} == {"failed"}
    again = await s.change_jobs({a.id: lambda j: decide_lease_expired(j, later, POLICY)})
    assert isinstance(again[a.id], Conflict), "a lease is reaped once"
    assert await s.expired_lease_ids(later + 1000, 10) == []
    assert await s.extend_leases("agent", [(a.id, 1)], later + 100) == [(a.id, 1)]


async def test_the_runs_leased_to_an_agent_and_losing_one_by_its_attempt(kit: StoreKit) -> None:
    """What a reconnecting agent's name holds (core/agent_hub.py releases what it no longer runs);
    the release is fenced by the attempt number, so it never touches a newer attempt."""
    s, now = kit.store, utcnow()
    a, b, c = await submit(s, {}, {}, {})
    await s.claim_jobs(claim("back", 2), now)
    await s.claim_jobs(claim("other", 1), now)
    assert sorted(await s.leased_attempts("back")) == [(a.id, 1), (b.id, 1)]
    assert await s.leased_attempts("other") == [(c.id, 1)] and await s.leased_attempts("nobody") == []
    out = await s.change_jobs(
        {
            a.id: lambda j: decide_lost(j, "gone", now, POLICY, attempt=1),
            b.id: lambda j: decide_lost(j, "gone", now, POLICY, attempt=0),  # an older attempt: refused
        }
    )
    assert isinstance(out[a.id], Job) and out[a.id].state == "failed", out
    assert isinstance(out[b.id], Conflict) and "attempt 1 has started since" in out[b.id].message, out
    assert await s.leased_attempts("back") == [(b.id, 1)]


# ------------------------------------------------------------------ promotion


async def test_promote_due_jobs(kit: StoreKit) -> None:
    s, now = kit.store, utcnow()
    soon, later, never = await submit(s, {"delay": 10}, {"delay": 20}, {"delay": 1000}, now=now)
    assert await s.promote_due_jobs(now, 100) == (0, soon.run_at)
    promoted, nxt = await s.promote_due_jobs(now + 25, 1)
    assert (promoted, nxt) in ((1, later.run_at), (1, soon.run_at))
    promoted, nxt = await s.promote_due_jobs(now + 25, 100)
    assert (promoted, nxt) == (1, never.run_at)
    assert {(await s.get_job(j.id)).state for j in (soon, later)} == {"queued"}
    queued = await s.get_job(soon.id)
    assert queued.sort_key == soon.run_at, "a promoted job queues by its due time"
    assert [e.type for e in kit.committed if e.job_id == soon.id] == ["job.created", "job.queued"]


# ------------------------------------------------------------------ schedules


def a_schedule(**kw: Any) -> Schedule:
    now = utcnow()
    base: dict[str, Any] = dict(id=0, name="every-minute", kind="interval", cron=None, interval=60.0, at=None,
                                timezone="UTC", anchor=now, job={"task": NOOP, "queue": "cron"}, paused=False,
                                next_fire_at=now + 60, last_fire_at=None, created_at=now, updated_at=now)  # fmt: skip
    base.update(kw)
    return Schedule(**base)


def one_fire(fire: float) -> FirePlan:
    """The plan of an on-time fire of a schedule every 60 s."""
    return FirePlan(expected_next=fire, fire_times=[fire], next_fire_at=fire + 60)


def make_job(fire_time: float | None) -> Job:
    return new_job(run_at=fire_time)


async def test_schedules_create_read_update_delete(kit: StoreKit) -> None:
    s = kit.store
    made = await s.create_schedule(a_schedule())
    assert made.id > 0
    got = await s.get_schedule(made.id)
    assert got == made
    got.name, got.paused, got.next_fire_at = "renamed", True, None
    await s.update_schedule(got, "schedule.paused")
    assert (await s.get_schedule(made.id)).name == "renamed"
    other = await s.create_schedule(a_schedule(kind="cron", cron="*/5 * * * *", interval=None, timezone="Europe/Paris"))
    assert [x.id for x in await s.list_schedules()] == [made.id, other.id]
    assert [x.id for x in await s.due_schedules(other.next_fire_at + 1)] == [other.id], "paused ones are not due"
    assert await s.next_schedule_at() == other.next_fire_at
    await s.delete_schedule(made.id)
    with pytest.raises(NotFound):
        await s.get_schedule(made.id)
    with pytest.raises(NotFound):
        await s.delete_schedule(made.id)
    with pytest.raises(NotFound):
        await s.update_schedule(got, "schedule.updated")
    types = [e.type for e in kit.committed]
    assert types == ["schedule.created", "schedule.paused", "schedule.created", "schedule.deleted"], types


async def test_a_fire_time_makes_one_job(kit: StoreKit) -> None:
    s = kit.store
    sched = await s.create_schedule(a_schedule())
    fire = sched.next_fire_at
    assert fire is not None
    fired = await s.fire_schedule(sched, one_fire(fire), make_job)
    assert fired is not None
    [job] = fired.jobs
    assert (job.schedule_id, job.fire_time) == (sched.id, fire)
    assert await s.fire_schedule(sched, one_fire(fire), make_job) is None, "fired twice"
    fresh = await s.get_schedule(sched.id)
    assert (fresh.next_fire_at, fresh.last_fire_at, fresh.fired) == (fire + 60, fire, 1)
    manual = [await s.fire_schedule(fresh, None, make_job) for _ in range(2)]
    assert all(m is not None for m in manual), "manual runs are not limited to one"
    assert (await s.get_schedule(sched.id)).fired == 3
    listed = await s.list_jobs(JobFilter(schedule_id=sched.id), None, 10)
    assert len(listed) == 3
    fired = [e for e in kit.committed if e.type == "schedule.fired"]
    assert [orjson.loads(e.body)["data"]["fire_time"] for e in fired] == [fire, None, None]


@two_nodes
async def test_two_nodes_firing_a_schedule_together_make_one_job(kit: StoreKit) -> None:
    other = await kit.another()
    sched = await kit.store.create_schedule(a_schedule(policy=SchedulePolicy(overlap="allow")))
    for _ in range(5):
        fire = sched.next_fire_at
        assert fire is not None
        results = await asyncio.gather(
            *(st.fire_schedule(sched, one_fire(fire), make_job) for st in (kit.store, other) * 3)
        )
        made = [r for r in results if r is not None]
        assert len(made) == 1, f"fire time {fire}: {len(made)} jobs made by 6 concurrent firings"
        sched = await kit.store.get_schedule(sched.id)
    jobs = await kit.store.list_jobs(JobFilter(schedule_id=sched.id), None, 100)
    assert len(jobs) == 5 and len({j.fire_time for j in jobs}) == 5


# ------------------------------------------------------------------ events


async def test_events_are_gap_free_in_order_and_handed_to_on_commit(kit: StoreKit) -> None:
    s, now = kit.store, utcnow()
    jobs = await submit(s, *({} for _ in range(5)))
    await s.claim_jobs(claim(limit=3), now)
    await s.record_event("agent.connected", {"agent": {"name": "x"}})
    await asyncio.gather(*(s.change_jobs({j.id: functools.partial(decide_cancel, now=now, policy=POLICY)})
                           for j in jobs))  # fmt: skip
    stored = await s.events_since(0, 1000)
    assert_gap_free(stored, "stored events")
    assert [(e.seq, e.body) for e in kit.committed] == [(e.seq, e.body) for e in stored]
    assert await s.last_seq() == len(stored) == 5 + 3 + 1 + 5
    assert await s.oldest_seq() == 1
    body = orjson.loads(stored[0].body)
    assert (body["seq"], body["type"], body["job_id"], body["queue"]) == (1, "job.created", jobs[0].id, "default")
    assert body["data"]["job"]["state"] == "queued"
    assert [e.seq for e in await s.events_since(10, 3)] == [11, 12, 13]


async def test_events_since_filters(kit: StoreKit) -> None:
    s, now = kit.store, utcnow()
    a, b = await submit(s, {"queue": "x"}, {"queue": "y"})
    await s.claim_jobs(claim(), now)
    await s.record_event("agent.connected", {})

    async def seqs(flt: EventFilter) -> list[tuple[str, int | None]]:
        return [(e.type, e.job_id) for e in await s.events_since(0, 100, flt)]

    assert await seqs(EventFilter(job_ids=frozenset({a.id}))) == [("job.created", a.id), ("job.running", a.id)]
    assert await seqs(EventFilter(queues=frozenset({"y"}))) == [("job.created", b.id), ("job.running", b.id)]
    assert await seqs(EventFilter(types=frozenset({"job.running"}))) == [("job.running", a.id), ("job.running", b.id)]
    assert await seqs(EventFilter(types=frozenset({"agent.*"}))) == [("agent.connected", None)]
    assert [e.seq for e in await s.events_since(0, 1, EventFilter(queues=frozenset({"y"})))] == [2]


async def test_pruning_drops_old_events_and_never_reuses_a_seq(kit: StoreKit) -> None:
    s = kit.store
    await submit(s, {}, {})
    assert await s.prune_events(utcnow() - 3600) == 0
    assert await s.prune_events(utcnow() + 1) == 2
    assert await s.events_since(0, 10) == [] and await s.oldest_seq() == 0
    assert await s.last_seq() == 2
    await submit(s, {})
    assert [e.seq for e in await s.events_since(0, 10)] == [3]
    assert await s.oldest_seq() == 3


async def test_a_long_prune_goes_in_batches_and_writes_commit_between_them(
    kit: StoreKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pruning many events is many small transactions: a submit made while it runs commits long
    before it ends (one big DELETE held the writer for 7 s), and every old event goes."""
    s = kit.store
    monkeypatch.setattr(f"{type(s).__module__}.PRUNE_BATCH", 50)  # 1,200 events: 24 batches
    await submit(s, *[{}] * 1200)
    cut = utcnow() + 1
    prune = asyncio.create_task(s.prune_events(cut))
    while await s.oldest_seq() <= 50:  # the first batch has committed
        await asyncio.sleep(0.005)
    t0 = time.perf_counter()
    await submit(s, {"name": "during"}, now=cut + 10)
    submit_took = time.perf_counter() - t0
    assert not prune.done(), "the prune ended before the submit made during it: nothing was shown"
    assert await prune == 1200
    assert submit_took < 0.5, f"a submit during the prune took {submit_took:.2f} s"
    kept = await s.events_since(0, 10)
    assert [(e.type, e.seq) for e in kept] == [("job.created", 1201)], f"expected only the new event, got {kept}"


@two_nodes
async def test_two_nodes_write_one_gap_free_stream_that_readers_see_in_order(kit: StoreKit) -> None:
    """Events committed by two nodes at once form one stream 1..N; a reader following it never
    sees seq N+1 before N (which a PostgreSQL sequence alone would allow)."""
    seen_by_other: list[Event] = []
    other = await kit.another(on_commit=seen_by_other.extend)
    now = utcnow()
    done = asyncio.Event()
    problems: list[str] = []
    followed: list[int] = []

    async def follow() -> None:
        cursor = 0
        while True:
            finished = done.is_set()
            page = await kit.store.events_since(cursor, 500)
            expected = list(range(cursor + 1, cursor + 1 + len(page)))
            if [e.seq for e in page] != expected:
                problems.append(f"after {cursor} read {[e.seq for e in page][:10]}, expected {expected[:10]}")
                return
            followed.extend(expected)
            cursor += len(page)
            if finished and not page:
                return
            await asyncio.sleep(0)

    async def write(store: Any, n: int) -> None:
        for i in range(n):
            if i % 3 == 0:
                await store.record_event("test.tick", {"i": i})
            else:
                jobs = await submit(store, *({} for _ in range(i % 4 + 1)))
                await store.claim_jobs(claim(limit=2), now)
                await store.change_jobs({jobs[0].id: lambda j: decide_cancel(j, now, POLICY)})

    reader = asyncio.create_task(follow())
    await asyncio.gather(*(write(st, 40) for st in (kit.store, other, kit.store, other)))
    done.set()
    await asyncio.wait_for(reader, 30)
    assert not problems, problems[0]
    stored = await kit.store.events_since(0, 100_000)
    assert_gap_free(stored, "the union of both nodes' events")
    assert followed == [e.seq for e in stored]
    mine, theirs = [e.seq for e in kit.committed], [e.seq for e in seen_by_other]
    assert mine == sorted(mine) and theirs == sorted(theirs), "on_commit gets each node's events in seq order"
    assert sorted(mine + theirs) == [e.seq for e in stored], "every event went to exactly one node's on_commit"


# ------------------------------------------------------------------ queues and stats


async def test_queues_are_created_by_jobs_and_updated(kit: StoreKit) -> None:
    s, now = kit.store, utcnow()
    await submit(s, {"queue": "mail"}, {"queue": "mail", "delay": 30}, {"queue": "batch"})
    await s.claim_jobs(claim(queues=frozenset({"batch"})), now)
    queues = {q["name"]: q for q in await s.list_queues()}
    assert list(queues) == ["batch", "mail"]
    assert (queues["mail"]["depth"], queues["mail"]["scheduled"], queues["batch"]["running"]) == (1, 1, 1)
    view = await s.update_queue("mail", {"paused": True}, now)
    assert view == {"name": "mail", "paused": True, "concurrency": None, "rate_limit": None, "rate_burst": None,
                    "key_concurrency": None, "fairness_weights": None, "fair": False, "breaker_mode": None,
                    "breaker_failure_ratio": None, "breaker_min_requests": None, "breaker_window": None,
                    "breaker_reset": None}  # fmt: skip
    await s.update_queue("mail", {"concurrency": 4}, now)
    assert await s.queue_settings() == {"batch": QueueLimits(), "mail": QueueLimits(paused=True, concurrency=4)}
    assert [e.type for e in kit.committed if e.type.startswith("queue.")] == ["queue.paused", "queue.updated"]


async def test_a_queue_no_job_named_yet_takes_its_limits_and_keeps_them_for_its_first_jobs(kit: StoreKit) -> None:
    s, now = kit.store, utcnow()
    view = await s.update_queue("later", {"concurrency": 1, "paused": True}, now)
    assert (view["name"], view["concurrency"], view["paused"], view["rate_limit"]) == ("later", 1, True, None), view
    [q] = [q for q in await s.list_queues() if q["name"] == "later"]
    assert (q["depth"], q["running"], q["concurrency"], q["paused"]) == (0, 0, 1, True), q
    await submit(s, {"queue": "later"}, {"queue": "later"})
    assert (await s.queue_settings())["later"] == QueueLimits(paused=True, concurrency=1), "its first job reset them"
    [q] = [q for q in await s.list_queues() if q["name"] == "later"]
    assert q["depth"] == 2, q
    assert [e.type for e in kit.committed if e.type.startswith("queue.")] == ["queue.paused"]


async def test_stats_count_states_queues_and_the_last_minute(kit: StoreKit) -> None:
    s, now = kit.store, utcnow()
    jobs = await submit(s, {"queue": "a"}, {"queue": "a"}, {"queue": "b"}, {"queue": "b", "delay": 99})
    await s.claim_jobs(claim(limit=2), now)
    await s.change_jobs({jobs[0].id: lambda j: decide_finish(j, RunResult(j.id, 1, "succeeded"), now, POLICY)})
    stats = await s.stats(time.time())
    assert stats["by_state"] == {"succeeded": 1, "running": 1, "queued": 1, "scheduled": 1}
    assert stats["by_queue"] == {"a": {"succeeded": 1, "running": 1}, "b": {"queued": 1, "scheduled": 1}}
    assert stats["last_minute"] == {"succeeded": 1, "failed": 0, "dead": 0, "cancelled": 0}
    assert stats["jobs_per_second"] == round(1 / 60, 2)


async def test_the_schema_version_is_recorded(kit: StoreKit) -> None:
    assert kit.store.schema_version >= 1
