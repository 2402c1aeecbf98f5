"""Flow control in the stores (core/flow.py applied in the claim): one suite on SQLite and PostgreSQL;
@two_nodes tests run two PostgreSQL stores on one database, as two core nodes."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from core.flow import turn_order, turn_reason
from core.model import RunResult, decide_finish, utcnow
from tests.store.conftest import POLICY, StoreKit
from tests.store.test_conformance import claim, submit, two_nodes


async def test_a_rate_limit_starts_at_most_the_burst_then_the_rate(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, *({"queue": "mail"} for _ in range(30)), *({"queue": "free"} for _ in range(5)), now=t0)
    view = await s.update_queue("mail", {"rate_limit": 10.0, "rate_burst": 3}, t0)
    assert (view["rate_limit"], view["rate_burst"]) == (10.0, 3), view
    req = claim()
    first = await s.claim_jobs(req, t0)
    assert sorted(j.queue for j in first) == ["free"] * 5 + ["mail"] * 3, "the burst of 3, and every unlimited job"
    assert req.wake_at == pytest.approx(t0 + 0.1), "the next token comes in 1/rate s: the engine claims again then"
    again = claim()
    assert await s.claim_jobs(again, t0 + 0.05) == [], "half a token is no start"
    assert again.wake_at == pytest.approx(t0 + 0.1)
    assert len(await s.claim_jobs(claim(), t0 + 0.35)) == 3, "3.5 tokens refilled after 0.35 s at 10/s"
    assert len(await s.claim_jobs(claim(), t0 + 100)) == 3, "a quiet minute refills up to the burst, no more"
    [q] = [q for q in await s.list_queues() if q["name"] == "mail"]
    assert (q["rate_limit"], q["rate_burst"], q["running"], q["depth"]) == (10.0, 3, 9, 21), q


async def test_lifting_a_rate_limit_lets_the_queue_go_at_once(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, *({"queue": "mail"} for _ in range(10)), now=t0)
    await s.update_queue("mail", {"rate_limit": 0.5}, t0)
    assert len(await s.claim_jobs(claim(), t0)) == 1, "default burst at 0.5/s is one start"
    assert await s.claim_jobs(claim(), t0 + 1) == []
    await s.update_queue("mail", {"rate_limit": None}, t0 + 1)
    assert len(await s.claim_jobs(claim(), t0 + 1)) == 9
    settings = await s.queue_settings()
    assert settings["mail"].rate_limit is None and not settings["mail"].held


async def test_rate_limit_concurrency_and_pause_together(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, *({"queue": "api"} for _ in range(20)), now=t0)
    await s.update_queue("api", {"rate_limit": 100.0, "rate_burst": 10, "concurrency": 4}, t0)
    got = await s.claim_jobs(claim(caps={"api": 4}), t0)
    assert len(got) == 4, "the concurrency limit is the tighter one"
    await s.update_queue("api", {"paused": True}, t0)
    assert await s.claim_jobs(claim(paused=frozenset({"api"})), t0 + 1) == []
    limits, running, bucket = await s.queue_flow("api")
    assert (limits.paused, limits.concurrency, limits.rate_limit, running) == (True, 4, 100.0, 4)
    assert bucket.room(limits, t0) == 6, "4 of the 10 tokens were spent"


async def test_a_rate_limit_only_holds_the_queues_the_claim_may_take(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, *({"queue": "mail"} for _ in range(3)), {"queue": "other"}, now=t0)
    await s.update_queue("mail", {"rate_limit": 1.0, "rate_burst": 1}, t0)
    only_other = await s.claim_jobs(claim(queues=frozenset({"other"})), t0)
    assert [j.queue for j in only_other] == ["other"]
    assert len(await s.claim_jobs(claim(queues=frozenset({"mail"})), t0)) == 1, "its token was not spent by others"


@two_nodes
async def test_two_nodes_share_one_rate_limit(kit: StoreKit) -> None:
    """Both nodes claim as fast as they can for 2 (simulated) seconds: together they start at most
    burst + rate * elapsed jobs, and the bucket is not wasted (they start about that many)."""
    other = await kit.another()
    t0 = utcnow()
    await submit(kit.store, *({"queue": "shared"} for _ in range(500)), now=t0)
    await kit.store.update_queue("shared", {"rate_limit": 50.0, "rate_burst": 5}, t0)
    taken: dict[str, int] = {"n1": 0, "n2": 0}

    async def drain(store: Any, node: str) -> None:
        for step in range(200):  # every 10 ms of simulated time, each node claims
            taken[node] += len(await store.claim_jobs(claim(node, limit=20), t0 + step * 0.01))
            await asyncio.sleep(0)

    await asyncio.gather(drain(kit.store, "n1"), drain(other, "n2"))
    total = taken["n1"] + taken["n2"]
    assert total <= 5 + 50 * 1.99 + 1e-6, f"two nodes together started {total}: over the shared limit ({taken})"
    assert total >= 5 + 50 * 1.99 - 2, f"only {total} started: the nodes wasted tokens ({taken})"


@two_nodes
async def test_a_limited_queue_with_nothing_queued_does_not_hold_up_other_queues_claims(kit: StoreKit) -> None:
    """A claim locks (to its commit) only the limited queues it may take a job from. Every claim used to
    take the lock of every limited queue, so one node's claim of a limited queue made every other
    node's claims of every queue wait for its commit, even with nothing queued in the limited one."""
    import asyncpg

    t0 = utcnow()
    await submit(kit.store, {"queue": "api"}, {"queue": "mail"}, now=t0)
    await kit.store.update_queue("api", {"concurrency": 5}, t0)
    assert len(await kit.store.claim_jobs(claim(queues=frozenset({"api"})), t0)) == 1, "api: nothing queued now"
    other = await asyncpg.connect(kit.url)
    lock = other.transaction()
    await lock.start()
    try:  # another node's claim holds api's lock (LOCK_QUEUES) until its commit
        await other.execute("SELECT pg_advisory_xact_lock(7242, hashtext('api'))")
        got = await asyncio.wait_for(kit.store.claim_jobs(claim(), t0), 20)
    except TimeoutError:
        raise AssertionError(
            "the claim of queue mail waited for the lock of queue api, which has nothing queued"
        ) from None
    finally:
        await lock.rollback()
        await other.close()
    assert [j.queue for j in got] == ["mail"], got


