"""The circuit breaker's decisions (core/breaker.py): pure, on a fake clock."""

from __future__ import annotations

from core.breaker import Breaker, BreakerSettings, breaker_key, held_until

S = BreakerSettings()


def test_it_opens_at_half_failed_of_five_requests_within_ten_seconds() -> None:
    b = Breaker("q", "api.example:443", win_start=0.0)
    events = [b.observe(i, ok, float(i), S) for i, ok in enumerate([True, False, True, False])]
    assert events == [None] * 4 and b.status(4.0) == "closed", "4 requests are too few to judge a host"
    assert b.observe(5, False, 4.5, S) == "breaker.opened", "3 of 5 failed: over 50 %"
    assert (b.status(4.6), b.retry_at) == ("open", 34.5), "a trial may go 30 s after it opened"
    assert b.status(34.5) == "half_open"
    assert "a trial request goes in 20 s" in b.reason(14.5, S), b.reason(14.5, S)


def test_failures_older_than_the_window_do_not_count() -> None:
    b = Breaker("q", "h", win_start=0.0)
    for i in range(4):
        b.observe(i, False, i * 0.1, S)
    assert b.observe(9, False, 25.0, S) is None, "4 failures 25 s ago are out of the 10 s window"
    healthy = Breaker("q", "h", win_start=0.0)
    assert all(healthy.observe(i, i % 4 != 0, i * 0.5, S) is None for i in range(40)), "1 failure in 4 stays closed"


def test_the_trial_closes_it_or_opens_it_again_and_other_outcomes_change_nothing() -> None:
    b = Breaker("q", "h", win_start=0.0)
    for i in range(5):
        b.observe(i, False, float(i), S)
    assert b.opened_at == 4.0
    assert b.observe(99, False, 10.0, S) is None, "a request sent before it opened: no news"
    b.probe_job, b.retry_at = 7, 64.0  # the store let job 7 go as the trial at 34
    assert b.status(40.0) == "half_open" and "job 7" in b.reason(40.0, S)
    assert b.observe(7, False, 40.0, S) == "breaker.opened"
    assert (b.opened_at, b.retry_at, b.probe_job, b.opened) == (40.0, 70.0, None, 2), "the failed trial reopened it"
    b.probe_job = 8
    assert b.observe(8, True, 71.0, S) == "breaker.closed"
    assert b.status(71.0) == "closed" and b.counts(71.0, 10.0) == (0.0, 0.0), "closed with a clean window"


def test_a_queues_own_numbers() -> None:
    s = BreakerSettings.of({"breaker_mode": "fail", "breaker_failure_ratio": 0.2, "breaker_window": 60.0,
                            "breaker_reset": 5.0, "breaker_min_requests": 10})  # fmt: skip
    assert s == BreakerSettings("fail", 0.2, 60.0, 5.0, 10)
    assert BreakerSettings.of({"breaker_mode": None}) == BreakerSettings(), "null: the seed's defaults"
    b = Breaker("q", "h", win_start=0.0)
    outcomes = [b.observe(i, i % 5 != 0, float(i), s) for i in range(10)]
    assert outcomes[:9] == [None] * 9 and outcomes[9] is None, "2 of 10 failed, but the 10th succeeded"
    assert b.observe(10, False, 10.5, s) == "breaker.opened", "3 of 11 failed: over 20 %"
    assert held_until(b, 11.0, s) == 15.5, "held until the trial time, 5 s after it opened"


def test_the_breaker_key_is_the_host_of_an_http_task() -> None:
    assert breaker_key({"kind": "http", "url": "https://API.example.com:8443/v1/x?y=1"}) == "api.example.com:8443"
    assert breaker_key({"kind": "shell", "command": "true"}) is None
