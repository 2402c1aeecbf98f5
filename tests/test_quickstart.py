"""The README's Quick start, run as written on an empty store, line by line and in order: each line
is the `jobdeck` command `./dev` runs (the node is on a free port, so JOBDECK_SERVER points there as
the README says for another port), and each has a check of what it should have done. A line added
to the Quick start without a check here fails the test, so the two cannot drift apart."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, ServerProcess, spawn_jobdeck

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
Run = subprocess.CompletedProcess[str]


def quick_start_blocks() -> list[list[str]]:
    """The command lines of the Quick start's code blocks (the CLI one, then the curl one)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Quick start") :]
    section = section[: section.index("\n## ", 5)]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    return [[line for line in b.splitlines() if line.strip()] for b in blocks]


class QuickStart:
    """A fresh `jobdeck up` and the means to run a README line against it."""

    def __init__(self, node: ServerProcess) -> None:
        self.node = node
        self.port = node.url.rsplit(":", 1)[1]
        self.env = {**os.environ, "JOBDECK_SERVER": node.url, "JOBDECK_PROG": "./dev"}

    def argv(self, line: str) -> list[str]:
        words = shlex.split(line.replace("8640", self.port), comments=True)
        if words[0] == "./dev":
            return [sys.executable, "-m", "core.cli", *words[1:]]
        assert words[0] == "curl", f"a Quick start line runs ./dev or curl: {line!r}"
        return words

    def run(self, line: str) -> Run:
        return subprocess.run(self.argv(line), cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=60)

    def follow(self, line: str, until: str, out: Path) -> Run:
        """Run a command that follows live (Ctrl-C stops it) until its output shows `until`."""
        with open(out, "w") as sink:
            proc = subprocess.Popen(self.argv(line), cwd=ROOT, env=self.env, stdout=sink, stderr=subprocess.PIPE,
                                    text=True)  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and until not in out.read_text() and proc.poll() is None:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out.read_text(), err)

    def job(self, job_id: int) -> dict[str, Any]:
        return dict(httpx.get(f"{self.node.url}/v1/jobs/{job_id}", timeout=5).json())

    def wait_state(self, job_id: int, *states: str) -> dict[str, Any]:
        deadline = time.monotonic() + 20
        while (job := self.job(job_id))["state"] not in states:
            assert time.monotonic() < deadline, f"job {job_id}: expected {states}, got {job['state']}: {job}"
            time.sleep(0.1)
        return job


def ok(out: Run, *texts: str) -> None:
    assert out.returncode == 0, f"exit {out.returncode}:\n{out.stdout}\n{out.stderr}"
    for text in texts:
        assert text in out.stdout, f"expected {text!r} in:\n{out.stdout}"


ZONE = re.compile(r"\d\d:\d\d:\d\d [A-Z][A-Za-z0-9+-]+")  # a time always carries its zone's abbreviation


def check_listing(q: QuickStart, out: Run) -> None:
    ok(out, "RUN_AT")
    row = next(line for line in out.stdout.splitlines() if line.startswith("6 "))
    assert "dead" in row and ZONE.search(row), row


def check_show(q: QuickStart, out: Run) -> None:
    data = json.loads(out.stdout)
    assert data["job"]["state"] == "dead" and "boom" in data["attempts"][-1]["output"], data


def check_schedule(q: QuickStart, out: Run) -> None:
    ok(out, "schedule 1 'nightly' (0 2 * * *, Europe/Paris): next fire")
    assert re.search(r"02:00:00 CES?T", out.stdout), out.stdout


def check_preview(q: QuickStart, out: Run) -> None:
    ok(out, "fire times (Europe/Paris")
    times = [line for line in out.stdout.splitlines() if line.startswith("  ")]
    assert len(times) == 10 and all(re.search(r"02:00:00 CES?T", t) for t in times), out.stdout


def check_held(q: QuickStart, out: Run) -> None:
    ok(out, "job 7 'held'", "waiting: queue 'default' is paused")
    q.wait_state(7, "queued")


UNDO = "`./dev queues concurrency default none` removes the limit"
# What each line of the CLI block must do, in the README's order: (the line's start, its check).
CLI: list[tuple[str, Callable[[QuickStart, str], None]]] = [
    ("./dev submit -- echo hello world", lambda q, line: (ok(q.run(line), "job 1 "), q.wait_state(1, "succeeded"))),
    ("./dev submit --sh 'date; uname -a' --wait", lambda q, line: ok(q.run(line), "job 2 ", "succeeded", "Linux")),
    ("./dev submit --delay 30", lambda q, line: ok(q.run(line), "job 3 ", "scheduled")),
    ("./dev submit --http", lambda q, line: (ok(q.run(line), "job 4 "), q.wait_state(4, "succeeded"))),
    ("./dev submit --python", lambda q, line: (ok(q.run(line), "job 5 "), q.wait_state(5, "succeeded"))),
    ("./dev submit --sh 'echo boom", lambda q, line: (ok(q.run(line), "job 6 "), q.wait_state(6, "dead"))),
    ("./dev jobs ls --state failed,dead", lambda q, line: check_listing(q, q.run(line))),
    ("./dev --json jobs show 6", lambda q, line: check_show(q, q.run(line))),
    ("./dev jobs retry 6", lambda q, line: (ok(q.run(line), "job 6 "), q.wait_state(6, "dead"))),
    ("./dev jobs cancel 3", lambda q, line: (ok(q.run(line)), q.wait_state(3, "cancelled"))),
    ("./dev queues pause default", lambda q, line: ok(q.run(line), "queue default: paused")),
    ("./dev submit --name held", lambda q, line: check_held(q, q.run(line))),
    (
        "./dev queues resume default",
        lambda q, line: (ok(q.run(line), "queue default: running"), q.wait_state(7, "succeeded")),
    ),
    ("./dev queues concurrency default 4", lambda q, line: ok(q.run(line), "at most 4 of its jobs run at once", UNDO)),
    ("./dev schedules create --name nightly", lambda q, line: check_schedule(q, q.run(line))),
    ("./dev schedules preview 1", lambda q, line: check_preview(q, q.run(line))),
    ("./dev jobs tail 2", lambda q, line: ok(q.run(line), "Linux")),
    ("./dev events --since 0", lambda q, line: ok_followed(q.follow(line, "job.succeeded", q.node.data_dir / "ev"))),
]


def ok_followed(out: Run) -> None:
    assert out.returncode in (0, 130), f"exit {out.returncode}:\n{out.stderr}"
    assert "job.created" in out.stdout and "job.succeeded" in out.stdout, out.stdout
    assert "Traceback" not in out.stderr, out.stderr


def check_curl(q: QuickStart, line: str, out: Run) -> None:
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert "error" not in body, f"{line}\n-> {body}"


def test_the_quick_start_runs_top_to_bottom_on_an_empty_store(tmp_path: Path) -> None:
    cli, curl = quick_start_blocks()
    commands = [shlex.split(line, comments=True) for line in cli]
    assert len(commands) == len(CLI), f"the Quick start has {len(cli)} lines and the test checks {len(CLI)}"
    node = spawn_jobdeck(tmp_path / "data", "up", "--no-web", "--slots", "4")
    try:
        q = QuickStart(node)
        for line, (start, check) in zip(cli, CLI, strict=True):
            assert line.startswith(start), f"README line {line!r}: the test expects one starting {start!r} here"
            check(q, line)
        for line in curl:
            check_curl(q, line, q.run(line))
        assert q.wait_state(6, "dead")["attempt"] == 3, "job 6 ran once, then once per replay (CLI, curl)"
    finally:
        node.proc.terminate()
        node.proc.wait(15)