# ------------------------------------------------------------------ per-key concurrency


async def finish(s: Any, jobs: list[Any], now: float) -> None:
    await s.change_jobs({j.id: (lambda j: decide_finish(j, RunResult(j.id, j.attempt, "succeeded"), now, POLICY))
                         for j in jobs})  # fmt: skip


async def test_a_per_key_limit_caps_each_key_and_leaves_jobs_without_a_key_alone(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    specs = [{"queue": "cust", "concurrency_key": k} for k in "AAAAABBBBB"] + [{"queue": "cust"}] * 2
    await submit(s, *specs, now=t0)
    await s.update_queue("cust", {"key_concurrency": 2}, t0)
    first = await s.claim_jobs(claim(), t0)
    assert sorted(str(j.concurrency_key) for j in first) == ["A", "A", "B", "B", "None", "None"], first
    assert await s.claim_jobs(claim(), t0) == [], "both keys are at their limit of 2"
    await finish(s, [j for j in first if j.concurrency_key == "A"][:1], t0)
    [next_a] = await s.claim_jobs(claim(), t0)
    assert next_a.concurrency_key == "A", "a finished A makes room for one more A, and only A"
    assert await s.key_running("cust", ["A", "B"]) == {"A": 2, "B": 2}


async def test_a_key_with_a_huge_backlog_at_its_limit_does_not_hide_the_keys_behind_it(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, *([{"queue": "cust", "concurrency_key": "big"}] * 2000), now=t0)
    await submit(s, {"queue": "cust", "concurrency_key": "small"}, now=t0 + 1)
    await s.update_queue("cust", {"key_concurrency": 1}, t0)
    got = await s.claim_jobs(claim(), t0 + 2)
    assert sorted(str(j.concurrency_key) for j in got) == ["big", "small"], [j.concurrency_key for j in got]


@two_nodes
async def test_two_nodes_keep_a_per_key_limit_between_them(kit: StoreKit) -> None:
    other = await kit.another()
    t0 = utcnow()
    await submit(kit.store, *({"queue": "cust", "concurrency_key": k} for k in "ABC" * 20), now=t0)
    await kit.store.update_queue("cust", {"key_concurrency": 3}, t0)
    got = await asyncio.gather(*(st.claim_jobs(claim(n, limit=4), t0) for st, n in
                                 [(kit.store, "n1"), (other, "n2")] * 3))  # fmt: skip
    per_key = Counter(j.concurrency_key for batch in got for j in batch)
    assert per_key == {"A": 3, "B": 3, "C": 3}, f"limit 3 per key across nodes, got {dict(per_key)}"


@two_nodes
async def test_racing_claims_of_two_nodes_never_pass_a_per_key_or_a_queue_limit(kit: StoreKit) -> None:
    """Eight claims at once, four on each node (each its own connection), round after round: no key and
    no queue goes past its limit, and once they are done the room they left (a claim cut by its own
    slots gives back what it reserved) is there for the next claim: each key and the queue fill to
    their limits. Without the queues' lock the claims count together and each takes the room they all saw."""
    other = await kit.another()
    t0 = utcnow()
    await submit(kit.store, *({"queue": "cust", "concurrency_key": k} for k in "ABCD" * 30), now=t0)
    await submit(kit.store, *({"queue": "api"} for _ in range(100)), now=t0)
    await kit.store.update_queue("cust", {"key_concurrency": 2}, t0)
    await kit.store.update_queue("api", {"concurrency": 7}, t0)
    for round_ in range(4):
        now = t0 + round_
        got = await asyncio.gather(*(st.claim_jobs(claim(n, limit=5), now) for st, n in
                                     [(kit.store, "n1"), (other, "n2")] * 4))  # fmt: skip
        jobs = [j for batch in got for j in batch]
        per_key = Counter(j.concurrency_key for j in jobs if j.queue == "cust")
        assert all(n <= 2 for n in per_key.values()), f"round {round_}: limit 2 a key, got {dict(per_key)}"
        assert sum(j.queue == "api" for j in jobs) <= 7, (
            f"round {round_}: limit 7 in api, got {Counter(j.queue for j in jobs)}"
        )
        jobs += await kit.store.claim_jobs(claim("n1", limit=40), now)  # what the racing claims left
        per_key = Counter(j.concurrency_key for j in jobs if j.queue == "cust")
        assert per_key == {"A": 2, "B": 2, "C": 2, "D": 2}, f"round {round_}: limit 2 a key, got {dict(per_key)}"
        assert sum(j.queue == "api" for j in jobs) == 7, (
            f"round {round_}: limit 7 in api, got {Counter(j.queue for j in jobs)}"
        )
        await finish(kit.store, jobs, now)


@two_nodes
async def test_a_reservation_a_dead_node_left_holds_its_room_until_it_expires(kit: StoreKit) -> None:
    """Node 1 reserved api's room (its claim's first transaction) and died before its claim: the room
    stays taken (never over the limit) until the reservation expires, then node 2 gets it."""
    from core.flow import RESERVED_FOR

    dying = await kit.another()
    t0 = utcnow()
    await submit(kit.store, *({"queue": "api"} for _ in range(10)), now=t0)
    await kit.store.update_queue("api", {"concurrency": 4}, t0)
    plan = await dying.reserve_claim(claim("n1", limit=10), t0)
    assert plan.rooms == {"api": 4}, plan
    await dying.close()  # its pool goes: the claim never comes
    assert await kit.store.claim_jobs(claim("n2"), t0 + 1) == [], "the dead node's reservation still counts"
    got = await kit.store.claim_jobs(claim("n2"), t0 + RESERVED_FOR + 1)
    assert len(got) == 4, "its reservation expired: the room is back"
    assert await kit.store.claim_jobs(claim("n2"), t0 + RESERVED_FOR + 2) == [], "4 running: at the limit"


@two_nodes
async def test_a_claim_whose_reservation_expired_and_was_taken_back_starts_none_of_it(kit: StoreKit) -> None:
    """Node 1 stalls between its reservation and its claim past the expiry; node 2 takes the room back
    and fills it. When node 1's claim runs at last, it takes nothing of that queue (else 8 would run)."""
    from core.flow import RESERVED_FOR

    slow = await kit.another()
    t0 = utcnow()
    await submit(kit.store, *({"queue": "api"} for _ in range(10)), {"queue": "free"}, now=t0)
    await kit.store.update_queue("api", {"concurrency": 4}, t0)
    req = claim("n1", limit=10)
    plan = await slow.reserve_claim(req, t0)
    late = t0 + RESERVED_FOR + 1
    assert len(await kit.store.claim_jobs(claim("n2", queues=frozenset({"api"})), late)) == 4
    got = await slow.claim_reserved(req, plan, late)
    assert [j.queue for j in got] == ["free"], "the stalled claim took nothing of api, whose room went to node 2"
    [api] = [q for q in await kit.store.list_queues() if q["name"] == "api"]
    assert api["running"] == 4, api


@two_nodes
async def test_a_claim_counts_in_its_own_transaction_until_another_holds_the_queues_lock(kit: StoreKit) -> None:
    """Alone, a claim of a limited queue counts and claims in one transaction: no reservation is written.
    One that finds the queue's lock taken (another node's claim counting) waits for it through a
    reservation and still gets its jobs; the node's next claims reserve first (the lock is contended)."""
    import asyncpg

    async def reservations() -> int:
        return int(await kit.store._fetchval("SELECT count(*) FROM claim_reservations"))

    t0 = utcnow()
    await submit(kit.store, *({"queue": "api"} for _ in range(10)), now=t0)
    await kit.store.update_queue("api", {"concurrency": 6}, t0)
    assert len(await kit.store.claim_jobs(claim(limit=2), t0)) == 2
    assert await reservations() == 0, "a claim whose lock was free counts in its own transaction"
    other = await asyncpg.connect(kit.url)
    lock = other.transaction()
    await lock.start()
    try:  # another node's claim holds api's lock until its commit
        await other.execute("SELECT pg_advisory_xact_lock(7242, hashtext('api'))")
        waiting = asyncio.ensure_future(kit.store.claim_jobs(claim(limit=2), t0))
        await asyncio.sleep(0.3)
        assert not waiting.done(), "the claim did not wait for the queue's lock"
    finally:
        await lock.rollback()
        await other.close()
    assert len(await waiting) == 2, "the claim that waited got its jobs"
    assert await reservations() == 1, "it reserved (its reservation is folded away by the next claim)"
    assert len(await kit.store.claim_jobs(claim(limit=5), t0)) == 2, "6 running: at the limit"
    assert await reservations() == 1, "the lock was taken a moment ago: the next claim reserved too"


@two_nodes
async def test_results_held_for_a_claim_of_a_limited_queue_still_share_its_commit(kit: StoreKit) -> None:
    """The engine holds the results that freed an agent's slots until the claim that fills them is
    queued (Engine.pair_with_claim), and lets them go as the claim starts: one commit for both. A
    limited queue's claim reserves first (a transaction of its own); the results wait for it."""
    commits: list[list[str]] = []
    s = await kit.another(on_commit=lambda events: commits.append(sorted({e.type for e in events})))
    t0 = utcnow()
    await submit(s, {"queue": "other"}, {"queue": "api"}, now=t0)
    await s.update_queue("api", {"concurrency": 5}, t0)
    [first] = await s.claim_jobs(claim(queues=frozenset({"other"})), t0)
    commits.clear()
    assert s.hold_writes()
    finishing = asyncio.ensure_future(finish(s, [first], t0))
    await asyncio.sleep(0)  # its write is queued, held
    asyncio.get_running_loop().call_soon(s.release_writes)  # as Engine._dispatch_round does
    got = await s.claim_jobs(claim(), t0)
    await finishing
    assert [j.queue for j in got] == ["api"]
    assert len(commits) == 1 and {"job.succeeded", "job.running"} <= set(commits[0]), commits


async def test_a_claim_that_takes_less_than_its_room_leaves_the_rest_of_the_rate_to_the_next(kit: StoreKit) -> None:
    """A rate-limited claim reserves the bucket's tokens (PostgreSQL) but finds 2 jobs: the 3 it did not
    use go back to the bucket, so the next claim at the same moment starts 3 (burst 5)."""
    s, t0 = kit.store, utcnow()
    await submit(s, {"queue": "mail"}, {"queue": "mail"}, now=t0)
    await s.update_queue("mail", {"rate_limit": 1.0, "rate_burst": 5}, t0)
    assert len(await s.claim_jobs(claim(), t0)) == 2
    await submit(s, *({"queue": "mail"} for _ in range(5)), now=t0)
    assert len(await s.claim_jobs(claim(), t0)) == 3, "5 tokens, 2 used: 3 left"
    assert await s.claim_jobs(claim(), t0) == []


@two_nodes
async def test_two_nodes_claiming_a_fair_queue_at_once_take_different_jobs_and_fill_their_claims(kit: StoreKit) -> None:
    """A fair claim reserves the jobs it picked: the other node's pick, a moment later, passes over them
    (it would otherwise pick the same heads and find them taken by the first claim)."""
    other = await kit.another()
    t0 = utcnow()
    await submit(kit.store, *({"queue": "t", "fairness_key": k} for k in "AB" * 40), now=t0)
    got = await asyncio.gather(*(st.claim_jobs(claim(n, limit=10), t0) for st, n in
                                 [(kit.store, "n1"), (other, "n2")] * 3))  # fmt: skip
    assert [len(b) for b in got] == [10] * 6, [len(b) for b in got]
    ids = [j.id for b in got for j in b]
    assert len(set(ids)) == 60
    assert Counter(j.fairness_key for b in got for j in b) == {"A": 30, "B": 30}


# ------------------------------------------------------------------ fair share


async def test_claims_rotate_between_fairness_keys_so_a_flood_does_not_delay_a_small_tenant(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, *([{"queue": "t", "fairness_key": "A"}] * 300), now=t0)
    order = [j.fairness_key for _ in range(10) for j in await s.claim_jobs(claim(limit=1), t0 + 1)]
    assert order == ["A"] * 10, "alone, A takes every claim"
    await submit(s, *([{"queue": "t", "fairness_key": "B"}] * 10), now=t0 + 2)
    order = [j.fairness_key for _ in range(20) for j in await s.claim_jobs(claim(limit=1), t0 + 3)]
    assert order == ["B", "A"] * 10 or order == ["A", "B"] * 10, f"A's 290 waiting must not hold B back: {order}"
    batch = await s.claim_jobs(claim(limit=10), t0 + 4)
    assert [j.fairness_key for j in batch] == ["A"] * 10, "B is done: A has the queue again"
    [q] = [q for q in await s.list_queues() if q["name"] == "t"]
    assert q["fair"] is True, q


async def test_a_batch_claim_is_shared_between_keys_and_weights_divide_it(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, *([{"queue": "t", "fairness_key": "gold"}] * 200), now=t0)
    await submit(s, *([{"queue": "t", "fairness_key": "free"}] * 200), now=t0 + 1)
    batch = await s.claim_jobs(claim(limit=20), t0 + 2)
    assert Counter(j.fairness_key for j in batch) == {"gold": 10, "free": 10}
    await s.update_queue("t", {"fairness_weights": {"gold": 3}}, t0 + 2)
    taken = Counter([j.fairness_key for _ in range(40) for j in await s.claim_jobs(claim(limit=1), t0 + 3)])
    assert taken == {"gold": 30, "free": 10}, f"weight 3 against 1: 3 starts for every 1, got {dict(taken)}"


async def test_a_higher_priority_goes_first_in_a_fair_queue(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, *([{"queue": "t", "fairness_key": "A"}] * 5), now=t0)
    [urgent] = await submit(s, {"queue": "t", "fairness_key": "A", "priority": 5}, now=t0 + 1)
    await submit(s, *([{"queue": "t", "fairness_key": "B"}] * 5), now=t0 + 1)
    first = await s.claim_jobs(claim(limit=1), t0 + 2)
    assert [j.id for j in first] == [urgent.id], "priority 5 beats the rotation, whatever the key"


async def test_a_fair_claim_takes_more_of_one_key_than_it_first_read_when_the_rotation_wants_them(
    kit: StoreKit,
) -> None:
    """A fair claim reads a few jobs of each key (about an even share of the room); a key that the pick
    runs out of while more of its jobs wait is read again, so a whole claim can go to one key."""
    s, t0 = kit.store, utcnow()
    for key in ("A", "B", "C", "D"):
        await submit(s, *([{"queue": "t", "fairness_key": key}] * 60), now=t0)
    urgent = await submit(s, *([{"queue": "t", "fairness_key": "U", "priority": 5}] * 50), now=t0 + 1)
    batch = await s.claim_jobs(claim(limit=40), t0 + 2)
    assert [j.id for j in batch] == [j.id for j in urgent[:40]], "40 of U's priority-5 jobs, in order, before any other"
    batch = await s.claim_jobs(claim(limit=40), t0 + 3)
    assert [j.id for j in batch[:10]] == [j.id for j in urgent[40:]], "then U's last 10, then the rotation"
    assert len(batch) == 40 and {j.fairness_key for j in batch[10:]} == {"A", "B", "C", "D"}


async def test_a_key_back_from_idle_shares_from_now_on_it_saved_no_credit(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, {"queue": "t", "fairness_key": "B"}, now=t0)
    assert len(await s.claim_jobs(claim(), t0)) == 1
    await submit(s, *([{"queue": "t", "fairness_key": "A"}] * 50), now=t0 + 1)
    assert len(await s.claim_jobs(claim(limit=30), t0 + 2)) == 30, "A alone for 30 starts"
    await submit(s, *([{"queue": "t", "fairness_key": "B"}] * 10), now=t0 + 3)
    order = [j.fairness_key for _ in range(6) for j in await s.claim_jobs(claim(limit=1), t0 + 4)]
    assert Counter(order) == {"A": 3, "B": 3}, f"B, idle while A ran 30, must not get 30 in a row: {order}"


async def test_the_turns_waiting_for_reads_are_the_order_the_claims_then_take(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, *([{"queue": "t", "fairness_key": "A"}] * 5), now=t0)
    assert len(await s.claim_jobs(claim(limit=2), t0)) == 2, "A is served twice"
    await submit(s, *([{"queue": "t", "fairness_key": "C"}] * 2), now=t0 + 1)
    await submit(s, *([{"queue": "t", "fairness_key": "B"}] * 2), {"queue": "t"}, now=t0 + 2)
    rotation, heads, more = await s.fair_turns("t", t0 + 3)
    assert (sorted(str(h.fairness_key) for h in heads), more) == (["A", "B", "C", "None"], False), heads
    limits = (await s.queue_settings())["t"]
    order = turn_order(heads, limits, rotation, t0 + 3, POLICY.aging_seconds_per_priority)
    assert order[-1] == "A", order
    taken = [j.fairness_key for _ in range(4) for j in await s.claim_jobs(claim(limit=1), t0 + 3)]
    assert taken == order, f"the claims took {taken}, the turns said {order}"
    assert turn_reason("t", "A", order, more) == ("fairness key 'A' waits its turn: of the 4 fairness keys with "
                                                  "jobs waiting in queue 't' (its jobs without a key count as one), "
                                                  "3 go before it")  # fmt: skip


async def test_key_usage_counts_running_jobs_per_concurrency_key_and_waiting_per_fairness_key(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, *([{"queue": "t", "concurrency_key": "acme", "fairness_key": "acme"}] * 5),
                 *([{"queue": "t", "concurrency_key": "zeta", "fairness_key": "zeta"}] * 3),
                 {"queue": "other", "concurrency_key": "acme", "fairness_key": "acme"}, now=t0)  # fmt: skip
    await s.update_queue("t", {"key_concurrency": 2}, t0)
    started = await s.claim_jobs(claim(queues=frozenset({"t"})), t0 + 1)
    assert sorted(j.concurrency_key for j in started) == ["acme", "acme", "zeta", "zeta"]
    usage = await s.key_usage("t")
    assert usage["running_by_concurrency_key"] == [{"key": "acme", "running": 2}, {"key": "zeta", "running": 2}]
    waiting = {w["key"]: (w["waiting"], w["served"]) for w in usage["waiting_by_fairness_key"]}
    assert waiting == {"acme": (3, 2.0), "zeta": (1, 2.0)}, "2 starts each at weight 1: served 2"
    assert (usage["waiting_counted"], usage["waiting_capped"]) == (4, False)
    capped = await s.key_usage("t", cap=2)
    assert (capped["waiting_counted"], capped["waiting_capped"]) == (2, True), "a huge backlog is counted up to the cap"
    assert (await s.key_usage("nothing-here"))["running_by_concurrency_key"] == []


async def test_a_breaker_opens_in_the_store_and_gives_its_trial_to_one_job_only(kit: StoreKit) -> None:
    from core.breaker import BreakerSettings

    s, settings = kit.store, {"hooks": BreakerSettings(reset=1.5, min_requests=3)}
    turns = await s.record_breaker_outcomes([("hooks", "h:80", i, False) for i in range(3)], settings)
    assert [t[0] for t in turns] == ["breaker.opened"], turns
    [b] = await s.list_breakers(open_only=True)
    assert (b.queue, b.key, b.opened, b.probe_job) == ("hooks", "h:80", 1, None)
    assert [e.type for e in kit.committed if e.type.startswith("breaker.")] == ["breaker.opened"]
    early = await s.take_breaker_trials({("hooks", "h:80"): 10}, settings)
    assert early[("hooks", "h:80")].probe_job is None, "no trial before the reset time"
    await asyncio.sleep(1.55)
    others = [s] if kit.kind == "sqlite" else [s, await kit.another()]
    got = await asyncio.gather(*(o.take_breaker_trials({("hooks", "h:80"): 20 + i}, settings)
                                 for i, o in enumerate(others * 3)))  # fmt: skip
    [trial] = {g[("hooks", "h:80")].probe_job for g in got}  # every caller sees the same one trial
    assert trial in range(20, 26), trial
    other = 20 if trial != 20 else 21
    turns = await s.record_breaker_outcomes([("hooks", "h:80", other, True), ("hooks", "h:80", trial, True)], settings)
    assert [t[0] for t in turns] == ["breaker.closed"], "only the trial's outcome closes it"
    assert await s.list_breakers(open_only=True) == []
