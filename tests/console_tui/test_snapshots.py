"""SVG snapshots of the main screens. The console runs `masked` (times, ages, rates, the server
URL and seq are placeholders) on a fresh server with fixed data and no agents, so ids and
states are the same on every run: a snapshot changes only when the screen does.

After a deliberate change: JOBDECK_UPDATE_SNAPSHOTS=1 pytest tests/console_tui/test_snapshots.py"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.client import JobDeckClient
from tests.conftest import ServerProcess, spawn_jobdeck, until
from tests.console_tui.conftest import console, later, stop

pytestmark = pytest.mark.timeout(60)
SNAPSHOTS = Path(__file__).parent / "snapshots"
SIZE = (130, 30)


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    sp = spawn_jobdeck(tmp_path_factory.mktemp("snap") / "data", "server")  # no agent: nothing moves by itself
    try:
        yield sp
    finally:
        stop(sp)


async def seed(api: JobDeckClient) -> None:
    if (await api.list_jobs(limit=1))["jobs"]:
        return
    names = ["nightly-backup", "send-receipts", "resize-images", "rebuild-search-index", "invoice-run", "cleanup-tmp"]
    for i, name in enumerate(names):
        await api.submit(later(name, ("emails", "reports", "media")[i % 3], priority=i * 5 - 10, max_attempts=3))
    await api.job_action(2, "pause")
    await api.job_action(5, "cancel")
    await api.queue_action("media", "pause")
    await api.set_concurrency("reports", 4)
    await api.create_schedule({"name": "nightly-backup", "cron": "0 2 * * *", "timezone": "Europe/Paris",
                               "job": {"task": {"kind": "shell", "command": "./backup.sh"}, "queue": "reports"}})  # fmt: skip
    await api.create_schedule({"name": "heartbeat", "interval": 300,
                               "job": {"task": {"kind": "shell", "command": "true"}}})  # fmt: skip


def check(app: Any, name: str) -> None:
    svg = app.export_screenshot(title=f"console-{name}")
    path = SNAPSHOTS / f"{name}.svg"
    if os.environ.get("JOBDECK_UPDATE_SNAPSHOTS") or not path.exists():
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(svg)
        return
    if svg != path.read_text():
        actual = path.with_suffix(".actual.svg")
        actual.write_text(svg)
        pytest.fail(f"the {name} screen changed: compare {path} with {actual} (open both in a browser); "
                    "if the change is meant, rerun with JOBDECK_UPDATE_SNAPSHOTS=1")  # fmt: skip


async def _relayed(api: JobDeckClient) -> bool:
    lag = ((await api.stats()).get("relays") or {}).get("notify") or {}
    return lag.get("holder") is not None and lag.get("behind_events") == 0


@pytest.mark.parametrize("screen", ["jobs", "queues", "schedules", "help"])
async def test_snapshot(fixed: ServerProcess, screen: str) -> None:
    async with JobDeckClient(fixed.url) as api:
        await seed(api)
        # the Queues bar says how far the notifications' relay is: let it catch up first (a loaded machine)
        await until(lambda: _relayed(api), 30, "the notify relay to catch up")
    async with console(fixed.url, masked=True, size=SIZE) as (app, pilot):
        if screen == "queues":
            await pilot.press("2")
            await until(lambda: len(app.main_screen.query_one("#queues").items) == 3, 5)
        elif screen == "schedules":
            await pilot.press("4")
            await until(lambda: len(app.main_screen.query_one("#schedules").items) == 2, 5)
            preview = app.main_screen.query_one("#schedules #preview")
            await until(lambda: "next 5 fire times" in str(preview.render()), 15, "the cursor schedule's preview")
        elif screen == "help":
            await pilot.press("question_mark")
        await pilot.pause()
        check(app, screen)
