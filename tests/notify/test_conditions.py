"""Each rule condition, with a controllable clock: the pure functions of core/notify/conditions.py."""

from __future__ import annotations

from typing import Any

from core.notify.conditions import on_event, on_tick
from core.notify.rules import Alert, RuleState


def rule(condition: dict[str, Any] | None = None, events: tuple[str, ...] = ("job.dead",), window: float = 0.0,
         **filters: Any) -> dict[str, Any]:  # fmt: skip
    spec = {"events": list(events), "filters": filters, "channels": [1], "window_seconds": window}
    if condition is not None:
        spec["condition"] = condition
    return {"id": 7, "name": "r", "enabled": True, "spec": spec}


def ev(type_: str, seq: int, queue: str = "payments", attempt: int = 1, name: str = "charge") -> dict[str, Any]:
    job = {"id": seq, "name": name, "queue": queue, "attempt": attempt, "max_attempts": 3, "tags": []}
    return {"seq": seq, "type": type_, "job_id": seq, "queue": queue, "data": {"job": job}}


def kinds(alerts: list[Alert]) -> list[str]:
    return [a.kind for a in alerts]


def test_every_match_alerts_once_per_window_then_sums_up() -> None:
    r, s = rule(window=60), RuleState()
    assert kinds(on_event(r, s, ev("job.dead", 1), 1000.0)) == ["alert"]
    assert on_event(r, s, ev("job.dead", 2), 1010.0) == [] and on_event(r, s, ev("job.dead", 3), 1020.0) == []
    assert on_event(r, s, ev("job.failed", 4), 1030.0) == [], "another type: not the rule's"
    assert on_tick(r, s, None, 1059.0) == [], "the window is still open"
    [summary] = on_tick(r, s, None, 1060.0)
    assert summary.kind == "summary" and "2 more alerts suppressed" in summary.title, summary
    assert kinds(on_event(r, s, ev("job.dead", 6), 1061.0)) == ["alert"], "a new window"


def test_filters_queue_name_prefix_tag() -> None:
    r = rule(queue="payments", name_prefix="charge")
    assert on_event(r, RuleState(), ev("job.dead", 1, queue="emails"), 1.0) == []
    assert on_event(r, RuleState(), ev("job.dead", 1, name="refund"), 1.0) == []
    assert kinds(on_event(r, RuleState(), ev("job.dead", 1, name="charge-eu"), 1.0)) == ["alert"]
    tagged = ev("job.dead", 2)
    tagged["data"]["job"]["tags"] = ["vip"]
    assert on_event(rule(tag="vip"), RuleState(), ev("job.dead", 1), 1.0) == []
    assert kinds(on_event(rule(tag="vip"), RuleState(), tagged, 1.0)) == ["alert"]


def test_a_job_failed_n_times() -> None:
    r, s = rule({"kind": "failed_times", "times": 3}, events=("job.failed", "job.dead")), RuleState()
    assert on_event(r, s, ev("job.failed", 1, attempt=1), 1.0) == []
    assert on_event(r, s, ev("job.failed", 2, attempt=2), 2.0) == []
    [a] = on_event(r, s, ev("job.dead", 3, attempt=3), 3.0)
    assert a.kind == "alert" and "attempt 3 of 3" in a.text


def test_dead_jobs_over_n_in_t_minutes_alerts_then_resolves() -> None:
    r, s = rule({"kind": "count", "above": 3, "minutes": 5}), RuleState()
    t = 10_000.0
    for i in range(3):
        assert on_event(r, s, ev("job.dead", i), t + i) == [], "3 is not more than 3"
    [a] = on_event(r, s, ev("job.dead", 3), t + 3)
    assert a.kind == "alert" and "more than 3 job.dead in 5 min" in a.title
    assert on_event(r, s, ev("job.dead", 4), t + 4) == [], "firing already: one alert"
    assert on_tick(r, s, None, t + 300.5) == [], "4 still within the last 5 minutes"
    [done] = on_tick(r, s, None, t + 301.5)
    assert done.kind == "resolved" and done.title == f"resolved: {a.title}"
    assert on_tick(r, s, None, t + 400) == []


def test_success_ratio_below_x_over_t() -> None:
    r = rule({"kind": "success_ratio", "below": 0.9, "minutes": 10, "min_jobs": 5},
             events=("job.succeeded", "job.failed", "job.dead"))  # fmt: skip
    s, t = RuleState(), 60_000.0
    for i in range(3):
        on_event(r, s, ev("job.succeeded", i), t + i)
    on_event(r, s, ev("job.dead", 9), t + 5)
    assert on_tick(r, s, None, t + 6) == [], "4 finished: fewer than min_jobs"
    on_event(r, s, ev("job.succeeded", 10), t + 7)
    [a] = on_tick(r, s, None, t + 8)
    assert a.kind == "alert" and "80% of 5 jobs succeeded" in a.title, a.title
    for i in range(20, 40):
        on_event(r, s, ev("job.succeeded", i), t + 20)
    [done] = on_tick(r, s, None, t + 21)
    assert done.kind == "resolved"


def facts(depth: int, agents: list[dict[str, Any]] | None = None, queue: str = "payments") -> dict[str, Any]:
    return {"queues": [{"name": queue, "depth": depth}], "agents": agents or []}


