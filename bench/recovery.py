"""Recovery times: two `jobdeck server` nodes on one PostgreSQL (a fresh schema) and the machine's
Redis, two `jobdeck agent` processes with 20 slots each, killed with SIGKILL in turns:

  agent kill, restarted at once   seconds until every run the killed agent had is running again
                                  (it reconnects, says what it still has, the rest is released)
  agent kill, never restarted     the same-run baseline: its runs wait for their leases (5 s here;
                                  30 s by default) before they are retried on the other agent
  node kill (back after 2 s)      both agents on one node, short jobs flowing: seconds until both
                                  agents registered on the other node (agent.connected on its feed)
                                  and a job finished after the kill

The restart's figure includes the new agent process's start (Python and its imports, ~2 s on a
loaded 2-core machine); from its registration to its runs being retried took 0.14 s in
tests/agents/test_delivery.py.

Figures are p50 and max over the turns; the restart's ratio to the baseline says what the release
on reconnect saves at this lease. `tests/chaos/` measures the same under a continuous chaos run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx

from bench.context import RunContext
from bench.report import Figure
from bench.server import ROOT, BenchError
from bench.store import Backend
from core.client import JobDeckClient

LEASE = 5.0
ENV = {"JOBDECK_LEASE_SECONDS": str(LEASE), "JOBDECK_HEARTBEAT_SECONDS": "1", "JOBDECK_REAP_INTERVAL_SECONDS": "0.2"}
SLOTS = 20
SLEEPER = {"task": {"kind": "python", "function": "agents.builtin:sleep", "args": [60]}, "queue": "recovery"}
SHORT = {"task": {"kind": "python", "function": "agents.builtin:sleep", "args": [0.2]}, "queue": "recovery"}
BENCH = "recovery"
AGENT_NAMES = ("rec-a", "rec-b")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Cluster:
    """The processes of the case, restartable on the same ports and state folders."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp, self.env = tmp, {**os.environ, **env, **ENV, "PYTHONUNBUFFERED": "1"}
        self.ports = [_port(), _port()]
        self.nodes: list[subprocess.Popen[bytes] | None] = [None, None]
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.http = httpx.AsyncClient(timeout=5.0)

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports]

    async def start_node(self, i: int) -> None:
        cmd = [sys.executable, "-m", "core.cli", "server", "--data-dir", str(self.tmp / f"node{i}"),
               "--port", str(self.ports[i])]  # fmt: skip
        with open(self.tmp / f"node{i}.log", "ab") as log:
            self.nodes[i] = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                             start_new_session=True)  # fmt: skip
        await self._until(lambda: self._healthy(self.urls[i]), 60, f"node {i} to answer")

    def start_agent(self, name: str, first: int) -> None:
        order = self.urls if first == 0 else self.urls[::-1]
        cmd = [sys.executable, "-m", "core.cli", "agent", "--server", ",".join(order), "--name", name,
               "--slots", str(SLOTS), "--heartbeat", "1", "--state-dir", str(self.tmp / f"{name}-state")]  # fmt: skip
        with open(self.tmp / f"{name}.log", "ab") as log:
            self.agents[name] = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                                 start_new_session=True)  # fmt: skip

    def kill(self, proc: subprocess.Popen[bytes] | None) -> None:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)

    def live(self) -> list[str]:
        return [u for u, p in zip(self.urls, self.nodes, strict=True) if p is not None and p.poll() is None]

    async def get(self, path: str) -> object:
        for url in self.live():
            with contextlib.suppress(httpx.HTTPError):
                r = await self.http.get(url + path)
                if r.status_code == 200:
                    return r.json()
        raise BenchError(f"no node answered GET {path}")

    async def post(self, path: str, body: object) -> object:
        for url in self.live():
            with contextlib.suppress(httpx.HTTPError):
                r = await self.http.post(url + path, json=body)
                if r.status_code < 300:
                    return r.json()
        raise BenchError(f"no node answered POST {path}")

    async def agents_by_name(self) -> dict[str, dict[str, object]]:
        out: dict[str, dict[str, object]] = {}
        for url in self.live():
            with contextlib.suppress(httpx.HTTPError):
                for a in (await self.http.get(url + "/v1/agents")).json()["agents"]:
                    if a.get("node") and (a["name"] not in out or a["running"]):
                        out[a["name"]] = a
        return out

    async def _healthy(self, url: str) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return (await self.http.get(url + "/healthz")).status_code == 200
        return False

    async def _until(self, check: Callable[[], Awaitable[object]], seconds: float, what: str) -> object:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = await check()
            if value:
                return value
            await asyncio.sleep(0.05)
        raise BenchError(f"timed out after {seconds:.0f} s waiting for {what}; logs in {self.tmp}")

    async def close(self) -> None:
        for p in [*self.agents.values(), *self.nodes]:
            self.kill(p)
        await self.http.aclose()


