"""Fixtures for the browser tests: one real core (`jobdeck up`), one real dashboard
(`jobdeck web`, Reflex production mode, built once per session) and Debian's chromium."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, ServerProcess, free_port, spawn_jobdeck

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]  # fmt: skip
WEB_START_TIMEOUT = 240.0  # the first build of a fresh clone installs the frontend packages
UI_TIMEOUT = 10_000  # ms: the longest any page waits for something to show
NAV_TIMEOUT = 30_000  # ms: a page load on a busy two-core CI machine

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium; ./dev test installs it)", allow_module_level=True)

from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright  # noqa: E402


@dataclass
class Dashboard:
    """A running `jobdeck web` and the core it shows."""

    url: str
    core: ServerProcess
    proc: subprocess.Popen[bytes]
    log: Path


def start_core(data_dir: Path, port: int | None = None) -> ServerProcess:
    return spawn_jobdeck(data_dir, "up", "--no-web", "--slots", "4", port=port, env={"JOBDECK_WEB": "0"})


@pytest.fixture(scope="session")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """`jobdeck web --server CORE --port P` as a user runs it."""
    base = tmp_path_factory.mktemp("web")
    core = start_core(base / "data")
    port = free_port()
    log = base / "web.log"
    cmd = [sys.executable, "-m", "core.cli", "web", "--server", core.url, "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1",
                                     "JOBDECK_WEB_WORKDIR": str(base / "frontend")})  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    dashboard = Dashboard(url, core, proc, log)
    try:
        _wait_up(proc, url, log)
        yield dashboard
    finally:
        _stop(proc)
        core = dashboard.core  # a test may have restarted the core: stop the one running now
        if core.proc.poll() is None:
            core.proc.terminate()
            core.proc.wait(15)


def _wait_up(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    import time

    deadline = time.monotonic() + WEB_START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jobdeck web exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(url + "/ping", timeout=1).status_code == 200 and "is up" in log.read_text():
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"jobdeck web did not answer within {WEB_START_TIMEOUT} s:\n{log.read_text()[-4000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's chromium, one per test module: Playwright's sync API runs an event loop in this
    thread while it is open, which asyncio tests collected after these must not find running."""
    with tempfile.TemporaryDirectory(prefix="jobdeck-chromium-") as config_home, sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, env=chromium_env(config_home))
        yield b
        b.close()


def chromium_env(config_home: str) -> dict[str, str]:
    """Chromium's environment: its profile and caches in `config_home`, nothing in $HOME."""
    return {**os.environ, "XDG_CONFIG_HOME": config_home, "XDG_CACHE_HOME": config_home}


@dataclass
class Console:
    """Console errors and page errors seen by the pages of one test."""

    errors: list[str] = field(default_factory=list)
    origins: tuple[str, ...] = ()  # the dashboards' origins; pages elsewhere (an IdP's) are not ours to judge

    def elsewhere(self, url: str) -> bool:
        return bool(self.origins) and not url.startswith(self.origins)

    def watch(self, page: Page) -> Page:
        def on_console(msg: ConsoleMessage) -> None:
            if msg.type == "error" and not self.elsewhere(page.url):
                self.errors.append(f"{page.url}: {msg.text}")

        page.on("console", on_console)
        page.on("pageerror", lambda exc: self.errors.append(f"{page.url}: {exc}"))
        return page


@pytest.fixture
def console() -> Iterator[Console]:
    """Fails the test if any page it opened logged an error to the browser console."""
    seen = Console()
    yield seen
    assert seen.errors == [], "browser console errors:\n" + "\n".join(seen.errors)


@pytest.fixture
def open_page(browser: Browser, web: Dashboard, console: Console) -> Iterator[object]:
    """`open_page(path, dark=False)`: a page in a fresh browser context (its own session)."""
    contexts = []

    def open_(path: str = "/", *, dark: bool = False, width: int = 1400) -> Page:
        ctx = browser.new_context(viewport={"width": width, "height": 900}, color_scheme="dark" if dark else "light")
        ctx.set_default_timeout(UI_TIMEOUT)
        ctx.set_default_navigation_timeout(NAV_TIMEOUT)
        contexts.append(ctx)
        page = console.watch(ctx.new_page())
        page.goto(web.url + path)
        return page

    yield open_
    for ctx in contexts:
        ctx.close()
