"""A finished run is recorded, not repeated: results are acknowledged by the core once committed,
held by the agent (in memory and in its state folder) until then, and sent again to any node.
Real `jobdeck server` and `jobdeck agent` processes on a real PostgreSQL; the network that loses
the result is a real TCP proxy."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path

import pytest

from core.client import JobDeckClient
from tests.conftest import (
    ROOT,
    ServerProcess,
    recorded_runs,
    recorder_task,
    spawn_agent,
    spawn_jobdeck,
    stop_process,
    until,
)
from tests.netproxy import TcpProxy
from tests.services import REDIS_URL, redis_problem

# Leases long enough that only an acknowledged, resent result can finish the job in one attempt;
# without it the lost result shows as a second attempt after the lease ran out.
LEASES = {"JOBDECK_LEASE_SECONDS": "8", "JOBDECK_HEARTBEAT_SECONDS": "1", "JOBDECK_REAP_INTERVAL_SECONDS": "0.2"}

# Notes its start, waits, notes its end and prints 30 kB as it exits: the output message and the
# result (which carries the output again) are the only frames that size (the agent's WebSocket
# is not compressed), so 60 kB swallowed after the end means the result left the agent.
TASK = """
import os, sys, time
runs, job, attempt = sys.argv[1], os.environ["JOBDECK_JOB_ID"], os.environ["JOBDECK_ATTEMPT"]
with open(runs, "a") as f:
    f.write(f"start {job} {attempt}\\n")
time.sleep(float(sys.argv[2]))
with open(runs, "a") as f:
    f.write(f"end {job} {attempt}\\n")