@contextlib.asynccontextmanager
async def _cluster(ctx: RunContext) -> AsyncIterator[_Cluster]:
    base = ctx.backend
    backend = Backend("postgres", 2, base.database_url, base.redis_url)
    async with backend.fresh(BENCH) as env:
        tmp = Path(tempfile.mkdtemp(prefix="jobdeck-bench-recovery-"))  # kept when the case fails, or --keep
        c = _Cluster(tmp, env)
        try:
            for i in (0, 1):
                await c.start_node(i)
            for i, name in enumerate(AGENT_NAMES):
                c.start_agent(name, i)
            await c._until(lambda: _both_attached(c), 60, "both agents to register")
            yield c
        except BaseException:
            await c.close()
            raise
        await c.close()
        if not ctx.servers.keep:
            shutil.rmtree(tmp, ignore_errors=True)


async def _both_attached(c: _Cluster) -> bool:
    return set(AGENT_NAMES) <= set(await c.agents_by_name())


async def _running_of(c: _Cluster, name: str) -> dict[int, int]:
    a = (await c.agents_by_name()).get(name) or {}
    out = {}
    for job_id in a.get("running") or []:  # type: ignore[attr-defined]
        job = await c.get(f"/v1/jobs/{job_id}")
        if job["state"] == "running":  # type: ignore[index]
            out[int(job_id)] = int(job["attempt"])  # type: ignore[index]
    return out


async def _all_again(c: _Cluster, runs: dict[int, int], since: float) -> float:
    """Seconds from `since` until every one of `runs` is running again with a newer attempt."""
    pending = dict(runs)
    deadline = since + 120
    while pending and time.monotonic() < deadline:
        for job_id, attempt in list(pending.items()):
            job = await c.get(f"/v1/jobs/{job_id}")
            if job["attempt"] > attempt and job["state"] == "running":  # type: ignore[index]
                del pending[job_id]
        await asyncio.sleep(0.05)
    if pending:
        raise BenchError(f"{len(pending)} runs of the killed agent never ran again")
    return time.monotonic() - since


async def _queue(c: _Cluster) -> dict[str, int]:
    queues = await c.get("/v1/queues")
    return next((q["counts"] for q in queues["queues"] if q["name"] == "recovery"), {})  # type: ignore[index]


async def _cancel_all(c: _Cluster) -> None:
    """Stop this turn's jobs and wait until none runs (the next turn starts from idle agents)."""
    await c.post("/v1/jobs/bulk", {"action": "cancel", "filter": {"queue": "recovery"}})

    async def idle() -> bool:
        counts = await _queue(c)
        return not any(counts.get(s, 0) for s in ("running", "queued", "failed", "scheduled"))

    await c._until(idle, 60, "the turn's jobs to stop")


async def _fill(c: _Cluster) -> None:
    """SLOTS sleepers over both agents (40 slots): the killed agent's runs have room on the other."""
    await c.post("/v1/jobs/batch", {"jobs": [SLEEPER] * SLOTS})

    async def busy() -> bool:
        agents = await c.agents_by_name()
        return (await _queue(c)).get("running", 0) == SLOTS and any(a.get("running") for a in agents.values())

    await c._until(busy, 60, "the sleepers to run")


