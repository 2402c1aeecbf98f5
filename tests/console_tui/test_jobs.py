"""The Jobs view against a real server: live changes from the API, every job action by key,
refusals, the new-job form, filter, selection and bulk by filter."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from console_tui.screens.bulk import BulkScreen
from console_tui.screens.dialogs import ConfirmScreen, PromptScreen
from console_tui.screens.jobs import JobsView
from console_tui.screens.new_job import NewJobScreen
from core.client import JobDeckClient
from tests.conftest import ServerProcess, until
from tests.console_tui.conftest import console, later

pytestmark = pytest.mark.timeout(60)


def jobs_view(app: Any) -> JobsView:
    return app.main_screen.query_one("#jobs", JobsView)


def cell(view: JobsView, job_id: int, column: str) -> str:
    if job_id not in view.rows:
        return ""
    value = view.table.get_cell(str(job_id), column)
    return str(getattr(value, "plain", value))


async def focus_job(view: JobsView, job_id: int) -> None:
    await until(lambda: job_id in view.rows, 5, f"job {job_id} in the table")
    view.table.move_cursor(row=view.table.get_row_index(str(job_id)))


async def state_of(api: JobDeckClient, job_id: int) -> str:
    return str((await api.get_job(job_id))["state"])


async def test_a_change_through_the_api_shows_without_moving_the_cursor(
    node: ServerProcess, api: JobDeckClient
) -> None:
    async with console(node.url) as (app, _):
        view = jobs_view(app)
        first = await api.submit(later("first", "live-q"))
        await until(lambda: first["id"] in view.rows, 2, "the submitted job in the table")
        await focus_job(view, first["id"])
        await api.set_priority(first["id"], 7)
        await until(lambda: cell(view, first["id"], "priority") == "7", 2, "the new priority in the row")
        more = [await api.submit(later(f"more-{i}", "live-q")) for i in range(3)]
        await until(lambda: all(j["id"] in view.rows for j in more), 2, "newer jobs above")
        # new rows went in above; the cursor stayed on the same job
        assert view.current() is not None and view.current()["id"] == first["id"]  # type: ignore[index]
        await api.job_action(first["id"], "pause")
        await until(lambda: cell(view, first["id"], "state") == "paused", 2, "the paused state")
        assert view.current()["id"] == first["id"]  # type: ignore[index]


async def test_job_actions_by_key(node: ServerProcess, api: JobDeckClient) -> None:
    job = await api.submit(later("acted-on", "actions-q", priority=1))
    async with console(node.url) as (app, pilot):
        view = jobs_view(app)
        await focus_job(view, job["id"])
        await pilot.press("p")
        await until(lambda: state_of(api, job["id"]), 5)
        await until(lambda: cell(view, job["id"], "state") == "paused", 15, "paused in the table")
        await pilot.press("u")
        await until(lambda: cell(view, job["id"], "state") == "scheduled", 15, "resumed in the table")
        await pilot.press("plus")
        await until(lambda: cell(view, job["id"], "priority") == "2", 15, "priority raised")
        await pilot.press("minus", "minus")
        await until(lambda: cell(view, job["id"], "priority") == "0", 15, "priority lowered twice")
        await pilot.press("equals_sign")
        await until(lambda: isinstance(app.screen, PromptScreen), 15, "the priority prompt")
        app.screen.query_one("#value").value = ""  # type: ignore[attr-defined]
        await pilot.press(*"5000", "enter")  # out of range: the server's message, in place
        error = app.screen.query_one("#error")
        await until(lambda: "priority" in str(error.render()), 15, "the server's message under the field")
        app.screen.query_one("#value").value = ""  # type: ignore[attr-defined]
        await pilot.press(*"42", "enter")
        await until(lambda: not isinstance(app.screen, PromptScreen), 15, "the prompt to close")
        await until(lambda: cell(view, job["id"], "priority") == "42", 15, "priority set exactly")
        await pilot.press("c")
        await until(lambda: isinstance(app.screen, ConfirmScreen), 15, "a confirmation")
        await pilot.press("n")  # said no: nothing happens
        assert await state_of(api, job["id"]) == "scheduled"
        await pilot.press("c")
        await until(lambda: isinstance(app.screen, ConfirmScreen), 15, "a confirmation")
        await pilot.press("y")
        await until(lambda: cell(view, job["id"], "state") == "cancelled", 15, "cancelled")
        await pilot.press("R")
        await until(lambda: cell(view, job["id"], "state") in ("queued", "running", "succeeded"), 15, "retried")


async def test_a_refused_action_explains_and_changes_nothing(node: ServerProcess, api: JobDeckClient) -> None:
    job = await api.submit({"task": {"kind": "shell", "command": "true"}, "queue": "refused-q"})
    await api.wait_for(job["id"], timeout=10)
    async with console(node.url) as (app, pilot):
        view = jobs_view(app)
        await focus_job(view, job["id"])
        await pilot.press("p")  # a succeeded job cannot be paused: 409
        await until(lambda: any("cannot pause" in str(n.message) for n in app._notifications), 15, "a notification")
        assert await state_of(api, job["id"]) == "succeeded"
        assert cell(view, job["id"], "state") == "succeeded"


async def test_new_job_form_shows_the_servers_message_next_to_the_field(
    node: ServerProcess, api: JobDeckClient
) -> None:
    async with console(node.url) as (app, pilot):
        view = jobs_view(app)
        await pilot.press("n")
        await until(lambda: isinstance(app.screen, NewJobScreen), 15, "the form")
        form = app.screen
        form.query_one("#command").value = "echo from-the-form"  # type: ignore[attr-defined]
        form.query_one("#queue").value = "bad queue!"  # type: ignore[attr-defined]
        await pilot.press("ctrl+s")
        err = form.query_one("#error-queue")
        await until(lambda: "queue" in str(err.render()), 15, "the server's message under Queue")
        assert isinstance(app.screen, NewJobScreen)
        form.query_one("#queue").value = "form-q"  # type: ignore[attr-defined]
        form.query_one("#name").value = "from-form"  # type: ignore[attr-defined]
        await pilot.press("ctrl+s")
        await until(lambda: not isinstance(app.screen, NewJobScreen), 15, "the form to close")
        made = await until(lambda: [j for j in view.rows.values() if j.get("name") == "from-form"], 15, "the new job")
        assert made[0]["queue"] == "form-q"


async def test_filter_selection_and_bulk_by_filter(node: ServerProcess, api: JobDeckClient) -> None:
    ids = [(await api.submit(later(f"bulk-{i}", "bulk-q")))["id"] for i in range(5)]
    other = await api.submit(later("other", "other-q"))
    async with console(node.url) as (app, pilot):
        view = jobs_view(app)
        await pilot.press("slash", *"queue:bulk-q state:scheduled", "enter")
        await until(lambda: set(view.rows) == set(ids), 15, "only the filtered jobs")
        # select two rows, pause them in one go
        await focus_job(view, ids[-1])
        await pilot.press("space", "space", "p")

        async def paused() -> int:
            return sum([await state_of(api, i) == "paused" for i in ids])

        await until(lambda: paused(), 15, "two paused")
        assert await paused() == 2
        # a paused job leaves a state:scheduled view, except under the cursor
        await until(lambda: len(view.rows) <= 4, 15, "paused rows to leave the filtered view")
        # bulk by filter: cancel everything still scheduled in bulk-q
        await pilot.press("B")
        await pilot.press("c")
        # a dry run counts what the action would touch before it asks
        prompt = app.screen.query_one("#prompt")
        expected = "Cancel 3 jobs matching state:scheduled queue:bulk-q?"
        try:
            await until(lambda: expected in str(prompt.render()), 3, expected)
        except AssertionError:
            raise AssertionError(f"expected {expected!r} in the dialog; it shows {str(prompt.render())!r}") from None
        assert [await state_of(api, i) for i in ids[:3]] == ["scheduled"] * 3  # the dry run changed nothing
        await pilot.press("y")
        for i in ids[:3]:

            async def cancelled(i: int = i) -> bool:
                return await state_of(api, i) == "cancelled"

            await until(cancelled, 5, f"job {i} cancelled by the bulk action")
        states = {i: await state_of(api, i) for i in ids}
        assert sorted(states.values()) == ["cancelled"] * 3 + ["paused"] * 2, states
        assert await state_of(api, other["id"]) == "scheduled"  # outside the filter: untouched
        # nothing is scheduled in bulk-q any more: the dialog says so instead of asking
        await until(lambda: not isinstance(app.screen, BulkScreen), 15, "the bulk dialog to close")
        await pilot.press("B", "equals_sign", "7", "enter")
        prompt = app.screen.query_one("#prompt")
        expected = "No job matches state:scheduled queue:bulk-q: nothing to set the priority of."
        try:
            await until(lambda: expected in str(prompt.render()), 3, expected)
        except AssertionError:
            raise AssertionError(f"expected {expected!r} in the dialog; it shows {str(prompt.render())!r}") from None


async def test_job_detail_shows_output_attempts_and_events(node: ServerProcess, api: JobDeckClient) -> None:
    job = await api.submit({"task": {"kind": "shell", "command": "echo detail-output; exit 3"}, "queue": "detail-q",
                            "name": "failing", "max_attempts": 1})  # fmt: skip
    await api.wait_for(job["id"], timeout=10)
    async with console(node.url) as (app, pilot):
        view = jobs_view(app)
        await focus_job(view, job["id"])
        await pilot.press("enter")
        screen = await until(lambda: app.screen if type(app.screen).__name__ == "JobDetailScreen" else None, 3)
        out = screen.query_one("#output")
        await until(lambda: any("detail-output" in line.text for line in out.lines), 15, "the output tail")
        attempts = screen.query_one("#attempts")
        await until(lambda: attempts.row_count == 1, 15, "one attempt")
        assert "exit" in str(attempts.get_row_at(0)).lower() or attempts.get_row_at(0)[5] == "3"
        spec = plain(screen.query_one("#spec").content)
        assert spec.startswith("Times\n") and "finished" in spec, spec  # when it ran, not a "Schedule"
        assert "schedule" not in spec, f"a job no schedule made shows no schedule line: {spec}"
        events = screen.query_one("#events")
        await until(lambda: any("job.dead" in line.text for line in events.lines), 15, "its events")
        await pilot.press("R")  # replay from the dead-letter set, from the detail screen
        await until(lambda: any("job.queued" in line.text for line in events.lines), 15, "the replay, live")
        await pilot.press("escape")
        assert app.screen is app.main_screen


def plain(renderable: Any) -> str:
    """What a renderable shows, as text."""
    out = Console(width=100, color_system=None)
    with out.capture() as captured:
        out.print(renderable)
    return captured.get()


async def test_sorting_happens_on_the_server_and_the_bar_counts_every_match(
    node: ServerProcess, api: JobDeckClient
) -> None:
    await api.submit_batch([later(f"sorted-{p}", "sort-q", priority=p) for p in (3, -2, 9, 0, 5)])
    async with console(node.url) as (app, pilot):
        view = jobs_view(app)
        await view.set_query(view.query_.parse("queue:sort-q"))
        await pilot.press("s")  # id -> priority, highest first
        await until(lambda: view.sort_by == "priority" and len(view.rows) == 5, 15, "the priority order")
        order = [int(cell(view, int(k), "priority")) for k in view.table._keys]
        assert order == [9, 5, 3, 0, -2], order
        server = await api.list_jobs(queue="sort-q", sort="priority", order="desc")
        assert view.table._keys == [str(j["id"]) for j in server["jobs"]], "the server's order"
        assert "5 of 5" in str(view._bar), str(view._bar)
        await pilot.press("S")
        await until(lambda: [int(cell(view, int(k), "priority")) for k in view.table._keys] == [-2, 0, 3, 5, 9],
                    5, "the reversed order")  # fmt: skip


async def test_a_tag_filter_follows_the_feed_and_the_cursor_stays_put(node: ServerProcess, api: JobDeckClient) -> None:
    # Enough rows to fill the screen: the table can keep the cursor's row where it is on screen.
    await api.submit_batch([later(f"red-old-{i}", "tag-q", tags=["red"]) for i in range(50)])
    first = (await api.list_jobs(tag="red", limit=12))["jobs"][-1]
    async with console(node.url) as (app, _):
        view = jobs_view(app)
        await view.set_query(view.query_.parse("tag:red"))
        await focus_job(view, first["id"])
        screen_row = view.table.cursor_row - view.table._top
        reloads = 0
        real_reload = view.reload

        async def counting_reload() -> None:
            nonlocal reloads
            reloads += 1
            await real_reload()

        view.reload = counting_reload  # type: ignore[method-assign]
        red = [await api.submit(later(f"red-{i}", "tag-q", tags=["red", "x"])) for i in range(3)]
        blue = await api.submit(later("blue", "tag-q", tags=["blue"]))
        await until(lambda: all(j["id"] in view.rows for j in red), 15, "the new red jobs from the feed")
        assert blue["id"] not in view.rows, "a job without the tag stays out"
        assert reloads == 0, "the tag filter is checked against the events, not by asking the server again"
        assert view.current()["id"] == first["id"]  # type: ignore[index]
        assert view.table.cursor_row - view.table._top == screen_row, "the cursor row kept its place on screen"
        assert "53 of 53" in str(view._bar), str(view._bar)


async def test_z_shows_times_in_utc_or_the_local_zone(node: ServerProcess) -> None:
    async with console(node.url) as (app, pilot):
        when = 1_780_000_000.0
        assert app.fmt.clock_time(when).endswith(("UTC", *"ABCDEFGHIJKLMNOPQRSTUVWXYZ")), app.fmt.clock_time(when)
        await pilot.press("z")
        assert app.fmt.utc and app.fmt.clock_time(when) == "20:26:40 UTC", app.fmt.clock_time(when)
        assert app.fmt.date_time(when, "Europe/Paris") == "2026-05-28 22:26:40 CEST", "a schedule keeps its zone"
        await pilot.press("z")
        assert not app.fmt.utc


async def test_run_now_queues_a_waiting_job_at_once_keeping_its_priority(
    node: ServerProcess, api: JobDeckClient
) -> None:
    job = await api.submit(later("waits-an-hour", "run-now-q", priority=7))
    await api.queue_action("run-now-q", "pause")  # once queued it stays queued: what run now did is what we see
    async with console(node.url) as (app, pilot):
        view = jobs_view(app)
        await focus_job(view, job["id"])
        assert cell(view, job["id"], "state") == "scheduled"
        await pilot.press("x")
        await until(lambda: cell(view, job["id"], "state") == "queued", 15, "queued in the table")
        got = await api.get_job(job["id"])
        assert (got["state"], got["priority"]) == ("queued", 7), got
        assert got["run_at"] < job["run_at"], "it runs now, not in an hour"
        await pilot.press("x")  # queued already: the server's 409 says so and nothing changes
        await until(lambda: any("queued already" in str(n.message) for n in app._notifications), 15, "the refusal")
    await api.queue_action("run-now-q", "resume")