print(os.urandom(15000).hex(), flush=True)
"""


@pytest.fixture
def nodes(pg_url: str, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """Two `jobdeck server` nodes on one PostgreSQL database."""
    env = {"JOBDECK_DATABASE_URL": pg_url, **LEASES}
    started = [spawn_jobdeck(tmp_path / f"node{i}", "server", env=env) for i in (1, 2)]
    try:
        yield started
    finally:
        for n in started:
            if n.proc.poll() is None:
                n.kill()


@pytest.fixture
async def proxy_to_a(nodes: list[ServerProcess]) -> AsyncIterator[TcpProxy]:
    proxy = await TcpProxy.start(int(nodes[0].url.rsplit(":", 1)[1]))
    try:
        yield proxy
    finally:
        await proxy.close()


def runs_of(path: Path) -> list[tuple[str, int, int]]:
    if not path.exists():
        return []
    return [(w, int(j), int(a)) for w, j, a in (line.split() for line in path.read_text().splitlines())]


async def test_a_result_lost_with_its_node_is_sent_again_and_the_run_is_not_repeated(
    nodes: list[ServerProcess], proxy_to_a: TcpProxy, tmp_path: Path
) -> None:
    a, b = nodes
    script, runs = tmp_path / "task.py", tmp_path / "runs.log"
    script.write_text(TASK)
    agent = spawn_agent(f"{proxy_to_a.url},{b.url}", "steady", tmp_path, "--heartbeat", "1")
    try:
        async with JobDeckClient(b.url) as c, JobDeckClient(a.url) as ca:
            await until(lambda: _registered(ca, "steady"), 30, "the agent to register through the proxy")
            job = await c.submit({"task": {"kind": "shell", "argv": [sys.executable, str(script), str(runs), "1"]}})
            await until(lambda: any(w == "start" for w, _, _ in runs_of(runs)), 30, "the job to start")
            proxy_to_a.swallow = True  # from here node A never hears the agent: not its result either
            await until(lambda: any(w == "end" for w, _, _ in runs_of(runs)), 30, "the command to exit")
            await until(lambda: proxy_to_a.swallowed > 55_000, 30, "the result frame to leave the agent")
            running = await c.get_job(job["id"])
            assert running["state"] == "running", f"the test must kill node A before the result is stored: {running}"
            a.kill()  # SIGKILL: the result it was sent is gone with it
            done = await until(lambda: _finished(c, job["id"]), 30, "the job to finish on node B")
            attempts = await c.attempts(job["id"])
        assert done["state"] == "succeeded", done
        assert len(attempts) == 1, f"the run finished once and must be recorded once, not rerun: {attempts}"
        assert [w for w, _, _ in runs_of(runs)] == ["start", "end"], runs_of(runs)
        assert not list((tmp_path / "agent-steady-state" / "results").glob("*.json")), "acknowledged: forgotten"
    finally:
        _stop(agent)


async def test_results_an_agent_held_when_it_was_killed_are_sent_by_its_restart(
    nodes: list[ServerProcess], proxy_to_a: TcpProxy, tmp_path: Path
) -> None:
    """The agent dies too (SIGKILL) before any node heard its result: the restarted agent, with the
    same state folder, sends the kept result, and the run is recorded once."""
    a, b = nodes
    script, runs = tmp_path / "task.py", tmp_path / "runs.log"
    script.write_text(TASK)
    agent = spawn_agent(proxy_to_a.url, "phoenix", tmp_path, "--heartbeat", "1")
    try:
        async with JobDeckClient(b.url) as c, JobDeckClient(a.url) as ca:
            await until(lambda: _registered(ca, "phoenix"), 30, "the agent to register through the proxy")
            job = await c.submit({"task": {"kind": "shell", "argv": [sys.executable, str(script), str(runs), "1"]}})
            await until(lambda: any(w == "start" for w, _, _ in runs_of(runs)), 30, "the job to start")
            proxy_to_a.swallow = True
            await until(lambda: any(w == "end" for w, _, _ in runs_of(runs)), 30, "the command to exit")
            kept = tmp_path / "agent-phoenix-state" / "results"
            await until(lambda: list(kept.glob("*.json")), 30, "the result to be kept on disk")
            agent.kill()
            agent.wait(10)
            assert (await c.get_job(job["id"]))["state"] == "running"
            agent = spawn_agent(b.url, "phoenix", tmp_path, "--heartbeat", "1")
            done = await until(lambda: _finished(c, job["id"]), 30, "the restarted agent's result to be recorded")
            attempts = await c.attempts(job["id"])
        assert done["state"] == "succeeded", done
        assert len(attempts) == 1, attempts
        assert [w for w, _, _ in runs_of(runs)] == ["start", "end"], runs_of(runs)
        await until(lambda: not list(kept.glob("*.json")), 10, "the acknowledged result to be forgotten")
    finally:
        _stop(agent)


async def test_a_second_process_cannot_use_a_running_agents_state_folder(
    nodes: list[ServerProcess], tmp_path: Path
) -> None:
    first = spawn_agent(nodes[1].url, "only", tmp_path)
    try:
        async with JobDeckClient(nodes[1].url) as c:
            await until(lambda: _registered(c, "only"), 30, "the first agent to register")
        second = spawn_agent(nodes[1].url, "only", tmp_path)
        assert second.wait(30) == 1
        log = (tmp_path / "agent-only.log").read_text()
        assert f"another agent process (pid {first.pid}) uses the state folder" in log, log
    finally:
        _stop(first)


async def _registered(c: JobDeckClient, name: str) -> bool:
    return any(ag["name"] == name for ag in await c.agents())


async def _finished(c: JobDeckClient, job_id: int) -> dict[str, object] | None:
    job = await c.get_job(job_id)
    return job if job["state"] in ("succeeded", "dead", "cancelled") else None


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


async def test_an_agent_killed_and_restarted_releases_its_lost_runs_at_once(tmp_path: Path) -> None:
    """kill -9 an agent with 10 jobs in flight and start it again: the runs it no longer has are
    lost and retried within a second of its reconnect, not when their 30 s leases run out."""
    server = spawn_jobdeck(tmp_path / "data", "server", env={"JOBDECK_LEASE_SECONDS": "30"})
    agent = spawn_agent(server.url, "comeback", tmp_path, "--slots", "10")
    try:
        async with JobDeckClient(server.url) as c:
            await until(lambda: _registered(c, "comeback"), 30, "the agent to register")
            spec = {"task": recorder_task(tmp_path, 20), "backoff": {"base": 0.1, "cap": 0.1}}
            ids = (await c.submit_batch([spec] * 10))["ids"]
            await until(lambda: len(recorded_runs(tmp_path)) == 10, 30, "10 runs to start")
            agent.kill()
            agent.wait(10)
            agent = spawn_agent(server.url, "comeback", tmp_path, "--slots", "10")
            back = await until(lambda: _agent(c, "comeback"), 30, "the restarted agent to register")

            async def retried() -> list[list[dict[str, object]]] | None:
                runs = [await c.attempts(i) for i in ids]
                return runs if all(len(r) == 2 for r in runs) else None

            runs = await until(retried, 20, "every job's second attempt (a lease lasts 30 s)")
        delays = [(_ts(f["finished_at"]) - _ts(back["connected_at"]), _ts(s["claimed_at"]) - _ts(back["connected_at"]))
                  for f, s in runs]  # fmt: skip
        print(f"after the reconnect: lost within {max(d[0] for d in delays):.3f} s, "
              f"running again within {max(d[1] for d in delays):.3f} s")  # fmt: skip
        for first, second in runs:
            assert first["outcome"] == "lost" and "came back without this run" in str(first["error"]), first
            lost_after = _ts(first["finished_at"]) - _ts(back["connected_at"])
            claimed_after = _ts(second["claimed_at"]) - _ts(back["connected_at"])
            assert lost_after < 1.0 and claimed_after < 1.0, f"retried within a second of the reconnect: {delays}"
    finally:
        _stop(agent)
        server.kill()


async def _agent(c: JobDeckClient, name: str) -> dict[str, object] | None:
    return next((ag for ag in await c.agents() if ag["name"] == name), None)


def _ts(value: object) -> float:
    """A time of the API (ISO text, or Unix seconds) as Unix seconds."""
    return datetime.fromisoformat(value).timestamp() if isinstance(value, str) else float(str(value))


async def test_a_name_connected_to_one_node_cannot_be_taken_on_another(pg_url: str, tmp_path: Path) -> None:
    """Two nodes sharing PostgreSQL and Redis: a namesake with another identity (its own state
    folder) registering on node B is refused while the name is live on node A, so it can never
    release the live agent's runs; the same agent moving to node B is welcome."""
    problem = redis_problem()
    if problem:
        pytest.skip(problem)
    # A 3 s lease: the refused namesake tries again for two leases (the name might be its own dead
    # process's) before it gives up; with the 8 s lease of the other tests that took 16 s.
    env = {"JOBDECK_DATABASE_URL": pg_url, "JOBDECK_REDIS_URL": REDIS_URL, **LEASES, "JOBDECK_LEASE_SECONDS": "3"}
    a, b = (spawn_jobdeck(tmp_path / f"node{i}", "server", env=env) for i in (1, 2))
    first = spawn_agent(a.url, "unique", tmp_path, "--heartbeat", "1")
    try:
        async with JobDeckClient(a.url) as ca, JobDeckClient(b.url) as cb:
            await until(lambda: _registered(cb, "unique"), 30, "node B to hear of the agent on node A")
            job = await ca.submit({"task": recorder_task(tmp_path, 30)})
            await until(lambda: len(recorded_runs(tmp_path)) == 1, 30, "the job to start on the agent")
            other = spawn_agent(b.url, "unique", tmp_path, "--state-dir", str(tmp_path / "impostor-state"))
            assert other.wait(30) == 1
            log = (tmp_path / "agent-unique.log").read_text()
            assert "is connected to another node already" in log, log
            assert (await ca.get_job(job["id"]))["state"] == "running", "the live agent's run was left alone"
            assert len(await ca.attempts(job["id"])) == 1
    finally:
        _stop(first)
        for n in (a, b):
            n.kill()


