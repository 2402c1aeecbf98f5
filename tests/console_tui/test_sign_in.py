"""The console on a server with sign-in by static tokens: the token `jobdeck login` cached, the
user and role in the header, a viewer's disabled actions, another team's queue refused by the
server, and a token the server does not accept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from console_tui.app import ConsoleApp, sign_in
from console_tui.screens.help import HelpScreen
from console_tui.screens.jobs import JobsView
from console_tui.screens.new_job import NewJobScreen
from core.auth.tokens import token_hash
from core.client import JobDeckClient
from tests.auth.principals import TEAM_QUEUES, TOKENS
from tests.conftest import ROOT, ServerProcess, spawn_jobdeck, until
from tests.console_tui.conftest import SIZE, later, stop

pytestmark = pytest.mark.timeout(60)


def token(who: str) -> str:
    return TOKENS[who][0]


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """`jobdeck server` with auth = token and the test tokens of tests/auth (no agent)."""
    tokens = [{"name": name, "sha256": token_hash(tok), "role": role, "teams": teams}
              for name, (tok, role, teams) in TOKENS.items()]  # fmt: skip
    env = {
        "JOBDECK_AUTH": "token",
        "JOBDECK_TOKENS": json.dumps(tokens),
        "JOBDECK_TEAM_QUEUES": json.dumps(TEAM_QUEUES),
    }
    sp = spawn_jobdeck(tmp_path_factory.mktemp("signed") / "data", "server", env=env)
    try:
        yield sp
    finally:
        stop(sp)


@pytest.fixture
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A fresh ~/.config for `jobdeck login` to cache tokens in; no token from the environment."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("JOBDECK_TOKEN", raising=False)
    monkeypatch.delenv("JOBDECK_CONFIG_DIR", raising=False)
    return dict(os.environ)


def jobdeck(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "core.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=30)  # fmt: skip


def login(env: dict[str, str], url: str, who: str) -> None:
    out = jobdeck(env, "--server", url, "login", "--token", token(who))
    assert out.returncode == 0, out.stdout + out.stderr
    assert (Path(env["XDG_CONFIG_HOME"]) / "jobdeck" / "credentials.json").exists()


async def signed_in_console(url: str) -> ConsoleApp:
    """The console as `jobdeck console` makes it: from the cached token."""
    tok, identity = await sign_in(url)
    return ConsoleApp(url, tok, identity=identity)


async def ready(app: ConsoleApp) -> JobsView:
    await until(lambda: app.ready.is_set(), 10, "the console to start")
    view = app.main_screen.query_one("#jobs", JobsView)  # type: ignore[union-attr]
    await until(lambda: view.loaded, 10, "the jobs view to load")
    await until(lambda: app.connection.state == "live", 10, "the feed to be live")
    return view


def header_text(app: ConsoleApp) -> str:
    grid = app.main_screen.query_one("ConsoleHeader").render().renderables[0]  # type: ignore[union-attr, attr-defined]
    return " ".join(str(cell) for column in grid.columns for cell in column._cells)


async def test_a_viewer_from_the_cached_token_sees_who_and_why_actions_are_disabled(
    signed: ServerProcess, config_home: dict[str, str]
) -> None:
    async with JobDeckClient(signed.url, token=token("admin")) as admin:
        job = await admin.submit(later("payroll", "payments"))
    login(config_home, signed.url, "viewer")
    app = await signed_in_console(signed.url)
    async with app.run_test(size=SIZE) as pilot:
        view = await ready(app)
        assert "viewer · viewer (token)" in header_text(app), header_text(app)
        await until(lambda: job["id"] in view.rows, 15, "the team's job in the table")
        view.table.move_cursor(key=str(job["id"]))
        assert view.check_action("pause", ()) is None  # shown, greyed out
        assert view.refusal("pause") == "your role (viewer) does not allow jobs.write"
        await pilot.press("p")
        await pilot.press("question_mark")
        await until(lambda: isinstance(app.screen, HelpScreen), 15, "the help screen")
        keys = app.screen.query_one("#keys")
        cells = [str(c) for r in range(keys.row_count) for c in keys.get_row_at(r)]  # type: ignore[attr-defined]
        assert any("disabled: your role (viewer) does not allow jobs.write" in c for c in cells), cells
    async with JobDeckClient(signed.url, token=token("admin")) as admin:
        assert (await admin.get_job(job["id"]))["state"] == "scheduled", "a viewer's key press changed nothing"


async def test_an_operator_on_another_teams_queue_gets_the_servers_reason(
    signed: ServerProcess, config_home: dict[str, str]
) -> None:
    login(config_home, signed.url, "operator")  # team payments
    app = await signed_in_console(signed.url)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        assert "operator · operator (token)" in header_text(app), header_text(app)
        await pilot.press("n")
        await until(lambda: isinstance(app.screen, NewJobScreen), 15, "the new-job form")
        form: Any = app.screen
        form.query_one("#command").value = "echo not-mine"
        form.query_one("#queue").value = "ml"  # team ml's queue
        form.query_one("#name").value = "not-mine"
        await pilot.press("ctrl+s")

        def refusal() -> str:
            return next((str(n.message) for n in app._notifications if n.title == "refused (403)"), "")

        reason = await until(refusal, 15, "a notification with the server's 403 reason")
        assert "'ml'" in reason and "operator" in reason, reason
        assert isinstance(app.screen, NewJobScreen), "the form stays open to fix the queue"
    async with JobDeckClient(signed.url, token=token("admin")) as admin:
        assert not (await admin.list_jobs(queue="ml"))["jobs"], "nothing was made in another team's queue"


def test_a_wrong_token_is_one_line_with_the_login_hint(signed: ServerProcess, config_home: dict[str, str]) -> None:
    login(config_home, signed.url, "viewer")
    cache = Path(config_home["XDG_CONFIG_HOME"]) / "jobdeck" / "credentials.json"
    entries = json.loads(cache.read_text())
    for entry in entries.values():
        entry["access_token"] = "jd_revoked_or_mistyped_token_000000000000000"
    cache.write_text(json.dumps(entries))
    out = jobdeck(config_home, "--server", signed.url, "console")
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert out.returncode == 1, lines
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert f"jobdeck login --server {signed.url}" in lines[0], lines
    assert "Traceback" not in out.stderr
