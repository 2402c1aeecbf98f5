"""A real `jobdeck server` and a real `jobdeck agent` process that imports the test tasks."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.client import JobDeckClient
from tests.conftest import spawn_agent, spawn_jobdeck, until

TASKS = "tests.agents.tasks_for_tests"
KILL_GRACE = 1.0
LEASE_ENV = {"JOBDECK_LEASE_SECONDS": "3", "JOBDECK_HEARTBEAT_SECONDS": "0.5", "JOBDECK_REAP_INTERVAL_SECONDS": "0.2"}


@dataclass
class RemoteAgent:
    """The agent process and a client of its server."""

    client: JobDeckClient
    proc: subprocess.Popen[str]
    log: Path


@pytest.fixture
async def remote_agent(tmp_path: Path) -> AsyncIterator[RemoteAgent]:
    """`jobdeck agent --import tests.agents.tasks_for_tests --secrets-dir tmp/secrets` on `jobdeck server`."""
    server = spawn_jobdeck(tmp_path / "data", "server", env=LEASE_ENV)
    (tmp_path / "secrets").mkdir()
    agent = spawn_agent(server.url, "remote", tmp_path, "--slots", "8", "--heartbeat", "0.5",
                        "--kill-grace", str(KILL_GRACE), "--import", TASKS,
                        "--secrets-dir", str(tmp_path / "secrets"))  # fmt: skip
    try:
        async with JobDeckClient(server.url) as c:

            async def present() -> bool:
                return any(a["name"] == "remote" for a in await c.agents())

            await until(present, 20, "the agent to register")
            yield RemoteAgent(c, agent, tmp_path / "agent-remote.log")
    finally:
        for proc in (agent, server.proc):
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
