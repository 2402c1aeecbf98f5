"""A notify.alert that arrives twice (the feed is at least once) shows once in the dashboard's banner."""

from __future__ import annotations

from collections import deque

from core.client import first_sight
from web_ui.hub import Hub


def test_a_repeated_alert_id_is_not_shown_again_but_a_new_one_is() -> None:
    seen: deque[str] = deque(maxlen=2)
    assert first_sight(seen, "alert_1_e6") and not first_sight(seen, "alert_1_e6")
    assert first_sight(seen, None) and first_sight(seen, None), "an alert without an id always shows"
    assert first_sight(seen, "alert_1_e7") and first_sight(seen, "alert_1_e8")
    assert first_sight(seen, "alert_1_e6"), "remembered only as long as the deque holds it"


def test_the_dashboard_banner_keeps_an_alert_whose_event_comes_again_and_shows_a_new_one() -> None:
    hub = Hub()
    event = {"seq": 7, "ts": "2026-12-01T16:00:00+00:00", "type": "notify.alert",
             "data": {"id": "alert_1_e6", "kind": "alert", "title": "job.dead: job 1 exit in default"}}  # fmt: skip
    hub._note(event, live=True)
    title, kind, at = hub.alert_now()
    assert (title, kind) == ("job.dead: job 1 exit in default", "alert") and at > 0
    hub._note({**event, "seq": 8}, live=True)
    assert hub.alert_now()[2] == at, "the repeat counted as a new alert (a session that dismissed it sees it again)"
    hub._note({**event, "seq": 9, "data": {**event["data"], "id": "alert_1_e9", "title": "another"}}, live=True)
    assert hub.alert_now()[:2] == ("another", "alert") and hub.alert_now()[2] >= at
