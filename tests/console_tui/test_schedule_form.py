"""The console's schedule form, typed into key by key against a real server: the preview follows
what is typed, a refusal shows under the field the server names, and what is saved (new or
edited) is what the server then holds."""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import Input

from console_tui.screens.schedule_form import ScheduleFormScreen
from core.client import JobDeckClient
from tests.conftest import ServerProcess, until
from tests.console_tui.conftest import console
from tests.console_tui.test_views import select, view

pytestmark = pytest.mark.timeout(90)


async def _type(app: Any, pilot: Any, field: str, text: str) -> None:
    """Empty the field, then type `text` into it one key at a time."""
    box = app.screen.query_one(f"#{field}", Input)
    box.focus()
    box.value = ""
    await pilot.press(*text)


def _preview(app: Any) -> str:
    return str(app.screen.query_one("#preview").render())


def _error(app: Any, field: str) -> str:
    box = app.screen.query_one(f"#error-{field}")
    return str(box.render()) if box.has_class("shown") else ""


async def _named(api: JobDeckClient, name: str) -> dict[str, Any] | None:
    return next((s for s in await api.schedules() if s["name"] == name), None)


async def test_the_preview_follows_what_is_typed_and_the_new_schedule_reaches_the_server(
    node: ServerProcess, api: JobDeckClient
) -> None:
    async with console(node.url) as (app, pilot):
        await pilot.press("4", "n")
        await until(lambda: isinstance(app.screen, ScheduleFormScreen), 15, "the schedule form")
        await until(lambda: "give Cron, Every or Once at" in _preview(app), 15, "an empty form's preview")
        await _type(app, pilot, "name", "tui-form-new")
        await _type(app, pilot, "cron", "0 9 * * 1-5")
        await _type(app, pilot, "timezone", "Europe/Paris")
        await until(lambda: _preview(app).count("09:00:00 CET") == 5, 15, "weekday 09:00 in Paris")
        assert "(Europe/Paris)" in _preview(app), _preview(app)
        await _type(app, pilot, "cron", "30 7 * * *")
        await until(lambda: _preview(app).count("07:30:00 CET") == 5, 15, "the preview of the new expression")
        await _type(app, pilot, "cron", "30 7 * * * *x")
        await until(lambda: "no preview: cron:" in _preview(app), 15, "a bad expression explained in the preview")
        await _type(app, pilot, "cron", "")
        await _type(app, pilot, "interval", "90")
        await until(lambda: _preview(app).count("CET") == 5, 15, "an interval's fire times")
        await _type(app, pilot, "interval", "")
        await _type(app, pilot, "cron", "0 6 * * *")
        await _type(app, pilot, "exclude_cron", "* * * * 0,6")
        await until(lambda: _preview(app).count("excluded") >= 2, 15, "weekend fire times marked excluded")
        await _type(app, pilot, "command", "true")
        await _type(app, pilot, "queue", "tui-form-q")
        await _type(app, pilot, "overlap", "buffer_one")
        await _type(app, pilot, "catch_up", "all")
        await _type(app, pilot, "catch_up_window", "600")
        await _type(app, pilot, "jitter", "30")
        await _type(app, pilot, "pause_after_failures", "3")
        await _type(app, pilot, "exclude_dates", "2026-12-25, 2027-01-01")
        await pilot.press("ctrl+s")
        await until(lambda: not isinstance(app.screen, ScheduleFormScreen), 15, "the form to close once saved")
        s = await until(lambda: _named(api, "tui-form-new"), 15, "the schedule on the server")
        schedules = view(app, "schedules")
        await until(lambda: str(s["id"]) in schedules.items, 15, "the new schedule listed")
    task = s["job"]["task"]
    assert (s["cron"], s["timezone"], task["kind"], task["command"], s["job"]["queue"]) == (
        "0 6 * * *", "Europe/Paris", "shell", "true", "tui-form-q"
    ), s  # fmt: skip
    assert (s["overlap"], s["catch_up"], s["catch_up_window"], s["jitter"], s["pause_after_failures"]) == (
        "buffer_one", "all", 600, 30, 3
    ), s  # fmt: skip
    assert (s["exclude_dates"], s["exclude_cron"]) == (["2026-12-25", "2027-01-01"], "* * * * 0,6"), s


