"""Fixtures for the console's pilot tests: a real `jobdeck up` process and the console on it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from textual.pilot import Pilot

from console_tui.app import ConsoleApp
from console_tui.permissions import Identity
from core.client import JobDeckClient
from tests.conftest import ServerProcess, spawn_jobdeck, until

SIZE = (150, 42)


def stop(sp: ServerProcess) -> None:
    if sp.proc.poll() is None:
        sp.stop()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One `jobdeck up` (local agent, 4 slots) for a test module; each test uses its own queues."""
    sp = spawn_jobdeck(tmp_path_factory.mktemp("console") / "data", "up", "--slots", "4")
    try:
        yield sp
    finally:
        stop(sp)


@pytest.fixture
async def api(node: ServerProcess) -> AsyncIterator[JobDeckClient]:
    async with JobDeckClient(node.url) as client:
        yield client


@contextlib.asynccontextmanager
async def console(url: str, *, identity: Identity | None = None, masked: bool = False,
                  size: tuple[int, int] = SIZE) -> AsyncIterator[tuple[ConsoleApp, Pilot[Any]]]:  # fmt: skip
    """The console on `url`, started and showing its first page."""
    app = ConsoleApp(url, identity=identity, masked=masked)
    async with app.run_test(size=size) as pilot:
        await asyncio.wait_for(app.ready.wait(), 10)
        jobs = app.main_screen.query_one("#jobs")  # type: ignore[union-attr]
        await until(lambda: jobs.loaded, 10, "the jobs view to load")  # type: ignore[attr-defined]
        await until(lambda: app.connection.state == "live", 10, "the feed to be live")
        yield app, pilot


def shell(command: str, **spec: Any) -> dict[str, Any]:
    return {"task": {"kind": "shell", "command": command}, **spec}


def later(name: str, queue: str, **spec: Any) -> dict[str, Any]:
    """A job that waits an hour (scheduled): it stays put while the test acts on it."""
    return {"task": {"kind": "shell", "command": "true"}, "name": name, "queue": queue, "delay": 3600, **spec}
