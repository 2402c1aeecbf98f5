"""The console's alert: a rule's alert shows in the header live, and the Alerts view (key 7) lists
the delivery log with where each notification stands; r replays one. A real `jobdeck up` and a
real webhook receiver (the notification tests' own)."""

from __future__ import annotations

import pytest

from core.client import JobDeckClient
from tests.conftest import until
from tests.console_tui.conftest import console, shell
from tests.notify.conftest import Receiver, receiver  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(120)


async def test_an_alert_shows_in_the_header_and_the_alerts_view_has_its_delivery(
    node,
    api: JobDeckClient,
    receiver: Receiver,  # type: ignore[no-untyped-def]  # noqa: F811
) -> None:
    ch = await api.create_channel({"kind": "webhook", "name": "console-hook", "url": receiver.url})
    receiver.secret = ch["secret"]
    await api.create_alert_rule({"name": "console-dead", "events": ["job.dead"], "filters": {"queue": "c-alerts"},
                                 "channels": [ch["id"]], "window_seconds": 0})  # fmt: skip
    async with console(node.url) as (app, pilot):
        job = await api.submit(shell("exit 4", queue="c-alerts", name="nightly-export", max_attempts=1))
        await until(lambda: app.alert is not None, 30, "the alert to reach the console")
        header = app.main_screen.query_one("ConsoleHeader")  # type: ignore[union-attr]
        shown = str(header.render().renderables[0].columns[1]._cells[0])  # the middle of the top line
        assert f"⚠ job.dead: job {job['id']} nightly-export in c-alerts" in shown, shown
        [got] = await receiver.wait_for(1)
        assert got.verified

        await pilot.press("7")
        view = app.main_screen.query_one("#alerts")  # type: ignore[union-attr]
        await until(
            lambda: any(n["status"] == "delivered" for n in view.items.values()), 20, "the delivery in the view"
        )
        [n] = view.items.values()
        assert n["kind"] == "alert" and n["attempts"] == 1
        row = [str(c) for c in view.cells(n)]
        assert row[2] == "console-hook" and row[4] == "delivered" and "nightly-export" in row[6], row
        app.save_screenshot("alerts.svg", path=str(node.data_dir.parent))

        await pilot.press("r")
        await receiver.wait_for(2)
        assert receiver.got[1].headers["webhook-id"] == receiver.got[0].headers["webhook-id"], "a replay keeps the id"


async def test_the_alerts_view_pages_back_to_the_oldest_notification(
    node,
    api: JobDeckClient,
    receiver: Receiver,  # type: ignore[no-untyped-def]  # noqa: F811
) -> None:
    from console_tui.screens.alerts import PAGE_SIZE

    ch = await api.create_channel({"kind": "webhook", "name": "paged-hook", "url": receiver.url})
    receiver.secret = ch["secret"]
    sent = [await api.send_notification(ch["id"], f"note {i}") for i in range(PAGE_SIZE + 3)]
    async with console(node.url) as (app, pilot):
        await pilot.press("7")
        view = app.main_screen.query_one("#alerts")  # type: ignore[union-attr]
        await until(lambda: len(view.items) == PAGE_SIZE, 20, f"the newest {PAGE_SIZE} in the view")
        assert sent[-1]["id"] in {n["id"] for n in view.items.values()}, "the newest page first"
        assert "page 1" in view.bar() and "] older" in view.bar(), view.bar()
        first = {n["id"] for n in view.items.values()}
        await pilot.press("right_square_bracket")
        oldest = {s["id"] for s in sent[:3]}
        await until(lambda: oldest <= {n["id"] for n in view.items.values()}, 20, "the oldest on the next page")
        assert len(view.items) < PAGE_SIZE and not first & {n["id"] for n in view.items.values()}, "a page of its own"
        assert "page 2" in view.bar() and "] older" not in view.bar(), view.bar()
        shown = len(view.items)
        await pilot.press("right_square_bracket")  # the last page: stays
        assert len(view.items) == shown
        await pilot.press("left_square_bracket")
        await until(lambda: len(view.items) == PAGE_SIZE, 20, "back to the newest page")
        assert sent[-1]["id"] in {n["id"] for n in view.items.values()}
