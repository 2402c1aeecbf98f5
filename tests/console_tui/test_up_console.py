"""`jobdeck up --console`: the node runs as a child process with its log in the data dir, the console
opens on it once it answers, and quitting the console stops the node. The console itself is
replaced by a stand-in (the real one needs a terminal; the pilot tests cover it): what is tested
is the real command with a real node process."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

import console_tui.app
from core.cli.main import main
from core.client import JobDeckClient
from tests.conftest import free_port

pytestmark = pytest.mark.timeout(30)


class RecordingPopen(subprocess.Popen[Any]):
    """subprocess.Popen that remembers what it started."""

    started: ClassVar[list[subprocess.Popen[Any]]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        RecordingPopen.started.append(self)


@pytest.mark.parametrize(
    ("console_exit", "code_wanted"), [(0, 0), (1, 1), (None, 130)], ids=["quit", "error", "ctrl-c"]
)
def test_up_console_starts_the_node_and_stops_it_when_the_console_quits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, console_exit: int | None, code_wanted: int
) -> None:
    port, data = free_port(), tmp_path / "data"
    seen: dict[str, Any] = {}

    async def run_a_job(server: str) -> str:
        async with JobDeckClient(server) as api:
            job = await api.submit({"task": {"kind": "shell", "argv": ["true"]}})
            return str((await api.wait_for(job["id"], timeout=10))["state"])

    def console(args: argparse.Namespace) -> int:
        seen["server"] = args.server
        seen["health"] = httpx.get(args.server + "/healthz", timeout=5).status_code
        seen["job"] = asyncio.run(run_a_job(args.server))
        if console_exit is None:
            raise KeyboardInterrupt  # ctrl+c that Textual did not take
        return console_exit

    RecordingPopen.started = []
    monkeypatch.setattr(subprocess, "Popen", RecordingPopen)
    monkeypatch.setattr(console_tui.app, "main", console)
    try:
        code = main(["up", "--console", "--data-dir", str(data), "--port", str(port), "--slots", "1"])
    finally:
        stopped = [p.returncode is not None for p in RecordingPopen.started]
        for p in RecordingPopen.started:  # a node the command left running must not outlive the test
            if p.poll() is None:
                p.kill()
                p.wait(10)
    assert code == code_wanted, f"the command should exit with {code_wanted}; got {code}"
    assert seen["server"] == f"http://127.0.0.1:{port}" and seen["health"] == 200, f"the console opened on {seen}"
    assert seen["job"] == "succeeded", f"the node runs jobs on its local agent (it is `up`): {seen['job']}"
    assert len(RecordingPopen.started) == 1, RecordingPopen.started
    node = RecordingPopen.started[0]
    assert "--console" not in str(node.args), f"the child is the node, not another console: {node.args!r}"
    assert stopped == [True], "the node still ran after the console quit"
    log = (data / "node.log").read_text()
    assert "JobDeck is up" in log, f"the node's log goes to DATA_DIR/node.log; it has:\n{log}"
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
