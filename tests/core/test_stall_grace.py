"""The reaper's judgement after its own node stalled (core/engine.py StallGrace), on a fake clock:
heartbeat 1 s, lease 3 s, a reap every 0.2 s."""

from __future__ import annotations

from core.engine import StallGrace


def test_an_on_time_wake_judges_at_once() -> None:
    g = StallGrace(0.2, 1.0, 3.0)
    assert g.woke(10.0, 10.3) == 0.0  # 0.1 s late: under half a heartbeat
    assert g.may_judge(10.3)


def test_after_a_stall_the_judgement_waits_two_heartbeats() -> None:
    g = StallGrace(0.2, 1.0, 3.0)
    assert abs(g.woke(10.0, 15.2) - 5.0) < 1e-9
    assert not g.may_judge(15.2)
    assert g.woke(15.2, 15.4) == 0.0
    assert not g.may_judge(16.9)
    assert g.may_judge(17.2)


def test_a_node_that_keeps_stalling_still_judges_once_a_lease() -> None:
    g = StallGrace(0.2, 1.0, 3.0)
    t, judged = 100.0, []
    while t < 112:  # every wake-up 0.8 s late, for 12 s
        woke = t + 1.0
        g.woke(t, woke)
        if g.may_judge(woke):
            judged.append(woke)
        t = woke
    assert judged, "a dead agent's leases must still run out"
    assert all(b - a <= 3.0 + 1.0 for a, b in zip([100.0, *judged], judged, strict=False)), judged
