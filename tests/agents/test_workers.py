"""The worker pool of sync python tasks (agents/pool.py), with real worker processes, driven through
the python handler as the agent drives it."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agents.handlers import RunContext
from agents.handlers.python import run_python
from agents.pool import WorkerPool
from agents.tasknames import resolve
from tests.agents.test_handlers import alive
from tests.conftest import until

TASKS = "tests.agents.tasks_for_tests"


@pytest.fixture
async def pool() -> AsyncIterator[WorkerPool]:
    p = WorkerPool(4)
    try:
        yield p
    finally:
        await p.close()


def task(function: str, *args: Any, **fields: Any) -> dict[str, Any]:
    return {"kind": "python", "function": f"{TASKS}:{function}", "args": list(args), **fields}


def ctx(pool: WorkerPool | None, job_id: int = 42, attempt: int = 2, **kw: Any) -> RunContext:
    return RunContext(job_id, attempt, workers=pool, **kw)


async def test_a_sync_task_runs_in_a_worker_process_kept_for_the_next_call(pool: WorkerPool) -> None:
    first = await run_python(task("identity"), ctx(pool))
    second = await run_python(task("identity"), ctx(pool))
    assert first.ok and second.ok, (first, second)
    assert first.result["pid"] != os.getpid(), "a sync task must not run in the agent's process"
    assert second.result["pid"] == first.result["pid"], "the idle worker should take the next call"
    assert pool.started == 1


async def test_the_job_is_named_in_the_env_and_by_current_job_and_the_task_env_is_for_its_call_only(
    pool: WorkerPool,
) -> None:
    out = await run_python(task("identity", env={"GREETING": "bonjour"}), ctx(pool, 42, 2))
    assert out.ok, out
    expected = {"env": ["42", "2"], "current": [42, 2], "value": "bonjour", "job_env": "bonjour"}
    assert {k: out.result[k] for k in expected} == expected
    out = await run_python(task("identity"), ctx(pool, 43, 1))
    assert (out.result["env"], out.result["value"]) == (["43", "1"], None), "the last call's env must not stay"


async def test_an_async_task_runs_in_the_agents_event_loop_and_knows_its_job(pool: WorkerPool) -> None:
    out = await run_python(task("identity_async", env={"GREETING": "hi"}), ctx(pool, 7, 3))
    assert out.ok, out
    assert out.result == {"pid": os.getpid(), "current": [7, 3], "job_env": "hi"}
    assert pool.started == 0, "an async task needs no worker"


async def test_a_task_registered_with_at_task_resolves_by_any_name_to_its_function(pool: WorkerPool) -> None:
    out = await run_python(task("tagged_sync", 21), ctx(pool, 5))
    assert out.ok, out
    assert (out.result["double"], out.result["job"]) == (42, 5) and out.result["pid"] != os.getpid()
    # Another name for an async @task: the Task wrapper is unwrapped, so it is awaited, not called on a worker.
    assert resolve(f"{TASKS}:alias_of_tagged_async") is resolve(f"{TASKS}:tagged_async")
    out = await run_python(task("alias_of_tagged_async", 4), ctx(pool))
    assert (out.ok, out.result) == (True, {"double": 8, "pid": os.getpid()}), out


async def test_what_a_sync_task_prints_is_the_output_of_its_own_call(pool: WorkerPool) -> None:
    streamed: list[bytes] = []
    c = ctx(pool, stream=streamed.append)
    out = await run_python(task("talk", 3), c)
    assert (out.ok, out.result) == (True, "done"), out
    assert c.output == "line 0\nline 1\nline 2\non stderr\n"
    assert b"".join(streamed).decode() == c.output, "the output is streamed live as well as kept"
    quiet = ctx(pool)
    await run_python(task("add", 1, 2), quiet)
    assert quiet.output == "", "nothing of the previous call may reach the next one"


@pytest.mark.parametrize(("how", "said"), [("exit", "died (exit code 3)"), ("segv", "died (killed by signal SIGSEGV)")])
async def test_a_worker_that_crashes_is_a_failed_attempt_and_is_replaced(pool: WorkerPool, how: str, said: str) -> None:
    before = (await run_python(task("identity"), ctx(pool))).result["pid"]
    out = await run_python(task("crash", how), ctx(pool))
    assert not out.ok and out.retryable
    assert out.error is not None and said in out.error and "worker process" in out.error, out.error
    after = await run_python(task("identity"), ctx(pool))
    assert after.ok and after.result["pid"] != before, "a fresh worker must take the dead one's place"
    assert not alive(before)


async def test_a_worker_killed_while_idle_costs_no_attempt(pool: WorkerPool) -> None:
    pid = (await run_python(task("identity"), ctx(pool))).result["pid"]
    os.kill(pid, signal.SIGKILL)  # e.g. the OOM killer, between two calls
    await until(lambda: not Path(f"/proc/{pid}").exists(), 5, "the killed worker to be reaped")
    out = await run_python(task("identity"), ctx(pool))
    assert out.ok and out.result["pid"] != pid, out


async def test_cancel_sends_term_then_kill_after_the_grace_and_stops_what_the_task_started(pool: WorkerPool) -> None:
    grace = 0.8
    c = ctx(pool, kill_grace=grace)
    run = asyncio.create_task(run_python(task("stubborn", 30), c))
    await until(lambda: "ready" in c.output, what="the task to say it is ready")
    pid, child = (int(c.output.split(f"{k}=")[1].split()[0]) for k in ("pid", "child"))
    t0 = time.monotonic()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    took = time.monotonic() - t0
    assert grace * 0.9 <= took <= grace + 2.0, f"expected death by SIGKILL about {grace} s after cancel, got {took:.2f}"
    await until(lambda: not alive(pid) and not alive(child), 3, "the worker and its child to be gone")
    assert pid not in pool.pids()


async def test_a_timeout_stops_the_worker_and_the_next_call_gets_a_fresh_one(pool: WorkerPool) -> None:
    assert (await run_python(task("add", 1, 1), ctx(pool))).ok  # the worker is up: its start is not timed
    c = ctx(pool, kill_grace=0.5)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1.5):
            await run_python(task("stubborn", 30), c)
    pid = int(c.output.split("pid=")[1].split()[0])
    assert not alive(pid), f"worker {pid} still runs after the timeout"
    out = await run_python(task("add", 2, 3), ctx(pool))
    assert (out.ok, out.result) == (True, 5)


async def test_no_more_calls_run_at_once_than_the_pool_has_slots(tmp_path: Path) -> None:
    pool = WorkerPool(2)
    log = tmp_path / "spans"
    try:
        outs = await asyncio.gather(*(run_python(task("spans", str(log), 0.3), ctx(pool)) for _ in range(5)))
    finally:
        await pool.close()
    assert all(o.ok for o in outs), outs
    rows = [line.split() for line in log.read_text().splitlines()]
    edges = sorted([(float(s), 1) for _, s, _ in rows] + [(float(e), -1) for _, _, e in rows])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    assert most <= 2 and len({pid for pid, _, _ in rows}) <= 2, f"expected at most 2 at once in 2 workers: {rows}"


async def test_an_idle_worker_exits_and_the_pool_starts_another_when_needed() -> None:
    pool = WorkerPool(2, idle_seconds=0.2)
    try:
        pid = (await run_python(task("identity"), ctx(pool))).result["pid"]
        await until(lambda: not alive(pid) and not pool.pids(), 5, "the idle worker to exit")
        again = await run_python(task("identity"), ctx(pool))
        assert again.ok and again.result["pid"] != pid
    finally:
        await pool.close()


async def test_without_a_pool_a_sync_task_gets_a_worker_for_its_call_alone() -> None:
    out = await run_python(task("identity"), ctx(None))
    assert out.ok and out.result["pid"] != os.getpid(), out
    await until(lambda: not alive(out.result["pid"]), 5, "the one-call worker to exit")
