"""Sign-in and roles in the browser, against a core with token sign-in: signed out, a bad token,
a viewer whose actions are disabled with the reason, an operator limited to its team's queues."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from core.auth.tokens import token_hash
from core.client import JobDeckClient
from tests.conftest import ROOT, ServerProcess, free_port, spawn_jobdeck
from tests.web_ui.conftest import NAV_TIMEOUT, UI_TIMEOUT, Console, _stop, _wait_up

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TOKENS = {
    "admin": ("jd_web_admin_token_for_tests_00000000000000", "admin", []),
    "operator": ("jd_web_operator_token_for_tests_000000000000", "operator", ["payments"]),
    "viewer": ("jd_web_viewer_token_for_tests_00000000000000", "viewer", ["payments"]),
}


def _toml(value: Any) -> str:
    return json.dumps(value)  # JSON strings and lists of strings are TOML too


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    """A core with token sign-in and a dashboard whose backend follows the feed with the admin token."""
    base = tmp_path_factory.mktemp("secured")
    lines = ['auth = "token"', "[team_queues]", 'payments = ["payments", "payments-*"]']
    for name, (token, role, teams) in TOKENS.items():
        lines += ["[[tokens]]", f"name = {_toml(name)}", f"sha256 = {_toml(token_hash(token))}",
                  f"role = {_toml(role)}", f"teams = {_toml(teams)}"]  # fmt: skip
    config = base / "jobdeck.toml"
    config.write_text("\n".join(lines) + "\n")
    core = spawn_jobdeck(base / "data", "up", "--no-web", "--slots", "2",
                         env={"JOBDECK_CONFIG": str(config), "JOBDECK_WEB": "0"})  # fmt: skip
    port, log = free_port(), base / "web.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "JOBDECK_TOKEN": TOKENS["admin"][0],
           "JOBDECK_WEB_WORKDIR": str(base / "frontend")}  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "core.cli", "web", "--server", core.url, "--port", str(port)],
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_up(proc, url, log)
        yield core, url
    finally:
        _stop(proc)
        core.proc.terminate()
        core.proc.wait(15)


def admin(core: ServerProcess, method: str, *args: Any) -> Any:
    async def call() -> Any:
        async with JobDeckClient(core.url, token=TOKENS["admin"][0]) as client:
            return await getattr(client, method)(*args)

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, call()).result(timeout=30)


@pytest.fixture
def signed_in(browser: Browser, secured: tuple[ServerProcess, str], console: Console) -> Iterator[Callable[..., Page]]:
    contexts = []

    def open_as(who: str | None, path: str = "/jobs") -> Page:
        ctx = browser.new_context(viewport={"width": 1400, "height": 900})
        ctx.set_default_timeout(UI_TIMEOUT)
        ctx.set_default_navigation_timeout(NAV_TIMEOUT)
        contexts.append(ctx)
        page = console.watch(ctx.new_page())
        page.goto(secured[1] + path)
        if who is not None:
            page.locator("#sign-in").click()
            page.get_by_label("Access token").fill(TOKENS[who][0])
            page.get_by_role("button", name="Sign in with the token").click()
            expect(page.locator("#user-role")).to_have_text(TOKENS[who][1])
            page.goto(secured[1] + path)
        return page

    yield open_as
    for ctx in contexts:
        ctx.close()


def test_signed_out_then_a_bad_token_says_why(signed_in: Callable[..., Page], secured: tuple[ServerProcess, str],
                                              console: Console) -> None:  # fmt: skip
    page = signed_in(None)
    expect(page.locator("#signed-out")).to_be_visible()
    console.errors.clear()
    page.locator("#sign-in").click()
    page.get_by_label("Access token").fill("not-a-token")
    page.get_by_role("button", name="Sign in with the token").click()
    expect(page.locator("#signin-error")).to_be_visible()
    console.errors[:] = [e for e in console.errors if "401" not in e]  # the page's own failed calls


def test_a_viewer_sees_jobs_but_every_action_is_disabled_with_the_reason(
    signed_in: Callable[..., Page], secured: tuple[ServerProcess, str]
) -> None:
    job = admin(secured[0], "submit", {"queue": "payments", "delay": 600, "task": {"kind": "shell", "argv": ["true"]}})
    page = signed_in("viewer")
    row = page.locator(f"#job-row-{job['id']}")
    expect(row).to_be_visible()
    expect(row.locator(".act-pause")).to_be_disabled()
    expect(row.locator(".act-pause")).to_have_attribute("title", "your role (viewer) may not change jobs")
    expect(page.locator("#new-job")).to_be_disabled()
    expect(page.locator("#nav-audit")).to_have_count(0)


def test_an_operator_acts_only_on_its_teams_queues(signed_in: Callable[..., Page],
                                                   secured: tuple[ServerProcess, str]) -> None:  # fmt: skip
    core = secured[0]
    spec = {"delay": 600, "task": {"kind": "shell", "argv": ["true"]}}
    mine = admin(core, "submit", {**spec, "queue": "payments-eu"})
    other = admin(core, "submit", {**spec, "queue": "default"})
    page = signed_in("operator")
    page.locator(f"#job-row-{mine['id']} .act-pause").click()
    expect(page.locator(f"#job-row-{mine['id']} .job-state")).to_have_text("paused")
    expect(page.locator(f"#job-row-{other['id']}")).to_have_count(0)  # the core shows a team its own queues

    # Submitting to a queue of another team: the server's 403 shows in a toast and nothing is made.
    before = len(admin(core, "list_jobs")["jobs"])
    page.get_by_role("button", name="New job").click()
    form = page.get_by_role("dialog")
    form.get_by_label("Command").fill("echo nope")
    form.get_by_label("Queue").fill("default")
    form.locator("#submit-job").click()
    expect(page.locator("[data-sonner-toast]").first).to_be_visible()
    assert len(admin(core, "list_jobs")["jobs"]) == before


def test_the_alert_banner_shows_an_operator_only_its_teams_alerts(signed_in: Callable[..., Page],
                                                                  secured: tuple[ServerProcess, str]) -> None:  # fmt: skip
    """The dashboard follows the feed with its service token (which sees every queue); a session's banner
    must still show only alerts of queues its user's teams cover (as the core's own feed would)."""
    core = secured[0]
    channel = admin(core, "create_channel", {"kind": "webhook", "name": "nowhere", "url": "http://127.0.0.1:9/hook"})
    admin(core, "create_alert_rule", {"name": "any-dead", "events": ["job.dead"], "channels": [channel["id"]],
                                      "window_seconds": 0})  # fmt: skip
    dying = {"max_attempts": 1, "task": {"kind": "shell", "argv": ["false"]}}
    boss, operator = signed_in("admin"), signed_in("operator")
    mine = admin(core, "submit", {**dying, "name": "refund-batch", "queue": "payments"})
    expect(operator.locator("#alert-banner")).to_contain_text(f"job {mine['id']} refund-batch", timeout=30_000)
    theirs = admin(core, "submit", {**dying, "name": "ledger-close", "queue": "default"})
    expect(boss.locator("#alert-banner")).to_contain_text(f"job {theirs['id']} ledger-close", timeout=30_000)
    operator.reload()  # the newest alert is of queue default, not the payments team's: the operator keeps its own
    expect(operator.locator("#alert-banner")).to_contain_text(f"job {mine['id']} refund-batch", timeout=30_000)
    expect(operator.locator("#alert-banner")).not_to_contain_text("ledger-close")


def test_an_admin_drains_an_agent(signed_in: Callable[..., Page]) -> None:
    """Last in this module: the core's only agent takes no more work after it."""
    page = signed_in("admin", "/agents")
    drain = page.get_by_role("button", name=re.compile(r"^Drain agent "))
    expect(drain).to_be_enabled()
    drain.click()
    expect(page.locator("#agents-table")).to_contain_text("draining")
    expect(drain).to_be_disabled()