async def test_a_restart_waits_for_the_name_its_dead_process_still_holds(tmp_path: Path) -> None:
    """The agent dies behind a partition (its node still sees a live, silent connection) and is
    started again without its state folder (a new identity): the node refuses the name while it
    counts the old connection live, the new process tries again instead of giving up, and once
    the silent connection is dropped (a lease) it registers and the old run is retried."""
    server = spawn_jobdeck(tmp_path / "data", "server", env={**LEASES, "JOBDECK_LEASE_SECONDS": "4"})
    proxy = await TcpProxy.start(int(server.url.rsplit(":", 1)[1]))
    agent = spawn_agent(proxy.url, "again", tmp_path, "--heartbeat", "1")
    try:
        async with JobDeckClient(server.url) as c:
            await until(lambda: _registered(c, "again"), 30, "the agent to register through the proxy")
            job = await c.submit({"task": recorder_task(tmp_path, 60), "backoff": {"base": 0.1, "cap": 0.1}})
            await until(lambda: len(recorded_runs(tmp_path)) == 1, 30, "the job to start")
            proxy.swallow = True
            agent.kill()
            agent.wait(10)
            agent = spawn_agent(server.url, "again", tmp_path, "--state-dir", str(tmp_path / "fresh-state"))
            log = tmp_path / "agent-again.log"
            await until(lambda: "trying again for up to" in log.read_text(), 30, "the name to be refused for now")
            await until(lambda: _registered(c, "again") if agent.poll() is None else True, 30, "the name to free")
            assert agent.poll() is None, f"the restarted agent gave up:\n{log.read_text()}"

            async def retried() -> list[dict[str, object]] | None:
                attempts = await c.attempts(job["id"])
                return attempts if len(attempts) == 2 and attempts[1]["outcome"] == "running" else None

            attempts = await until(retried, 20, "the dead process's run to run again on the new one")
        assert attempts[0]["outcome"] == "lost", attempts
    finally:
        _stop(agent)
        await proxy.close()
        server.kill()


