"""A job never runs twice at once, whatever its handler: under a timeout and under a cancel, the next
attempt starts only after the previous one really stopped, and a stopped run never goes on.

Each task notes, from inside itself, its start, a tick every 50 ms and its end (tasks_for_tests
record_ticks). An http task's run is its request as the receiving server sees it: the server here
notes the request's start, a tick every 50 ms while the agent keeps the connection open, and its
end if it answered. A real `jobdeck server` and a real `jobdeck agent` process run all eight cases
at once.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from core.client import JobDeckClient
from tests.agents.conftest import TASKS, RemoteAgent
from tests.agents.tasks_for_tests import TICK_SECONDS, _note
from tests.agents.test_handlers import alive
from tests.conftest import ROOT, until

RUN_SECONDS = 4.0  # how long each run would take if nobody stopped it
# The timeout bounds the whole attempt, a worker's start included: at a load of 8 a fresh Python
# worker (the first one was killed with its timed-out run) took over 1 s, and attempt 2 timed out
# before its task could note its start (CI). 2 s leaves it room and still stops every run early.
TIMEOUT = 2.0


@dataclass
class Run:
    """One run as the task itself saw it."""

    run: str
    pid: int
    start: float
    last: float  # the last note it wrote: it was still running then
    ended: bool = False
    notes: list[str] = field(default_factory=list)


def runs_of(log: Path, case: str) -> list[Run]:
    """Every run of `case` noted in `log`, in the order they started."""
    runs: dict[str, Run] = {}
    text = log.read_text() if log.exists() else ""
    for line in text.splitlines():
        what, c, run, pid, t = line.split()
        if c != case:
            continue
        r = runs.setdefault(run, Run(run, int(pid), float(t), float(t)))
        r.last = max(r.last, float(t))
        r.ended = r.ended or what == "end"
    return sorted(runs.values(), key=lambda r: r.start)


async def slow_endpoint(log: Path) -> asyncio.Server:
    """An HTTP server whose every request takes RUN_SECONDS to answer, noted in `log` as a run of
    the case its path names; a request whose client hangs up ends there, without an `end`."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        case, run = head.split(b" ")[1].decode().strip("/"), f"http.{time.monotonic_ns()}"
        _note(str(log), "start", case, run)
        deadline = time.monotonic() + RUN_SECONDS
        try:
            while time.monotonic() < deadline:
                try:
                    if await asyncio.wait_for(reader.read(1), TICK_SECONDS) == b"":
                        return  # the agent hung up: the run stopped here
                except TimeoutError:
                    _note(str(log), "tick", case, run)
            _note(str(log), "end", case, run)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            await writer.drain()
        finally:
            writer.close()

    return await asyncio.start_server(answer, "127.0.0.1", 0)


def task_of(kind: str, log: Path, case: str, endpoint: str = "") -> dict[str, Any]:
    if kind == "http":
        return {"kind": "http", "url": f"{endpoint}/{case}", "method": "GET"}
    args = [str(log), case, RUN_SECONDS]
    if kind == "sync":
        return {"kind": "python", "function": f"{TASKS}:record_ticks", "args": args}
    if kind == "async":
        return {"kind": "python", "function": f"{TASKS}:record_ticks_async", "args": args}
    code = f"import sys; from {TASKS} import record_ticks; record_ticks(sys.argv[1], sys.argv[2], float(sys.argv[3]))"
    return {"kind": "shell", "argv": [sys.executable, "-c", code, *map(str, args)], "cwd": str(ROOT)}


async def _timeout_case(c: JobDeckClient, kind: str, log: Path, endpoint: str) -> list[str]:
    """Two attempts, each stopped by its timeout; the job ends dead."""
    case = f"{kind}-timeout"
    spec = {
        "task": task_of(kind, log, case, endpoint),
        "timeout": TIMEOUT,
        "max_attempts": 2,
        "backoff": {"base": 0.1, "cap": 0.1},
    }
    job = await c.submit(spec)
    done = await c.wait_for(job["id"], timeout=30)
    outcomes = [a["outcome"] for a in await c.attempts(job["id"])]
    if (done["state"], outcomes) != ("dead", ["timeout", "timeout"]):
        return [f"{case}: expected dead after two timeouts, got {done['state']} with attempts {outcomes}"]
    return []


def _has_runs(log: Path, case: str, n: int) -> bool:
    return len(runs_of(log, case)) >= n


async def _cancel_case(c: JobDeckClient, kind: str, log: Path, endpoint: str) -> list[str]:
    """Cancel the run, retry the job at once, cancel the second run too."""
    case = f"{kind}-cancel"
    job = await c.submit({"task": task_of(kind, log, case, endpoint), "max_attempts": 1})
    for n in (1, 2):
        await until(partial(_has_runs, log, case, n), 20, f"{case}: run {n} to start")
        await c.job_action(job["id"], "cancel")
        done = await c.wait_for(job["id"], timeout=20)
        if done["state"] != "cancelled":
            return [f"{case}: expected cancelled after cancelling run {n}, got {done['state']}"]
        if n == 1:
            await c.job_action(job["id"], "retry")  # the retry may start the moment the core allows it
    return []


async def test_no_two_attempts_of_a_job_overlap_and_a_stopped_run_never_goes_on(
    remote_agent: RemoteAgent, tmp_path: Path
) -> None:
    client, log = remote_agent.client, tmp_path / "ticks.log"
    kinds = ("sync", "async", "shell", "http")
    server = await slow_endpoint(log)
    endpoint = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    results = await asyncio.gather(
        *(_timeout_case(client, k, log, endpoint) for k in kinds),
        *(_cancel_case(client, k, log, endpoint) for k in kinds),
    )
    problems = [p for r in results for p in r]
    cases = [f"{k}-{how}" for how in ("timeout", "cancel") for k in kinds]
    # Wait past the natural end of every run: a run that was not really stopped would note more.
    latest = max(r.start for case in cases for r in runs_of(log, case))
    await until(lambda: time.time() > latest + RUN_SECONDS + 0.5, RUN_SECONDS + 5, "the runs' natural end")
    for case in cases:
        runs = runs_of(log, case)
        if len(runs) != 2:
            problems.append(f"{case}: expected 2 runs, got {len(runs)}: {runs}")
            continue
        first, second = runs
        if second.start <= first.last:
            problems.append(
                f"{case}: run 2 started at {second.start:.3f} while run 1 still ran (it noted {first.last:.3f}): "
                f"overlap of {first.last - second.start:.2f} s"
            )
        for n, r in enumerate(runs, 1):
            if r.ended:
                problems.append(f"{case}: run {n} was stopped but ran on to its end")
            if case.startswith(("sync", "shell")) and alive(r.pid):
                problems.append(f"{case}: run {n}'s process {r.pid} still runs")
    server.close()
    assert not problems, "expected no overlap and no run going on after its stop, got:\n" + "\n".join(problems)


async def test_a_sync_task_dies_with_its_agent(remote_agent: RemoteAgent, tmp_path: Path) -> None:
    log = tmp_path / "ticks.log"
    await remote_agent.client.submit({"task": task_of("sync", log, "orphan")})
    await until(lambda: runs_of(log, "orphan"), 20, "the task to start")
    remote_agent.proc.kill()  # SIGKILL: the agent cannot clean up
    remote_agent.proc.wait(10)
    killed = time.time()
    pid = runs_of(log, "orphan")[0].pid
    await until(lambda: not alive(pid), 5, f"the worker process {pid} to die with its agent")
    assert runs_of(log, "orphan")[0].last < killed + 0.5, "the task went on after its agent died"