async def test_a_refusal_shows_under_the_field_it_names_and_nothing_is_made(
    node: ServerProcess, api: JobDeckClient
) -> None:
    async with console(node.url) as (app, pilot):
        await pilot.press("4", "n")
        await until(lambda: isinstance(app.screen, ScheduleFormScreen), 15, "the schedule form")
        await _type(app, pilot, "name", "tui-form-bad")
        await _type(app, pilot, "interval", "60")
        await _type(app, pilot, "command", "true")
        await _type(app, pilot, "overlap", "sometimes")
        await pilot.press("ctrl+s")
        await until(
            lambda: "buffer_one" in _error(app, "overlap"), 15, "the 422 under Overlap, with the allowed values"
        )
        assert isinstance(app.screen, ScheduleFormScreen), "a refused form stays open"
        assert app.screen.focused is app.screen.query_one("#overlap"), "the field named is focused"
        await _type(app, pilot, "overlap", "skip")
        await _type(app, pilot, "jitter", "120")
        await pilot.press("ctrl+s")
        await until(lambda: "jitter" in _error(app, "jitter"), 15, "a jitter longer than the interval refused")
        assert not _error(app, "overlap"), "the earlier error is gone"
        await _type(app, pilot, "jitter", "ten")
        await pilot.press("ctrl+s")
        await until(lambda: "not a number" in _error(app, "jitter"), 15, "a number that does not parse")
        await pilot.press("escape")
        await until(lambda: not isinstance(app.screen, ScheduleFormScreen), 15, "the form closed")
    assert await _named(api, "tui-form-bad") is None, "nothing was made"


async def test_an_edit_is_previewed_as_typed_and_only_what_changed_is_saved(
    node: ServerProcess, api: JobDeckClient
) -> None:
    s = await api.create_schedule({"name": "tui-form-edit", "cron": "0 2 * * *", "timezone": "Asia/Tokyo",
                                   "overlap": "allow", "jitter": 5,
                                   "job": {"task": {"kind": "python", "function": "agents.builtin:noop"},
                                           "queue": "tui-form-edit-q", "priority": 7}})  # fmt: skip
    async with console(node.url) as (app, pilot):
        await pilot.press("4")
        schedules = view(app, "schedules")
        await select(schedules, str(s["id"]))
        await pilot.press("e")
        await until(lambda: isinstance(app.screen, ScheduleFormScreen), 15, "the form with the schedule in it")
        form = app.screen
        assert form.query_one("#cron", Input).value == "0 2 * * *"
        assert (form.query_one("#timezone", Input).value, form.query_one("#overlap", Input).value) == (
            "Asia/Tokyo", "allow"
        )  # fmt: skip
        await until(lambda: _preview(app).count("02:00:00 JST") == 5, 15, "the stored timing's preview")
        await _type(app, pilot, "cron", "")
        await _type(app, pilot, "interval", "600")
        await until(lambda: "02:00:00 JST" not in _preview(app) and _preview(app).count("JST") == 5, 5,
                    "the preview of the new interval")  # fmt: skip
        await _type(app, pilot, "overlap", "cancel_previous")
        await _type(app, pilot, "jitter", "")
        await pilot.press("ctrl+s")
        await until(lambda: not isinstance(app.screen, ScheduleFormScreen), 15, "the form to close once saved")
    got = await api.get_schedule(s["id"])
    assert (got["kind"], got["cron"], got["interval"]) == ("interval", None, 600), got
    assert (got["overlap"], got["jitter"], got["timezone"]) == ("cancel_previous", 0, "Asia/Tokyo"), got
    assert got["job"] == s["job"], "the template (a python task, priority 7) is kept as it was"
