"""`jobdeck up` as a real process: a thousand jobs over HTTP, and a SIGKILL in the middle of work."""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from core.client import JobDeckClient
from tests.conftest import ServerProcess, free_port, recorder_task, run_spans, spawn_jobdeck


async def _wait_counts(client: JobDeckClient, want: dict[str, int], timeout: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while True:
        by_state = (await client.stats())["by_state"]
        if all(by_state.get(k, 0) == v for k, v in want.items()):
            return by_state  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            raise AssertionError(f"expected counts {want}, still {by_state} after {timeout} s")
        await asyncio.sleep(0.05)


async def _wait_for(client: JobDeckClient, ok: Any, what: str, timeout: float = 30) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    seen: list[dict[str, int]] = []
    while True:
        by_state = (await client.stats())["by_state"]
        if ok(by_state):
            return by_state  # type: ignore[no-any-return]
        if not seen or seen[-1] != by_state:
            seen.append(by_state)
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw {what} in {timeout} s; saw {seen[-10:]}")
        await asyncio.sleep(0.02)


async def test_thousand_jobs_over_http_all_succeed(jobdeck_process: ServerProcess) -> None:
    async with JobDeckClient(jobdeck_process.url) as c:
        sem = asyncio.Semaphore(16)

        async def one(i: int) -> int:
            async with sem:
                job = await c.submit({"task": {"kind": "python", "function": "agents.builtin:echo", "args": [i]}})
                return int(job["id"])

        ids = await asyncio.gather(*(one(i) for i in range(1000)))
        assert len(set(ids)) == 1000
        await _wait_counts(c, {"succeeded": 1000}, timeout=60)
        sample = await c.get_job(ids[500])
        assert sample["result"] == {"args": [500], "kwargs": {}}


async def test_sigkill_with_work_in_flight_loses_nothing_and_never_overlaps(tmp_path: Path) -> None:
    env = {"JOBDECK_LEASE_SECONDS": "2", "JOBDECK_HEARTBEAT_SECONDS": "0.5", "JOBDECK_REAP_INTERVAL_SECONDS": "0.2"}
    data, port = tmp_path / "data", free_port()
    server = spawn_jobdeck(data, "up", "--slots", "20", port=port, env=env)
    task = recorder_task(tmp_path, 0.5)
    try:
        async with JobDeckClient(server.url) as c:
            await c.submit_batch([{"task": task, "name": f"rec-{i}"} for i in range(220)])
            # Every slot busy and work still queued. Not the exact first snapshot (20 running, 200
            # queued): that lasts only until the first 0.5 s run ends, and at a load of 12 the
            # polls (or the 20 process spawns) missed that window and saw all 220 succeed.
            await _wait_for(
                c, lambda s: s.get("running", 0) >= 20 and s.get("queued", 0) > 0, "20 running, some queued"
            )
        server.kill()  # SIGKILL: no chance to clean up
        killed_at = time.time()
        server = spawn_jobdeck(data, "up", "--slots", "20", port=port, env=env)
        async with JobDeckClient(server.url) as c:
            counts = await _wait_counts(c, {"succeeded": 220}, timeout=90)
            assert sum(counts.values()) == 220, f"no job may be lost or duplicated: {counts}"
            lost = [a for j in range(1, 221) for a in await c.attempts(j) if a["outcome"] == "lost"]
            assert len(lost) >= 1, "jobs running at the kill must show a lost attempt"
    finally:
        server.proc.terminate()
        server.proc.wait(15)
    spans = run_spans(tmp_path, killed_at)
    assert len(spans) == 220
    for job, intervals in spans.items():
        intervals.sort()
        for (_, e1), (s2, _) in itertools.pairwise(intervals):
            assert s2 >= e1, f"job {job} ran twice at once: {intervals}"


def test_two_nodes_cannot_share_one_data_dir(jobdeck_process: ServerProcess) -> None:
    import subprocess

    port = free_port()
    out = subprocess.run(
        [sys.executable, "-m", "core.cli", "up", "--data-dir", str(jobdeck_process.data_dir), "--port", str(port)],
        capture_output=True, text=True, timeout=30, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert out.returncode != 0
    assert "another JobDeck node is using" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert httpx.get(jobdeck_process.url + "/healthz").status_code == 200


async def test_sigterm_lets_short_jobs_finish_and_stops_long_ones(tmp_path: Path) -> None:
    import signal

    data, port = tmp_path / "data", free_port()
    env = {"JOBDECK_SHUTDOWN_GRACE_SECONDS": "1.5"}
    server = spawn_jobdeck(data, "up", port=port, env=env)
    async with JobDeckClient(server.url) as c:
        short = await c.submit({"task": {"kind": "shell", "command": "sleep 0.5"}})
        long = await c.submit({"task": {"kind": "shell", "command": "sleep 60"}, "max_attempts": 2})
        await _wait_counts(c, {"running": 2}, timeout=10)
    t0 = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(20) == 0, server.output()
    assert time.monotonic() - t0 < 10, "shutdown must not wait for a 60 s job"
    assert "Traceback" not in server.output(), server.output()
    server = spawn_jobdeck(data, "up", port=port, env=env)
    try:
        async with JobDeckClient(server.url) as c:
            assert (await c.get_job(short["id"]))["state"] == "succeeded"
            stopped = await c.get_job(long["id"])
            assert stopped["state"] in ("queued", "running"), "an interrupted job runs again at once"
            assert stopped["max_attempts"] == 3, "the interruption must not use up one of its 2 attempts"
            first = (await c.attempts(long["id"]))[0]
            assert first["outcome"] == "interrupted" and "shut down" in first["error"], first
            await c.job_action(long["id"], "cancel")
    finally:
        server.proc.terminate()
        server.proc.wait(15)