async def _busiest(c: _Cluster) -> str:
    """The agent running the most (the dispatcher may hand one agent all of them)."""
    agents = await c.agents_by_name()
    return max(agents, key=lambda n: len(agents[n].get("running") or []))  # type: ignore[arg-type]


async def _node_kill(ctx: RunContext, c: _Cluster, i: int) -> float:
    """Both agents on node `i` (restarted with it first in their list), short jobs flowing; SIGKILL
    node `i`: seconds until both agents registered on the other (agent.connected on its feed) and a
    job finished after the kill. Node `i` is back 2 s later."""
    j = 1 - i
    for name in AGENT_NAMES:
        c.kill(c.agents[name])
        c.start_agent(name, i)
    await c._until(lambda: _both_attached(c), 60, "the agents to come back")
    await c.post("/v1/jobs/batch", {"jobs": [SHORT] * 400})
    since = int((await c.get("/healthz"))["last_seq"])  # type: ignore[index]
    done_before = int((await c.get("/v1/stats"))["by_state"].get("succeeded", 0))  # type: ignore[index]
    c.kill(c.nodes[i])
    killed = time.monotonic()
    back: set[str] = set()
    async with JobDeckClient(c.urls[j]) as client:

        async def reattached() -> None:
            async for e in client.events(since=since, types=["agent.connected"]):
                back.add(str(e["data"]["agent"]["name"]))
                if back >= set(AGENT_NAMES):
                    return

        await asyncio.wait_for(reattached(), 60)

        async def flowing() -> bool:
            stats = await client.stats()
            return int(stats["by_state"].get("succeeded", 0)) > done_before

        await c._until(flowing, 60, "work to flow through the surviving node")
    took = time.monotonic() - killed
    await _cancel_all(c)
    await asyncio.sleep(2.0)
    await c.start_node(i)
    return took


async def recovery(ctx: RunContext) -> list[Figure]:
    """Agent kill with an immediate restart vs without one (the lease path), and node kill."""
    turns = 2 if ctx.scale.sleepers < 10_000 else 4  # --quick: 2 turns
    restart: list[float] = []
    gone: list[float] = []
    node: list[float] = []
    async with _cluster(ctx) as c:
        for turn in range(turns):
            for mode in ("restart", "gone"):
                await _fill(c)
                victim = await _busiest(c)
                runs = await c._until(lambda v=victim: _running_of(c, v), 30, "the agent's runs")  # type: ignore[misc]
                c.kill(c.agents[victim])
                killed = time.monotonic()
                if mode == "restart":
                    c.start_agent(victim, AGENT_NAMES.index(victim))
                took = await _all_again(c, runs, killed)
                (restart if mode == "restart" else gone).append(took)
                ctx.progress(
                    f"recovery turn {turn + 1}: agent kill ({mode}) -> its {len(runs)} runs again in {took:.2f} s"
                )
                await _cancel_all(c)
                if mode == "gone":
                    c.start_agent(victim, AGENT_NAMES.index(victim))
                await c._until(lambda: _both_attached(c), 60, "the agent to come back")
            node.append(await _node_kill(ctx, c, turn % 2))
            ctx.progress(f"recovery turn {turn + 1}: node kill -> agents reattached, work flowing in {node[-1]:.2f} s")
    p50 = statistics.median
    note = f"{turns} turns, {SLOTS} runs each, lease {LEASE:.0f} s"
    return [
        Figure(BENCH, "agent kill, restarted at once -> its runs again, p50", p50(restart), "s", note=note),
        Figure(BENCH, "agent kill, restarted at once -> its runs again, max", max(restart), "s"),
        Figure(BENCH, "agent kill, never back (lease path: baseline), p50", p50(gone), "s"),
        Figure(
            BENCH, "restart / lease path, p50", p50(restart) / p50(gone), "ratio", note="< 1: released on reconnect"
        ),
        Figure(BENCH, "node kill -> agents reattached and work flowing, p50", p50(node), "s"),
        Figure(BENCH, "node kill -> agents reattached and work flowing, max", max(node), "s"),
    ]
