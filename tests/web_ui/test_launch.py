"""`jobdeck up` starts the dashboard beside the node (and stops it with the node); `--no-web` does not."""

from __future__ import annotations

import signal
import socket
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import free_port, spawn_jobdeck

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_jobdeck_up_serves_the_dashboard_and_stops_it(tmp_path: Path) -> None:
    web_port = free_port()
    node = spawn_jobdeck(tmp_path / "data", "up", "--web-port", str(web_port),
                         env={"JOBDECK_WEB": "1", "JOBDECK_WEB_WORKDIR": str(tmp_path / "frontend")})  # fmt: skip
    try:
        _wait_for(lambda: "web dashboard is up" in node.output() or node.proc.poll() is not None, 150,
                  "the dashboard's ready line")  # fmt: skip
        assert f"web dashboard is up: http://127.0.0.1:{web_port}" in node.output(), node.output()[-3000:]
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/jobs/", timeout=5) as resp:
            assert resp.status == 200
    finally:
        node.proc.send_signal(signal.SIGINT)
        node.proc.wait(30)
    _wait_for(lambda: not _listening(web_port), 20, "the dashboard to stop with the node")


def test_up_from_a_script_says_how_to_start_the_dashboard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBDECK_WEB", raising=False)  # stdout is a file: the dashboard is off unless asked
    node = spawn_jobdeck(tmp_path / "data", "up", env={"JOBDECK_PROG": "jobdeck"})
    try:
        _wait_for(lambda: "API docs" in node.output(), 20, "the node's ready lines")
        time.sleep(0.5)
        assert "web dashboard: not started (not run in a terminal; `jobdeck up --web` or JOBDECK_WEB=1" in (
            node.output()
        ), node.output()[-2000:]
    finally:
        node.proc.terminate()
        node.proc.wait(15)


def test_no_web_starts_no_dashboard(tmp_path: Path) -> None:
    node = spawn_jobdeck(tmp_path / "data", "up", "--no-web", env={"JOBDECK_WEB": "1"})
    try:
        assert "web dashboard" not in node.output()
    finally:
        node.proc.terminate()
        node.proc.wait(15)
