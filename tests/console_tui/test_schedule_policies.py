"""The console's Schedules view shows what a schedule's policies did: why it paused itself,
skipped and missed fire times (against a real server)."""

from __future__ import annotations

import pytest

from core.client import JobDeckClient
from tests.conftest import ServerProcess, until
from tests.console_tui.conftest import console
from tests.console_tui.test_views import select, view

pytestmark = pytest.mark.timeout(90)


async def test_the_bar_says_why_a_schedule_paused_itself_and_what_it_skipped(
        node: ServerProcess, api: JobDeckClient) -> None:  # fmt: skip
    failing = {"kind": "shell", "argv": ["sh", "-c", "exit 3"]}
    s = await api.create_schedule({"name": "flaky", "interval": 1, "pause_after_failures": 1, "overlap": "buffer_one",
                                   "job": {"task": failing, "queue": "flaky-q", "max_attempts": 1}})  # fmt: skip

    async def paused() -> bool:
        return bool((await api.get_schedule(s["id"]))["paused"])

    await until(paused, 30, "the schedule to pause itself (a local agent runs the failing job)")
    async with console(node.url) as (app, pilot):
        await pilot.press("4")
        schedules = view(app, "schedules")
        await select(schedules, str(s["id"]))
        bar = app.main_screen.query_one("#schedules #bar")
        await until(lambda: "paused after 1 consecutive failed runs" in str(bar.render()), 5, "the reason in the bar")
        quiet = await api.create_schedule({"name": "plain", "cron": "0 2 * * *", "job": {"task": failing}})
        await until(lambda: str(quiet["id"]) in schedules.items, 15, "the new schedule listed")
        await select(schedules, str(quiet["id"]))
        await until(lambda: "#" + str(quiet["id"]) in str(bar.render()), 5, "the plain schedule's bar")
        assert "skipped" not in str(bar.render()) and "paused after" not in str(bar.render())