def test_queue_depth_over_n_for_t_then_resolved() -> None:
    r, s = rule({"kind": "queue_depth", "above": 100, "for_seconds": 30}, events=(), queue="payments"), RuleState()
    assert on_tick(r, s, facts(150), 0.0) == [] and on_tick(r, s, facts(150), 29.0) == [], "not for 30 s yet"
    assert on_tick(r, s, facts(50), 29.5) == [], "dipped: the 30 s start again"
    assert on_tick(r, s, facts(150), 30.0) == [] and on_tick(r, s, facts(150), 59.0) == []
    [a] = on_tick(r, s, facts(150), 60.0)
    assert a.kind == "alert" and a.title == "queue payments: more than 100 jobs waiting for 30 s"
    assert on_tick(r, s, facts(150), 70.0) == []
    [done] = on_tick(r, s, facts(3), 80.0)
    assert done.kind == "resolved"
    assert on_tick(r, s, facts(500, queue="emails"), 90.0) == [], "another queue than the filter's"


def test_no_agent_for_a_queue_for_t() -> None:
    r, s = rule({"kind": "no_agent", "for_seconds": 10}, events=()), RuleState()
    other = [{"name": "a1", "queues": ["emails"], "draining": False}]
    assert on_tick(r, s, facts(5, other), 0.0) == []
    [a] = on_tick(r, s, facts(5, other), 10.0)
    assert "queue payments: no agent" in a.title
    assert on_tick(r, s, facts(5, [{"name": "a2", "queues": ["pay*"], "draining": True}]), 11.0) == [], "draining"
    [done] = on_tick(r, s, facts(5, [{"name": "a2", "queues": ["pay*"], "draining": False}]), 12.0)
    assert done.kind == "resolved"
    assert on_tick(r, s, facts(0), 100.0) == [] and on_tick(r, s, facts(0), 200.0) == [], "nothing waits: fine"


def test_a_level_that_flaps_inside_the_window_is_summed_up_not_repeated() -> None:
    r, s = rule({"kind": "queue_depth", "above": 0, "for_seconds": 0}, events=(), window=300), RuleState()
    assert kinds(on_tick(r, s, facts(1), 0.0)) == ["alert"]
    assert kinds(on_tick(r, s, facts(0), 10.0)) == ["resolved"]
    assert on_tick(r, s, facts(1), 20.0) == [], "fired again within the window: suppressed"
    assert on_tick(r, s, facts(0), 30.0) == [], "its resolve notice too (it was never sent)"
    [summary] = on_tick(r, s, facts(0), 301.0)
    assert summary.kind == "summary" and "1 more alert suppressed" in summary.title


def test_a_level_that_begins_after_its_first_look_is_saved_firing() -> None:
    """The sink saves a rule's state when a tick changed it: a level that begins on a later tick
    changes the state in place, which must still count as a change (it was once lost)."""
    import orjson

    from core.notify.rules import state_to_dict

    r, s = rule({"kind": "queue_depth", "above": 2, "for_seconds": 0}, events=()), RuleState()
    on_tick(r, s, facts(0), 0.0)
    before = orjson.dumps(state_to_dict(s))
    [a] = on_tick(r, s, facts(3), 5.0)
    assert a.kind == "alert" and orjson.dumps(state_to_dict(s)) != before
    assert state_to_dict(s)["levels"]["q:payments"]["firing"] is True


def test_a_schedule_that_paused_itself_alerts_and_one_a_person_paused_does_not() -> None:
    r, s = rule({"kind": "paused_itself"}, events=("schedule.paused",)), RuleState()
    sched = {"id": 4, "name": "nightly-export", "queue": "payments"}
    by_hand = {"seq": 1, "type": "schedule.paused", "queue": "payments", "data": {"schedule": sched}}
    assert on_event(r, s, by_hand, 1000.0) == [], "a person's pause carries no reason"
    itself = {"seq": 2, "type": "schedule.paused", "queue": "payments",
              "data": {"schedule": sched, "reason": "paused after 3 consecutive failed runs", "failures": 3}}  # fmt: skip
    [a] = on_event(r, s, itself, 1001.0)
    assert a.title == "schedule 4 nightly-export paused itself" and "3 consecutive failed runs" in a.text, a
    assert a.severity == "critical" and a.queue == "payments"


def test_a_workflow_filter_takes_its_jobs_events_and_its_own() -> None:
    r, s = rule(events=("job.dead", "workflow.failed"), workflow_id=9), RuleState()
    mine, other = ev("job.dead", 1), ev("job.dead", 2)
    mine["data"]["job"]["workflow_id"], other["data"]["job"]["workflow_id"] = 9, 8
    assert kinds(on_event(r, s, mine, 1000.0)) == ["alert"] and on_event(r, s, other, 1001.0) == []
    failed = {"seq": 3, "type": "workflow.failed", "data": {"workflow": {"id": 9, "name": "release"}}}
    assert kinds(on_event(r, s, failed, 1002.0)) == ["alert"]
    assert on_event(r, s, {**failed, "seq": 4, "data": {"workflow": {"id": 8}}}, 1003.0) == []


def test_a_missed_schedule_alerts_with_its_count_and_a_schedule_filter_takes_only_its_own() -> None:
    r, s = rule(events=("schedule.missed",), schedule_id=4), RuleState()

    def missed(seq: int, schedule_id: int) -> dict[str, Any]:
        return {"seq": seq, "type": "schedule.missed", "queue": "payments",
                "data": {"schedule_id": schedule_id, "count": 12, "exact": True, "catch_up": "none",
                         "fire_times": [f"2026-12-02T0{h}:00:00Z" for h in range(6)], "ran": []}}  # fmt: skip

    assert on_event(r, s, missed(1, 5), 1000.0) == [], "another schedule's missed fire times"
    [a] = on_event(r, s, missed(2, 4), 1001.0)
    assert a.kind == "alert" and a.title == "schedule 4 missed 12 fire times (catch-up none)", a
    assert a.text.startswith("missed: 2026-12-02T00:00:00Z, ") and a.text.endswith(" ..."), a.text
