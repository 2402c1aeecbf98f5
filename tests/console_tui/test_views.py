"""Queues, Schedules, Agents and Events views against a real server; roles; reconnecting; bad URLs."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from console_tui.permissions import Identity
from console_tui.screens.dialogs import ConfirmScreen, PromptScreen
from console_tui.screens.help import HelpScreen
from core.client import JobDeckClient
from tests.conftest import ROOT, ServerProcess, free_port, spawn_agent, spawn_jobdeck, until
from tests.console_tui.conftest import console, later, stop

pytestmark = pytest.mark.timeout(60)


def view(app: Any, name: str) -> Any:
    return app.main_screen.query_one(f"#{name}")


async def select(table_view: Any, key: str) -> None:
    await until(lambda: key in table_view.items, 5, f"{key} in the {table_view.view_name} view")
    table_view.table.move_cursor(row=table_view.table.get_row_index(key))


async def test_queue_pause_resume_and_concurrency(node: ServerProcess, api: JobDeckClient) -> None:
    await api.submit(later("q", "ops-q"))
    async with console(node.url) as (app, pilot):
        await pilot.press("2")
        queues = view(app, "queues")
        await select(queues, "ops-q")
        await pilot.press("p")
        await until(lambda: queues.items["ops-q"]["paused"], 15, "the queue paused")
        assert any(q["name"] == "ops-q" and q["paused"] for q in await api.queues())
        await pilot.press("u")
        await until(lambda: not queues.items["ops-q"]["paused"], 15, "the queue resumed")
        await pilot.press("C")
        await until(lambda: isinstance(app.screen, PromptScreen), 15, "the concurrency prompt")
        app.screen.query_one("#value").value = "3"
        await pilot.press("enter")
        await until(lambda: queues.items["ops-q"].get("concurrency") == 3, 15, "the limit shown")
        await pilot.press("L")
        await until(lambda: isinstance(app.screen, PromptScreen), 15, "the rate-limit prompt")
        app.screen.query_one("#value").value = "2.5 burst 4"
        await pilot.press("enter")
        await until(lambda: queues.items["ops-q"].get("rate_limit") == 2.5, 15, "the rate limit shown")
        await pilot.press("K")
        await until(lambda: isinstance(app.screen, PromptScreen), 15, "the per-key prompt")
        app.screen.query_one("#value").value = "2"
        await pilot.press("enter")
        await until(lambda: queues.items["ops-q"].get("key_concurrency") == 2, 15, "the per-key limit shown")
        said = [str(n.message) for n in app._notifications]
        assert {"queue ops-q: concurrency 3", "queue ops-q: rate limit 2.5 burst 4",
                "queue ops-q: per-key limit 2"} <= set(said), f"each change is confirmed: {said}"  # fmt: skip
        await pilot.press("W")
        await until(lambda: isinstance(app.screen, PromptScreen), 15, "the fair-share prompt")
        assert app.screen.query_one("#value").value == "off", "no rotation, no weights yet"
        app.screen.query_one("#value").value = "on gold=3 free=1"
        await pilot.press("enter")
        await until(lambda: queues.items["ops-q"].get("fair") is True, 15, "fair share shown on")
        [q] = [q for q in await api.queues() if q["name"] == "ops-q"]
        assert (q["rate_limit"], q["rate_burst"], q["key_concurrency"]) == (2.5, 4, 2), q
        assert (q["fair"], q["fairness_weights"]) == (True, {"gold": 3.0, "free": 1.0}), q
        row = [str(c) for c in queues.table.get_row("ops-q")]
        assert "2.5/s ×4" in row and "2 fair" in row, row
        await until(lambda: "fair share: on, weights free=1 gold=3" in str(queues.query_one("#keys").render()), 15,
                    "the weights under the table")  # fmt: skip


async def test_schedule_pause_resume(node: ServerProcess, api: JobDeckClient) -> None:
    s = await api.create_schedule({"name": "nightly", "cron": "0 2 * * *", "timezone": "Europe/Paris",
                                   "job": {"task": {"kind": "shell", "command": "true"}, "queue": "sched-q"}})  # fmt: skip
    async with console(node.url) as (app, pilot):
        await pilot.press("4")
        schedules = view(app, "schedules")
        await select(schedules, str(s["id"]))
        await pilot.press("p")
        await until(lambda: schedules.items[str(s["id"])]["paused"], 15, "the schedule paused")
        assert (await api.get_schedule(s["id"]))["paused"]
        await pilot.press("u")
        await until(lambda: not schedules.items[str(s["id"])]["paused"], 15, "the schedule resumed")


async def test_the_bar_gives_the_cursor_schedules_next_fire_in_the_viewers_zone_too(
        node: ServerProcess, api: JobDeckClient) -> None:  # fmt: skip
    s = await api.create_schedule({"name": "paris", "cron": "0 2 * * *", "timezone": "Europe/Paris",
                                   "job": {"task": {"kind": "shell", "command": "true"}, "queue": "sched-q"}})  # fmt: skip
    nxt = datetime.fromisoformat(s["next_fire_at"].replace("Z", "+00:00"))
    paris = nxt.astimezone(ZoneInfo("Europe/Paris"))
    async with console(node.url) as (app, pilot):
        app.fmt.utc = True  # the viewer reads UTC: the bar gives the fire time in UTC beside Paris's
        await pilot.press("4")
        schedules = view(app, "schedules")
        await select(schedules, str(s["id"]))
        want = (
            f"#{s['id']} paris next fires {paris:%Y-%m-%d %H:%M:%S} {paris.tzname()} = {nxt:%H:%M:%S} UTC"
            if paris.date() == nxt.date()
            else f"{nxt:%Y-%m-%d %H:%M:%S} UTC"
        )
        bar = app.main_screen.query_one("#schedules #bar")
        await until(lambda: want in str(bar.render()), 5, f"{want!r} in the bar")


async def test_drain_an_agent_after_confirmation(node: ServerProcess, api: JobDeckClient, tmp_path: Path) -> None:
    agent = spawn_agent(node.url, "drain-me", tmp_path, "--queues", "drain-q")
    try:
        await until(lambda: api.agents(), 10)
        await until(lambda: _agent(api, "drain-me"), 10, "the agent to connect")
        async with console(node.url) as (app, pilot):
            await pilot.press("3")
            agents = view(app, "agents")
            await select(agents, "drain-me")
            await pilot.press("d")
            await until(lambda: isinstance(app.screen, ConfirmScreen), 15, "a confirmation")
            await pilot.press("y")
            await until(lambda: agents.items["drain-me"].get("draining"), 15, "the agent draining")
    finally:
        agent.terminate()
        agent.wait(15)


async def _agent(api: JobDeckClient, name: str) -> dict[str, Any] | None:
    return next((a for a in await api.agents() if a["name"] == name), None)


async def test_event_log_shows_changes_live(node: ServerProcess, api: JobDeckClient) -> None:
    async with console(node.url) as (app, pilot):
        await pilot.press("6")
        job = await api.submit(later("logged", "log-q"))
        log = view(app, "events").query_one("#log")
        await until(lambda: any(f"#{job['id']}" in line.text for line in log.lines), 15, "the event line")


async def test_event_log_lists_events_from_before_the_console_opened(node: ServerProcess, api: JobDeckClient) -> None:
    job = await api.submit(later("earlier", "history-q"))
    await api.job_action(job["id"], "pause")
    async with console(node.url) as (app, pilot):
        await pilot.press("6")
        log = view(app, "events").query_one("#log")
        mine = lambda: [line.text for line in log.lines if f"#{job['id']}" in line.text]  # noqa: E731
        await until(lambda: len(mine()) >= 2, 15, "the job's earlier events")
        later_job = await api.submit(later("after-open", "history-q"))
        await until(
            lambda: any(f"#{later_job['id']}" in line.text for line in log.lines), 15, "a live event after them"
        )
        seqs = [int(line.text.split()[2]) for line in log.lines if line.text.split()[2:3] != ["-"]]  # time, zone, seq
        assert seqs == sorted(set(seqs)), f"expected each event once, in seq order; got {seqs}"
        assert any("job.paused" in t for t in mine()), mine()


async def test_a_viewer_sees_actions_disabled_with_the_reason(node: ServerProcess, api: JobDeckClient) -> None:
    job = await api.submit(later("not-yours", "viewer-q"))
    viewer = Identity(name="ada", role="viewer", auth="token", queues=("*",), allowed=frozenset({"jobs.read"}))
    async with console(node.url, identity=viewer) as (app, pilot):
        jobs = view(app, "jobs")
        await until(lambda: job["id"] in jobs.rows, 3)
        jobs.table.move_cursor(row=jobs.table.get_row_index(str(job["id"])))
        assert jobs.check_action("pause", ()) is None  # shown, greyed out
        assert jobs.refusal("pause") == "your role (viewer) does not allow jobs.write"
        await pilot.press("p")
        assert (await api.get_job(job["id"]))["state"] == "scheduled"
        await pilot.press("question_mark")
        await until(lambda: isinstance(app.screen, HelpScreen), 3)
        rows = [str(c) for r in range(app.screen.query_one("#keys").row_count)
                for c in app.screen.query_one("#keys").get_row_at(r)]  # fmt: skip
        assert any("disabled: your role (viewer) does not allow jobs.write" in c for c in rows)
        assert "ada · viewer (token)" in app.identity.label
    operator = Identity(name="bo", role="operator", auth="oidc", queues=("team-*",), allowed=frozenset({"jobs.write"}))
    assert operator.refusal("jobs.write", "viewer-q") == "queue 'viewer-q' is not one of yours (team-*)"
    assert operator.refusal("jobs.write", "team-a") is None


async def test_reconnects_after_the_server_restarts_and_misses_nothing(tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "data"
    sp = spawn_jobdeck(data, "server", port=port)
    try:
        async with JobDeckClient(sp.url) as api, console(sp.url) as (app, _):
            jobs = view(app, "jobs")
            seen: list[int] = []
            app.on_batch = lambda events: seen.extend(e["seq"] for e in events if e.get("seq"))
            before = await api.submit(later("before", "restart-q"))
            await until(lambda: before["id"] in jobs.rows, 3)
            sp.kill()
            await until(lambda: app.connection.state == "reconnecting", 15, "the header to say reconnecting")
            header = app.main_screen.query_one("ConsoleHeader")
            assert "reconnecting" in str(header.render().renderables[0].columns[1]._cells)  # type: ignore[attr-defined]
            sp = spawn_jobdeck(data, "server", port=port)
            after = await api.submit(later("after", "restart-q"))
            await api.job_action(before["id"], "pause")
            await until(lambda: app.connection.state == "live", 10, "the feed live again")
            await until(lambda: after["id"] in jobs.rows, 15, "a job made after the restart")
            await until(lambda: jobs.rows[before["id"]]["state"] == "paused", 15, "a change made after the restart")
            last = (await api.health())["last_seq"]
            assert seen == list(range(1, last + 1)), "every event once, in order, across the restart"
    finally:
        stop(sp)


def test_a_wrong_server_url_is_one_line_with_a_hint() -> None:
    out = subprocess.run([sys.executable, "-m", "core.cli", "--server", f"http://127.0.0.1:{free_port()}", "console"],
                         cwd=ROOT, capture_output=True, text=True, timeout=30)  # fmt: skip
    assert out.returncode == 1
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach JobDeck"), lines
    assert "Traceback" not in out.stderr


async def test_the_command_palette_lists_every_action_of_the_view(node: ServerProcess) -> None:
    from console_tui.actions import ACTIONS

    async with console(node.url) as (app, _):
        titles = [c.title for c in app.get_system_commands(app.main_screen)]  # type: ignore[arg-type]
        wanted = [a.title for a in ACTIONS if "jobs" in a.views]
        missing = [t for t in wanted if not any(c == t or c == f"{t} (disabled)" for c in titles)]
        assert not missing, f"not in the palette: {missing}; it has {titles}"
        assert {"Show Jobs", "Show Dead letters", "Show Events"} <= set(titles), titles


async def test_the_queues_view_shows_the_highlighted_queues_per_key_usage_and_its_breakers(
    node: ServerProcess, api: JobDeckClient, tmp_path: Path
) -> None:
    from tests.store.test_two_node_breakers import FlakyHost

    host = FlakyHost()
    sleep = {"kind": "python", "function": "agents.builtin:sleep", "args": [30]}
    try:
        await api.submit(later("q", "keys-q"))
        await api.update_queue("keys-q", key_concurrency=1, breaker_min_requests=2, breaker_reset=300.0)
        jobs = [await api.submit({"task": sleep, "queue": "keys-q", "concurrency_key": k, "fairness_key": k})
                for k in ("acme", "acme", "acme", "zeta", "zeta")]  # fmt: skip
        for _ in range(2):
            dead = await api.submit({"task": {"kind": "http", "url": f"http://{host.address}/"}, "queue": "keys-q",
                                     "max_attempts": 1})  # fmt: skip
            await api.wait_for(dead["id"], timeout=20)
        async with console(node.url) as (app, pilot):
            await pilot.press("2")
            queues = view(app, "queues")
            await select(queues, "keys-q")

            def panel() -> str:
                return str(queues.query_one("#keys").render())

            await until(lambda: "running  acme 1/1 · zeta 1/1" in panel(), 10, f"the running count per key: {panel()}")
            text = panel()
            assert "queued   acme 2 (served 1) · zeta 1 (served 1)" in text, text
            assert f"{host.address} open (wait; nothing sent while open; opened 1×)" in text, text
            assert f"circuit open for host {host.address} (queue 'keys-q')" in text, text
            assert "1 open" in [str(c) for c in queues.table.get_row("keys-q")]
    finally:
        host.server.shutdown()
        await api.bulk("cancel", ids=[j["id"] for j in jobs])


async def test_a_queues_breaker_numbers_are_edited_and_an_open_breaker_reset_from_the_queues_view(
    node: ServerProcess, api: JobDeckClient
) -> None:
    from tests.store.test_two_node_breakers import FlakyHost

    host = FlakyHost()
    try:
        await api.submit(later("q", "brk-q"))
        await api.update_queue("brk-q", breaker_min_requests=2, breaker_reset=3600.0)
        for _ in range(2):
            dead = await api.submit({"task": {"kind": "http", "url": f"http://{host.address}/"}, "queue": "brk-q",
                                     "max_attempts": 1})  # fmt: skip
            await api.wait_for(dead["id"], timeout=20)
        async with console(node.url) as (app, pilot):
            await pilot.press("2")
            queues = view(app, "queues")
            await select(queues, "brk-q")
            await until(lambda: "1 open" in [str(c) for c in queues.table.get_row("brk-q")], 10, "the breaker open")
            await pilot.press("B")
            await until(lambda: isinstance(app.screen, PromptScreen), 15, "the breaker prompt")
            field = app.screen.query_one("#value")
            assert field.value == "ratio 0.5 window 10 reset 3600 min 2 mode wait", field.value

            async def refused(text: str, words: str) -> None:
                field.value = text
                await pilot.press("enter")
                await until(lambda: words in str(app.screen.query_one("#error").render()), 5, f"{words!r} shown")
                assert isinstance(app.screen, PromptScreen), "a refused change keeps the prompt open"

            await refused("ratio x", "ratio 'x': not a number")
            await refused("speed 3", "'speed' is none of ratio, window, reset, min, mode")
            await refused("ratio 1.5", "less than or equal to 1")  # the server's 422
            await refused("mode later", "breaker_mode")
            field.value = "ratio 40% window 20 reset 90 min 3 mode fail"
            await pilot.press("enter")
            await until(lambda: queues.items["brk-q"].get("breaker_mode") == "fail", 15, "the new numbers shown")
            [q] = [q for q in await api.queues() if q["name"] == "brk-q"]
            got = tuple(q[f"breaker_{k}"] for k in ("failure_ratio", "window", "reset", "min_requests", "mode"))
            assert got == (0.4, 20.0, 90.0, 3, "fail"), q
            await pilot.press("X")
            await until(lambda: isinstance(app.screen, PromptScreen), 15, "the reset prompt")
            assert app.screen.query_one("#value").value == host.address
            assert f"open now: {host.address}" in str(app.screen.query_one("Label:last-of-type").render())
            await pilot.press("enter")
            await until(lambda: not isinstance(app.screen, PromptScreen), 5,
                        lambda: f"the prompt to close: {app.screen.query_one('#error').render()}")  # fmt: skip
            await until(lambda: str(queues.table.get_row("brk-q")[8]) == "-", 10, "the breaker closed in the table")
            [b] = [b for b in await api.breakers() if b["queue"] == "brk-q"]
            assert b["state"] == "closed", b
    finally:
        host.server.shutdown()


def test_the_fair_share_prompt_reads_on_off_and_weights_and_says_which_word_it_cannot_use() -> None:
    from console_tui.screens.queues import fair_share_text, parse_fair_share

    assert parse_fair_share("on gold=3 free=0.5") == {"fair": True, "fairness_weights": {"gold": 3.0, "free": 0.5}}
    assert parse_fair_share("off none") == {"fair": False, "fairness_weights": None}
    assert fair_share_text({"fair": True, "fairness_weights": {"b": 2.0, "a": 1.5}}) == "on a=1.5 b=2"
    for text, says in (("gold=x", "the weight of 'gold' is not a number"), ("maybe", "'maybe': say on or off"),
                       ("", "say on or off")):  # fmt: skip
        with pytest.raises(ValueError, match=says):
            parse_fair_share(text)
