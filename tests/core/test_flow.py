"""The pure flow-control decisions (core/flow.py): the token bucket, a claim's room, the waiting reason."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.flow import (
    AgentClaim,
    Bucket,
    Candidate,
    KeyedPick,
    QueueLimits,
    Rotation,
    Share,
    agent_claims,
    claim_room,
    default_burst,
    fair_per_key,
    forgettable,
    held_by_limits,
    parse_bulkheads,
    pick,
    waiting_reason,
)

FULL = Bucket(None, None)


def test_a_new_bucket_is_full_and_refills_at_the_rate_up_to_the_burst() -> None:
    lim = QueueLimits(rate_limit=10.0, rate_burst=3)
    assert FULL.room(lim, 100.0) == 3
    empty = FULL.take(lim, 100.0, 3)
    assert empty.room(lim, 100.0) == 0
    assert empty.next_token_at(lim, 100.0) == pytest.approx(100.1)
    assert empty.room(lim, 100.25) == 2, "2.5 tokens after 0.25 s at 10/s: two whole starts"
    assert empty.room(lim, 1000.0) == 3, "never more than the burst"


def test_a_slow_rate_says_one_every_n_seconds_and_the_default_burst_is_a_tenth_of_a_second() -> None:
    lim = QueueLimits(rate_limit=0.5)
    assert lim.burst == 1 and default_burst(200.0) == 20 and default_burst(10.0) == 1
    held = FULL.take(lim, 0.0, 1)
    why = waiting_reason("mail", lim, 0, held, 1.0)
    assert why == "queue 'mail' is at its rate limit of 0.5/s (one every 2 s, burst 1)", why
    assert waiting_reason("mail", lim, 0, held, 2.0) is None, "a token is back after 2 s"


def test_a_clock_a_moment_behind_does_not_refill_the_bucket_twice() -> None:
    lim = QueueLimits(rate_limit=1.0, rate_burst=1)
    b = FULL.take(lim, 50.0, 1)  # one node at t=50
    late = b.take(lim, 49.0, 0)  # another node whose clock says 49 saves what it saw
    assert late.at == 50.0 and late.room(lim, 50.5) == 0 and late.room(lim, 51.0) == 1


def test_claim_room_is_the_least_of_asked_concurrency_and_tokens() -> None:
    lim = QueueLimits(concurrency=5, rate_limit=100.0, rate_burst=50)
    assert claim_room(lim, 2, FULL, 0.0, 100) == 3
    assert claim_room(QueueLimits(rate_limit=100.0, rate_burst=50), 0, FULL, 0.0, 7) == 7
    assert claim_room(QueueLimits(paused=True), 0, FULL, 0.0, 7) == 0
    assert claim_room(lim, 9, FULL, 0.0, 100) == 0, "over the limit (lowered while running) is no room, not negative"
    assert waiting_reason("q", lim, 5, FULL, 0.0) == "queue 'q' is at its concurrency limit: 5 of 5 running"


@given(
    rate=st.floats(0.01, 1000.0),
    burst=st.integers(1, 100),
    steps=st.lists(st.tuples(st.floats(0.0, 5.0), st.integers(0, 200)), min_size=1, max_size=50),
)
def test_starts_never_exceed_rate_times_time_plus_burst(
    rate: float, burst: int, steps: list[tuple[float, int]]
) -> None:
    """Whatever the claims ask and whenever they come, a bucket lets at most burst + rate * elapsed start."""
    lim = QueueLimits(rate_limit=rate, rate_burst=burst)
    b, now, started = FULL, 0.0, 0
    for gap, asked in steps:
        now += gap
        n = claim_room(lim, 0, b, now, asked)
        assert 0 <= n <= asked
        b = b.take(lim, now, n)
        started += n
        assert started <= burst + rate * now + 1e-6, (started, burst, rate, now)


@given(
    rate=st.floats(0.01, 1000.0),
    burst=st.integers(1, 100),
    steps=st.lists(st.tuples(st.floats(0.0, 5.0), st.integers(0, 200), st.integers(0, 200)), min_size=1, max_size=50),
)
def test_reserving_and_refunding_what_a_claim_did_not_start_never_lets_more_start_than_the_rate(
    rate: float, burst: int, steps: list[tuple[float, int, int]]
) -> None:
    """A claim takes its room from the bucket (its reservation), starts fewer, and the next claim gives the
    unused part back: the starts stay within burst + rate * elapsed, and the bucket never holds more than
    the burst (the unused tokens come back, never more)."""
    lim = QueueLimits(rate_limit=rate, rate_burst=burst)
    b, now, started, unused = FULL, 0.0, 0, 0
    for gap, asked, found in steps:
        now += gap
        b = b.refund(lim, now, unused)
        assert b.level(lim, now) <= burst + 1e-9
        n = claim_room(lim, 0, b, now, asked)
        b = b.take(lim, now, n)
        took = min(n, found)  # the claim found fewer jobs than it reserved room for
        started += took
        unused = n - took
        assert started <= burst + rate * now + 1e-6, (started, burst, rate, now)
    refunded = FULL.take(lim, 0.0, burst).refund(lim, 0.0, burst)
    assert refunded.room(lim, 0.0) == burst, "nothing started: every token is back"


def _cands(key: str | None, n: int, start: float = 0.0, ck: str | None = None, priority: int = 0) -> list[Candidate]:
    return [Candidate(int(start * 1000) + i, start + i, priority, key, ck if ck else key) for i in range(n)]


@given(
    sizes=st.lists(st.integers(0, 30), min_size=1, max_size=6),
    room=st.integers(0, 60),
    limit=st.integers(0, 5),
    fair=st.booleans(),
)
def test_pick_never_exceeds_the_room_or_a_key_limit_and_takes_each_job_once(
    sizes: list[int], room: int, limit: int, fair: bool
) -> None:
    cands: dict[str | None, list[Candidate]] = {f"k{i}": _cands(f"k{i}", n, i * 100.0) for i, n in enumerate(sizes)}
    lim = QueueLimits(key_concurrency=limit, fair=fair)
    running = {"k0": min(limit, 1)}
    got = pick(cands, room, limits=lim, key_running=running, rotation=Rotation(), now=1e6, aging=60.0)
    assert len(got) <= room and len({c.id for c in got}) == len(got)
    per_key = {k: sum(1 for c in got if c.concurrency_key == k) + running.get(k, 0) for k in cands if k}
    assert all(n <= limit for n in per_key.values()), per_key
    room_left = sum(min(n, limit - running.get(f"k{i}", 0)) for i, n in enumerate(sizes))
    assert len(got) == min(room, room_left), "it takes all it may: no slot left idle while a job could use it"


def test_rotation_alternates_and_weights_divide_the_starts() -> None:
    cands: dict[str | None, list[Candidate]] = {"a": _cands("a", 50), "b": _cands("b", 50, 1000.0)}
    rot = Rotation()
    got = pick(cands, 6, limits=QueueLimits(fair=True), key_running={}, rotation=rot, now=2000.0, aging=60.0)
    assert [c.fairness_key for c in got] == ["a", "b"] * 3, "b's newer jobs are not behind a's backlog"
    assert not rot.shares and rot.vtime == 0.0, "pick is pure: charge records what was claimed"
    heavy = QueueLimits(fair=True, fairness_weights={"b": 3.0})
    got = pick(cands, 8, limits=heavy, key_running={}, rotation=Rotation(), now=2000.0, aging=60.0)
    assert Counter(c.fairness_key for c in got) == {"b": 6, "a": 2}


def test_a_key_that_waited_climbs_a_band_per_aging_period() -> None:
    urgent = {"hi": _cands("hi", 10, 1000.0, priority=2), "lo": _cands("lo", 1, 1000.0, priority=0)}
    got = pick(urgent, 3, limits=QueueLimits(fair=True), key_running={}, rotation=Rotation(), now=1000.0,
               aging=60.0)  # fmt: skip
    assert [c.fairness_key for c in got] == ["hi"] * 3, "priority 2 before priority 0"
    shares = {"hi": Share(5.0, 1000.0 + 200)}  # hi started a job a moment ago; lo has waited 200 s (> 2 bands)
    got = pick(urgent, 1, limits=QueueLimits(fair=True), key_running={}, rotation=Rotation(0.0, shares),
               now=1200.0, aging=60.0)  # fmt: skip
    assert [c.fairness_key for c in got] == ["lo"], "3 bands of waiting lift priority 0 over a busy priority 2"


@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=8),
    room=st.integers(1, 60),
    served=st.lists(st.floats(0, 6), min_size=8, max_size=8),
    heavy=st.sampled_from([None, {"k1": 4.0}, {"k0": 0.25, "k2": 2.0}]),
    keyless=st.booleans(),
)
def test_a_fair_pick_from_a_few_jobs_per_key_read_further_when_dry_is_the_pick_from_every_job(
    sizes: list[int], room: int, served: list[float], heavy: dict[str, float] | None, keyless: bool
) -> None:
    """A fair claim reads each key's next fair_per_key jobs, not all; a key the pick runs dry is read again
    (twice as many, up to the room) and the pick repeated: the result must be the pick with every job read."""
    now = 1e6
    every: dict[str | None, list[Candidate]] = {
        (None if keyless and i == 0 else f"k{i}"): _cands(None if keyless and i == 0 else f"k{i}", n, now - 500 + i)
        for i, n in enumerate(sizes)
    }
    every = {k: v for k, v in every.items() if v}
    lim = QueueLimits(fair=True, fairness_weights=heavy)
    shares = {f"k{i}": Share(s, now - 30) for i, s in enumerate(served) if i % 2}

    def rotation() -> Rotation:
        return Rotation(1.0, dict(shares))

    per = fair_per_key(room, [k for k in every if k is not None], heavy)
    read = {k: v[:per] for k, v in every.items()}
    picking = KeyedPick("q", room, lim, {}, rotation(), now, 60.0, read, per)
    for _ in range(20):
        more = picking.step()
        if not more:
            break
        for k, n in more.items():
            read[k] = every[k][:n]
    got = picking.claim.picked
    whole = pick(every, room, limits=lim, key_running={}, rotation=rotation(), now=now, aging=60.0)
    assert [c.id for c in got] == [c.id for c in whole]


def test_bulkheads_parse_and_refuse_what_makes_no_sense() -> None:
    assert parse_bulkheads("emails:50,reports:10,*") == (["emails", "reports", "*"], {"emails": 50, "reports": 10})
    assert parse_bulkheads("a,b") == (["a", "b"], {})
    for bad, words in (("emails:0", "at least 1"), ("emails:x", "whole number"), ("*:5", "left over"),
                       (":5", "queue name"), ("a:1,a:2", "named twice")):  # fmt: skip
        with pytest.raises(ValueError, match=words):
            parse_bulkheads(bad)


def test_an_agent_with_bulkheads_claims_each_queue_within_its_slots_and_shares_the_rest() -> None:
    plain = agent_claims(frozenset({"a"}), 10, {}, {}, 3, 7)
    assert plain == [AgentClaim(frozenset({"a"}), 7)]
    # emails keeps 5, reports 2; 3 more shared by any other queue. reports runs 2 (full), emails 1, other 2.
    claims = agent_claims(None, 10, {"emails": 5, "reports": 2}, {"emails": 1, "reports": 2}, 5, 5)
    numbered, shared = claims
    assert (
        numbered.queues == frozenset({"emails"})
        and numbered.limit == 4
        and numbered.caps == {"emails": 4, "reports": 0}
    )
    assert shared == AgentClaim(None, 1, leave=frozenset({"emails", "reports"})), "3 shared, 2 of them used"
    assert agent_claims(frozenset({"emails"}), 5, {"emails": 5}, {"emails": 5}, 5, 0) == [], "all kept slots busy"


def test_a_concurrency_limit_holds_a_queue_only_when_it_leaves_less_room_than_the_agent_has() -> None:
    room = {"api": 2, "mail": 10, "other": 0}
    assert held_by_limits(room, AgentClaim(None, 8), 8) == {"api", "other"}, "mail's 10 are more than 8 slots"
    assert held_by_limits(room, AgentClaim(frozenset({"mail"}), 8), 8) == set(), "only the queues it may take"
    assert held_by_limits(room, AgentClaim(None, 8, leave=frozenset({"api"})), 8) == {"other"}
    bulkhead = AgentClaim(frozenset({"api"}), 2, caps={"api": 2})
    assert held_by_limits(room, bulkhead, 2) == set(), "the agent's kept slots bind, not the queue's limit"


def test_a_fair_claim_forgets_shares_only_when_some_key_is_neither_ahead_nor_recent() -> None:
    now = 10_000.0
    recent = Rotation(5.0, {"a": Share(4.0, now - 10), "b": Share(9.0, now - 7200)})
    assert not forgettable(recent, now), "a is recent, b is ahead of the rotation: both stay"
    old = Rotation(5.0, {"a": Share(4.0, now - 3601), "b": Share(9.0, now - 7200)})
    assert forgettable(old, now), "a was served long ago and is behind the rotation: its row can go"
    assert not forgettable(Rotation(), now)
