"""The console's Schedules view shows what a schedule's policies did: why it paused itself,
skipped and missed fire times (against a real server)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from console_tui.screens.dialogs import ConfirmScreen, PromptScreen
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
        await until(lambda: "paused after 1 consecutive failed runs" in str(bar.render()), 15, "the reason in the bar")
        quiet = await api.create_schedule({"name": "plain", "cron": "0 2 * * *", "job": {"task": failing}})
        await until(lambda: str(quiet["id"]) in schedules.items, 15, "the new schedule listed")
        await select(schedules, str(quiet["id"]))
        await until(lambda: "#" + str(quiet["id"]) in str(bar.render()), 15, "the plain schedule's bar")
        assert "skipped" not in str(bar.render()) and "paused after" not in str(bar.render())


def _panel(app: Any) -> str:
    return str(app.main_screen.query_one("#schedules #preview").render())


async def test_the_preview_panel_run_now_and_a_backfill_counted_first(node: ServerProcess, api: JobDeckClient) -> None:
    s = await api.create_schedule({"name": "tui-hourly", "cron": "0 * * * *", "timezone": "Asia/Tokyo",
                                   "overlap": "buffer_one", "job": {"task": {"kind": "shell", "argv": ["true"]},
                                                                    "queue": "tui-sched"}})  # fmt: skip
    other = await api.create_schedule({"name": "tui-daily", "cron": "30 4 * * *", "timezone": "UTC",
                                       "job": {"task": {"kind": "shell", "argv": ["true"]}}})  # fmt: skip
    async with console(node.url) as (app, pilot):
        await pilot.press("4")
        schedules = view(app, "schedules")
        await select(schedules, str(s["id"]))
        await until(lambda: "tui-hourly" in _panel(app), 15, "the cursor schedule's preview")
        text = _panel(app)
        assert "next 5 fire times (Asia/Tokyo)" in text and "overlap buffer_one" in text, text
        assert text.count(":00:00 JST") == 5, f"five hourly fire times in Tokyo time: {text}"
        await select(schedules, str(other["id"]))
        await until(lambda: "tui-daily" in _panel(app), 15, "the preview follows the cursor")
        assert _panel(app).count("04:30:00 UTC") >= 5, _panel(app)

        await select(schedules, str(s["id"]))
        await pilot.press("x")  # run now
        jobs = await until(lambda: _jobs(api, s["id"]), 10, "the job run now made")
        assert jobs[0]["fire_time"] is None, "a manual run, outside the timetable"

        await pilot.press("b")
        await until(lambda: isinstance(app.screen, PromptScreen), 15, "the backfill prompt")
        app.screen.query_one("#value").value = "yesterday now"
        await pilot.press("enter")
        await until(lambda: "is not a date and time" in str(app.screen.query_one("#error").render()), 15, "the reason")
        hour = datetime.now(ZoneInfo("Asia/Tokyo")).replace(minute=0, second=0, microsecond=0)
        fmt = "%Y-%m-%dT%H:%M"
        app.screen.query_one("#value").value = f"{hour:{fmt}} {hour - timedelta(hours=2):{fmt}}"
        await pilot.press("enter")
        await until(lambda: "is after to" in str(app.screen.query_one("#error").render()), 15, "the server's 422")
        app.screen.query_one("#value").value = f"{hour - timedelta(hours=2):{fmt}} {hour:{fmt}}"
        await pilot.press("enter")
        await until(lambda: isinstance(app.screen, ConfirmScreen), 15, "the count, then a question")
        question = str(app.screen.query_one("#question").render())
        assert "Make 3 run(s) of tui-hourly?" in question, question
        assert len(await _jobs(api, s["id"]) or []) == 1, "the dry run made nothing"
        await pilot.press("y")
        made = await until(lambda: _jobs(api, s["id"], 4), 10, "the backfilled runs")
        want = sorted((hour - timedelta(hours=h)).timestamp() for h in (0, 1, 2))
        assert sorted(datetime.fromisoformat(j["fire_time"]).timestamp() for j in made if j["fire_time"]) == want


async def _jobs(api: JobDeckClient, schedule_id: int, at_least: int = 1) -> list[Any] | None:
    jobs = (await api.list_jobs(schedule_id=schedule_id))["jobs"]
    return jobs if len(jobs) >= at_least else None


async def test_a_workflow_schedule_says_which_workflow_it_fires(node: ServerProcess, api: JobDeckClient) -> None:
    step = {"kind": "shell", "argv": ["true"]}
    flow = {"name": "etl", "jobs": [{"ref": "extract", "task": step, "queue": "tui-wf"},
                                    {"ref": "load", "task": step, "queue": "tui-wf", "depends_on": ["extract"]},
                                    {"ref": "report", "task": step, "queue": "tui-wf", "depends_on": ["load"]}]}  # fmt: skip
    s = await api.create_schedule({"name": "tui-nightly-dag", "cron": "0 2 * * *", "workflow": flow})
    plain = await api.create_schedule({"name": "tui-plain", "cron": "0 3 * * *", "job": {"task": step}})
    async with console(node.url) as (app, pilot):
        await pilot.press("4")
        schedules = view(app, "schedules")
        await select(schedules, str(s["id"]))
        await until(lambda: "tui-nightly-dag" in _panel(app), 15, "the workflow schedule's preview")
        assert "fires workflow etl (3 jobs)" in _panel(app), _panel(app)
        bar = app.main_screen.query_one("#schedules #bar")
        await until(lambda: "fires workflow etl (3 jobs)" in str(bar.render()), 15, "the workflow in the bar")
        assert schedules.target_queue() == "tui-wf", "actions are checked against the workflow's queue"
        await select(schedules, str(plain["id"]))
        await until(lambda: "tui-plain" in _panel(app), 15, "the plain schedule's preview")
        assert "fires workflow" not in _panel(app) and "fires workflow" not in str(bar.render())
