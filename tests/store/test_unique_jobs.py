"""Unique jobs (`unique: {key, scope, seconds}`) on both stores: one job holds a key at a time, a
duplicate answers with the holder, the key lets go when the job ends (active) or the window passes
(window), and two PostgreSQL nodes racing for one key make one job."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest

from core.errors import Conflict
from core.model import RunResult, decide_cancel, decide_finish, decide_retry, utcnow
from core.store.base import JobFilter
from tests.store.conftest import POLICY, StoreKit
from tests.store.test_conformance import claim, new_job, two_nodes


def unique(key: str, scope: str = "active", seconds: float | None = None) -> dict[str, Any]:
    return {"unique": {"key": key, "scope": scope, **({"seconds": seconds} if seconds else {})}}


async def test_an_active_key_answers_with_its_job_until_that_job_ends(kit: StoreKit) -> None:
    s, now = kit.store, utcnow()
    [(first, created)] = await s.submit_jobs([new_job(name="first", **unique("nightly"))])
    assert created and first.unique_held
    [(again, created)] = await s.submit_jobs([new_job(name="second", **unique("nightly"))])
    assert (created, again.id, again.name) == (False, first.id, "first"), f"expected job {first.id}, got {again}"
    await s.claim_jobs(claim(), now)
    [(running, created)] = await s.submit_jobs([new_job(name="third", **unique("nightly"))])
    assert (created, running.id, running.state) == (False, first.id, "running")

    done = await s.change_jobs({first.id: lambda j: decide_finish(j, RunResult(j.id, 1, "succeeded"), now, POLICY)})
    assert done[first.id].unique_held is False  # type: ignore[union-attr]
    assert (await s.get_job(first.id)).unique_held is False, "the stored key lets go as the job ends"
    [(fresh, created)] = await s.submit_jobs([new_job(name="fourth", **unique("nightly"))])
    assert created and fresh.id != first.id and fresh.unique_held

    # a retried old job does not take the key back (the fresh one holds it): no error, no second holder
    retried = (await s.change_jobs({first.id: lambda j: decide_retry(j, now, POLICY)}))[first.id]
    assert retried.state == "queued" and retried.unique_held is False  # type: ignore[union-attr]
    [(dup, created)] = await s.submit_jobs([new_job(**unique("nightly"))])
    assert (created, dup.id) == (False, fresh.id)


async def test_a_cancelled_holder_lets_go_and_one_batch_makes_one_job_per_key(kit: StoreKit) -> None:
    s, now = kit.store, utcnow()
    out = await s.submit_jobs([new_job(**unique("a")), new_job(**unique("a")), new_job(**unique("b")), new_job()])
    assert [c for _, c in out] == [True, False, True, True]
    assert out[0][0].id == out[1][0].id
    await s.change_jobs({out[0][0].id: functools.partial(decide_cancel, now=now, policy=POLICY)})
    [(after, created)] = await s.submit_jobs([new_job(**unique("a"))])
    assert created and after.id != out[0][0].id
    created_events = [e for e in kit.committed if e.type == "job.created"]
    assert len(created_events) == 4, f"one job.created per new job, got {len(created_events)}"


async def test_a_window_key_holds_for_its_seconds_whatever_the_job_does(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow() - 100  # submitted 100 s ago with a 60 s window and a 1000 s window
    [(old, _)] = await s.submit_jobs([new_job(t0, name="old", **unique("w60", "window", 60))])
    [(long, _)] = await s.submit_jobs([new_job(t0, name="long", **unique("w1000", "window", 1000))])
    await s.change_jobs({long.id: functools.partial(decide_cancel, now=t0 + 1, policy=POLICY)})
    [(again, created)] = await s.submit_jobs([new_job(**unique("w1000", "window", 1000))])
    assert (created, again.id, again.state) == (False, long.id, "cancelled"), "a window holds after its job ended"
    [(fresh, created)] = await s.submit_jobs([new_job(name="new", **unique("w60", "window", 60))])
    assert created and fresh.id != old.id, "60 s after the first submit the key is free again"
    assert (await s.get_job(old.id)).unique_held is False
    assert (await s.get_job(fresh.id)).unique_until == pytest.approx(fresh.created_at + 60)


async def test_maintenance_lets_go_of_expired_window_keys_in_batches(kit: StoreKit) -> None:
    """Without a new submit of the key, a passed window is let go by the sweep (the held-key index
    keeps only live keys); a window still running and an active key keep holding."""
    s, t0 = kit.store, utcnow() - 100
    expired = [j for j, _ in await s.submit_jobs([new_job(t0, **unique(f"w{i}", "window", 60)) for i in range(5)])]
    [(live, _)] = await s.submit_jobs([new_job(t0, **unique("long", "window", 1000))])
    [(active, _)] = await s.submit_jobs([new_job(t0, **unique("active"))])
    assert all(j.unique_held for j in [*expired, live, active])
    assert await s.release_expired_unique_keys(utcnow(), batch=2) == 5, "5 expired keys, 2 a batch: 3 batches"
    held = {j.id: j.unique_held for j in await s.list_jobs(JobFilter(), None, 10)}
    assert held == {**{j.id: False for j in expired}, live.id: True, active.id: True}, held
    assert await s.release_expired_unique_keys(utcnow()) == 0, "nothing left to let go"
    [(dup, created)] = await s.submit_jobs([new_job(**unique("long", "window", 1000))])
    assert (created, dup.id) == (False, live.id), "a window that has not passed still answers with its job"
    [(fresh, created)] = await s.submit_jobs([new_job(**unique("w0", "window", 60))])
    assert created and fresh.unique_held


async def test_a_workflow_job_whose_key_is_held_refuses_the_whole_workflow(kit: StoreKit) -> None:
    s = kit.store
    [(holder, _)] = await s.submit_jobs([new_job(**unique("etl"))])
    a, b = new_job(ref="a"), new_job(ref="b", **unique("etl"))
    with pytest.raises(Conflict) as err:
        await s.submit_workflow("nightly", [a, b], [None, None])
    assert err.value.field == "jobs[1].unique" and str(holder.id) in err.value.message, err.value.to_dict()
    assert [j.id for j in await s.list_jobs(JobFilter(), None, 10)] == [holder.id], "all or nothing: no job written"
    wf = await s.submit_workflow("nightly", [new_job(ref="a"), new_job(ref="b", **unique("etl2"))], [None, None])
    assert wf.id > 0
    [(dup, created)] = await s.submit_jobs([new_job(**unique("etl2"))])
    assert not created and dup.workflow_id == wf.id


@two_nodes
async def test_two_nodes_racing_for_one_key_make_one_job(kit: StoreKit) -> None:
    """Many submits of one key at the same moment from two PostgreSQL nodes: the unique index
    decides, not a look before the insert; each round the holder ends and the key is free again."""
    other = await kit.another()
    now = utcnow()
    for round_ in range(8):
        key = f"race-{round_}"
        outs = await asyncio.gather(
            *(store.submit_jobs([new_job(name=f"{round_}-{i}", **unique(key))])
              for i in range(6) for store in (kit.store, other))
        )  # fmt: skip
        ids = {o[0][0].id for o in outs}
        assert len(ids) == 1, f"round {round_}: {len(ids)} jobs for one key: {sorted(ids)}"
        assert sum(o[0][1] for o in outs) == 1, f"round {round_}: expected one created, got {[o[0][1] for o in outs]}"
        [holder] = ids
        await kit.store.change_jobs({holder: functools.partial(decide_cancel, now=now, policy=POLICY)})


_WAITING_ON_A_LOCK = (
    "SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
)


@two_nodes
async def test_a_key_taken_by_a_transaction_still_open_is_decided_by_the_index(kit: StoreKit) -> None:
    """The other node's insert is not committed yet when our submit looks: our look sees nothing,
    our insert waits on the index, and once theirs commits ours answers with their job."""
    import asyncpg

    from core.store import _pg_sql as sql

    theirs = new_job(name="theirs", **unique("open-tx"))
    conn = await asyncpg.connect(kit.url)
    try:
        tx = conn.transaction()
        await tx.start()
        their_id = await conn.fetchval(sql.INSERT_ONE_JOB, *sql.job_row(theirs)[1:], utcnow())
        ours = asyncio.create_task(kit.store.submit_jobs([new_job(name="ours", **unique("open-tx"))]))
        watch = await asyncpg.connect(kit.url)
        try:  # our insert waits on their row's index entry (a lock wait), it does not finish
            for _ in range(200):
                if ours.done() or await watch.fetchval(_WAITING_ON_A_LOCK):
                    break
                await asyncio.sleep(0.05)
        finally:
            await watch.close()
        assert not ours.done(), f"our submit did not wait on the open transaction's key: {ours.result()}"
        await tx.commit()
        [(got, created)] = await asyncio.wait_for(ours, 10)
    finally:
        await conn.close()
    assert (created, got.id, got.name) == (False, their_id, "theirs"), f"expected job {their_id}, got {got}"
