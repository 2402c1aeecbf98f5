"""The service-level objectives the seed names, and how the store's figures measure up to them.

Pick-up (submit, or due time, -> start on the agent): p50 within 100 ms, p95 within 500 ms, p99
within 2 s. A percentile objective "pN within T" is met when at least N % of the jobs started
within T, so the store counts the jobs under each threshold (one indexed pass over the jobs that
finished in the window) instead of sorting them. Success: 99 % of the jobs that ran to an end
succeed (dead ones are the failures; cancelled ones are nobody's); the error budget is the 1 % a
window may fail, and what is left of it.
"""

from __future__ import annotations

from typing import Any

PICKUP_SLA = ((50, 0.1), (95, 0.5), (99, 2.0))  # (percentile, seconds)
SUCCESS_TARGET = 0.99
WINDOWS = {"1h": 3600.0, "24h": 86400.0}


def slo_view(window: str, counts: dict[str, int]) -> dict[str, Any]:
    """One window's figures from the store's counts: started, under_<ms> per threshold, succeeded, dead."""
    started = counts.get("started", 0)
    pickup = []
    for pct, seconds in PICKUP_SLA:
        within = counts.get(f"under_{int(seconds * 1000)}", 0)
        share = within / started if started else None
        pickup.append({"percentile": pct, "within_ms": int(seconds * 1000), "jobs_within": within,
                       "share": None if share is None else round(share, 4),
                       "met": None if share is None else share >= pct / 100})  # fmt: skip
    succeeded, dead = counts.get("succeeded", 0), counts.get("dead", 0)
    ended = succeeded + dead
    allowed = (1 - SUCCESS_TARGET) * ended
    return {
        "window": window,
        "jobs": started,
        "pickup": pickup,
        "succeeded": succeeded,
        "dead": dead,
        "success_ratio": round(succeeded / ended, 4) if ended else None,
        "error_budget_left": round(1 - dead / allowed, 4) if allowed else None,  # 1: untouched; < 0: overspent
        "dead_allowed": round(allowed, 2),
    }
