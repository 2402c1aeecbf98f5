"""The pure flow-control decisions (core/flow.py): the token bucket, a claim's room, the waiting reason."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.flow import Bucket, QueueLimits, claim_room, default_burst, waiting_reason

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
    assert why == "queue 'mail' is at its rate limit of 0.5/s (one every 2 s) (burst 1)", why
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