async def test_a_run_reported_after_a_newer_attempt_started_is_stopped_and_the_agent_logs_why(tmp_path: Path) -> None:
    """The "started" side of the fence: an agent frozen (SIGSTOP) past its lease comes back still
    running attempt 1 while attempt 2 runs on another agent. The core refuses attempt 1 with the
    reason, which the agent logs; the run stops and its late report changes nothing."""
    server = spawn_jobdeck(tmp_path / "data", "server", env={**LEASES, "JOBDECK_LEASE_SECONDS": "3"})
    frozen = spawn_agent(server.url, "frozen", tmp_path, "--heartbeat", "1", "--slots", "1")
    other: subprocess.Popen[str] | None = None
    try:
        async with JobDeckClient(server.url) as c:
            await until(lambda: _registered(c, "frozen"), 30, "the agent to register")
            job = await c.submit({"task": recorder_task(tmp_path, 20), "backoff": {"base": 0.1, "cap": 0.1}})
            await until(lambda: len(recorded_runs(tmp_path)) == 1, 30, "attempt 1 to start")
            frozen.send_signal(signal.SIGSTOP)
            other = spawn_agent(server.url, "other", tmp_path, "--heartbeat", "1", "--slots", "1")

            async def second_started() -> list[dict[str, object]] | None:
                attempts = await c.attempts(job["id"])
                return attempts if len(attempts) == 2 and len(recorded_runs(tmp_path)) == 2 else None

            attempts = await until(second_started, 30, "attempt 2 to start on the other agent (a lease is 3 s)")
            frozen.send_signal(signal.SIGCONT)
            log = tmp_path / "agent-frozen.log"
            stopped = (
                f"the core stopped job {job['id']} attempt 1: job {job['id']} attempt 1 is no longer agent frozen's"
            )
            await until(lambda: stopped in log.read_text(), 30, "the agent to log why its run was stopped")
            refused = f"did not record the result of job {job['id']} attempt 1"
            await until(lambda: refused in log.read_text(), 30, "the agent to log the refusal of its late report")
            text = log.read_text()
            after = await c.attempts(job["id"])
        line = next(ln for ln in text.splitlines() if stopped in ln)
        assert "to run: attempt 2 has started since" in line, line
        assert [(a["agent"], a["outcome"]) for a in attempts] == [("frozen", "lost"), ("other", "running")], attempts
        assert [(a["agent"], a["outcome"], a["error"]) for a in after] == [
            (a["agent"], a["outcome"], a["error"]) for a in attempts
        ], f"the stopped run's late report must change nothing: {attempts} -> {after}"
        ends = [(j, a) for w, j, a, _ in recorded_runs(tmp_path) if w == "end"]
        assert (job["id"], 1) not in ends, f"attempt 1 was stopped and must not have run to its end: {ends}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            frozen.send_signal(signal.SIGCONT)
        _stop(frozen)
        if other is not None:
            _stop(other)
        server.kill()


async def test_a_finished_run_whose_attempt_was_recorded_lost_is_recorded_late_not_rerun(tmp_path: Path) -> None:
    """The agent is frozen (SIGSTOP) while its command ends, past its lease: the attempt is recorded
    lost and its retry waits queued (no other agent). Thawed, the agent sends the held result: no
    newer attempt started, so the success is recorded late and the job does not run again."""
    server = spawn_jobdeck(tmp_path / "data", "server", env={**LEASES, "JOBDECK_LEASE_SECONDS": "3"})
    agent = spawn_agent(server.url, "sleepy", tmp_path, "--heartbeat", "1", "--slots", "1")
    try:
        async with JobDeckClient(server.url) as c:
            await until(lambda: _registered(c, "sleepy"), 30, "the agent to register")
            job = await c.submit({"task": recorder_task(tmp_path, 1), "backoff": {"base": 0.1, "cap": 0.1}})
            await until(lambda: len(recorded_runs(tmp_path)) == 1, 30, "the run to start")
            agent.send_signal(signal.SIGSTOP)

            async def retry_waits() -> dict[str, object] | None:
                j = await c.get_job(job["id"])
                return j if j["state"] == "queued" and j["attempt"] == 1 else None

            await until(retry_waits, 30, "the attempt to be recorded lost and its retry to wait (a lease is 3 s)")
            assert [w for w, *_ in recorded_runs(tmp_path)] == ["start", "end"], "the command ended meanwhile"
            agent.send_signal(signal.SIGCONT)
            done = await until(lambda: _finished(c, job["id"]), 30, "the late result to be recorded")
            attempts = await c.attempts(job["id"])
            events = [e for e in await c.job_events(job["id"]) if e["type"] == "job.succeeded"]
        assert done["state"] == "succeeded", done
        assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "succeeded")], attempts
        assert len(recorded_runs(tmp_path)) == 2, f"the job ran once: {recorded_runs(tmp_path)}"
        assert events and events[-1]["data"].get("late") is True, events
    finally:
        with contextlib.suppress(ProcessLookupError):
            agent.send_signal(signal.SIGCONT)
        _stop(agent)
        server.kill()


async def test_a_node_frozen_past_the_lease_reads_its_live_agents_heartbeats_before_it_judges(tmp_path: Path) -> None:
    """The node itself stalls (SIGSTOP, as a 10,000-job batch or a swapped-out process would) for
    longer than the lease while its agent keeps sending heartbeats. Thawed, it reads them before it
    judges: the running attempt is not recorded lost, the agent is not dropped, the job runs once."""
    server = spawn_jobdeck(tmp_path / "data", "server", env={**LEASES, "JOBDECK_LEASE_SECONDS": "3"})
    agent = spawn_agent(server.url, "alive", tmp_path, "--heartbeat", "1", "--slots", "1")
    try:
        async with JobDeckClient(server.url) as c:
            await until(lambda: _registered(c, "alive"), 30, "the agent to register")
            job = await c.submit({"task": recorder_task(tmp_path, 8), "backoff": {"base": 0.1, "cap": 0.1}})
            await until(lambda: len(recorded_runs(tmp_path)) == 1, 30, "the run to start")
        server.proc.send_signal(signal.SIGSTOP)
        await asyncio.sleep(5)  # longer than the 3 s lease
        server.proc.send_signal(signal.SIGCONT)
        async with JobDeckClient(server.url) as c:
            done = await until(lambda: _finished(c, job["id"]), 30, "the job to finish")
            attempts = await c.attempts(job["id"])
        assert done["state"] == "succeeded", done
        assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "succeeded")], attempts
        assert [w for w, *_ in recorded_runs(tmp_path)] == ["start", "end"], "the job ran once"
        log = server.output()
        assert "event loop stalled" in log, log[-3000:]
        assert "marking it lost" not in log, log[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            server.proc.send_signal(signal.SIGCONT)
        _stop(agent)
        server.kill()


async def test_the_readmes_idempotent_task_adds_one_payment_however_often_its_job_runs(tmp_path: Path) -> None:
    """The README's example under "Delivery is at least once", run as written: a second run of the
    job (a retry keeps its id) finds its key taken and adds nothing."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("Delivery is **at least once**") :]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert code and "def record_payment" in code.group(1), "the README's example moved or changed"
    (tmp_path / "readme_payments.py").write_text(code.group(1))
    with sqlite3.connect(tmp_path / "shop.db") as db:  # the table the example writes to, its key UNIQUE
        db.execute("CREATE TABLE payments (idem_key TEXT UNIQUE, order_id INTEGER, cents INTEGER)")
    server = spawn_jobdeck(tmp_path / "data", "server")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    with open(tmp_path / "agent.log", "w") as log:  # cwd: the example's shop.db is a relative path
        agent = subprocess.Popen([sys.executable, "-m", "core.cli", "agent", "--server", server.url, "--name", "shop",
                                  "--state-dir", str(tmp_path / "state"), "--import", "readme_payments"],
                                 cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, env=env, text=True)  # fmt: skip
    try:
        async with JobDeckClient(server.url) as c:
            await until(c.agents, 20, "the agent to register")
            job = await c.submit({"task": {"kind": "python", "function": "readme_payments:record_payment",
                                           "args": [7, 500]}})  # fmt: skip
            for _ in range(2):
                done = await c.wait_for(job["id"], timeout=30)
                assert done["state"] == "succeeded", (done, (tmp_path / "agent.log").read_text()[-2000:])
                if done["attempt"] == 1:
                    await c.job_action(job["id"], "retry")
            assert len(await c.attempts(job["id"])) == 2
        with sqlite3.connect(tmp_path / "shop.db") as db:
            rows = db.execute("SELECT idem_key, order_id, cents FROM payments").fetchall()
        assert rows == [(f"jobdeck-{job['id']}", 7, 500)], f"expected one payment for two runs, got {rows}"
    finally:
        stop_process(agent)
        stop_process(server.proc)
