"""A continuous chaos run: two `jobdeck server` nodes on a throw-away PostgreSQL and Redis, two
`jobdeck agent` processes, jobs submitted all along, a schedule firing every second; nodes are
SIGKILLed (back after 2 s), agents SIGKILLed (back at once), Redis is stopped for 10 s once and
PostgreSQL restarted once. Then a checker reads what the tasks recorded and the event log.

Run it alone: `.venv/bin/python -m pytest -m chaos -s` (the seed is printed; JOBDECK_CHAOS_SEED=N
replays a run's order of kills; JOBDECK_CHAOS_SECONDS sets the length of the chaos phase).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import statistics
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from core.client import JobDeckClient
from core.errors import JobDeckError
from tests.conftest import ServerProcess, fire_times, spawn_agent, spawn_jobdeck, until
from tests.throwaway import ThrowawayPostgres, ThrowawayRedis, free_port, throwaway_problem

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(420)]

SECONDS = float(os.environ.get("JOBDECK_CHAOS_SECONDS") or 90)
LEASES = {"JOBDECK_LEASE_SECONDS": "5", "JOBDECK_HEARTBEAT_SECONDS": "1", "JOBDECK_REAP_INTERVAL_SECONDS": "0.2"}
TASK = "tests.chaos.tasks:noted_run"
QUEUE = "chaos"
AGENTS = ("chaos-a", "chaos-b")
RECOVERY_BOUND = (
    10.0  # seconds from a kill: an agent's runs running again, or a node's agents reattached and work flowing
)
# seconds from a killed agent's restart registering to every run it had being lost and retried (item 2; the
# issue's own test asks for 1 s with nothing else going on; here a PostgreSQL restart may fall in between)
RELEASE_BOUND = 2.0
# A finished run may run again only if the agent process that ran it was killed this soon after its end: the
# result was not in its state folder yet (written in a thread right after the run). Any other repeat fails.
REPEAT_GRACE = 1.0


@dataclass
class Cluster:
    """The processes of the run and how to bring them back."""

    tmp: Path
    env: dict[str, str]
    ports: list[int]
    nodes: list[ServerProcess | None] = field(default_factory=list)
    agents: dict[str, subprocess.Popen[str]] = field(default_factory=dict)

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports]

    def start_node(self, i: int) -> None:
        self.nodes[i] = spawn_jobdeck(self.tmp / f"node{i}", "server", port=self.ports[i], env=self.env)

    def start_agent(self, name: str) -> None:
        order = self.urls if name == AGENTS[0] else self.urls[::-1]
        self.agents[name] = spawn_agent(",".join(order), name, self.tmp, "--slots", "40", "--heartbeat", "1")

    def live(self) -> list[str]:
        return [self.urls[i] for i, n in enumerate(self.nodes) if n is not None and n.proc.poll() is None]

    def stop_all(self) -> None:
        procs = [*self.agents.values(), *(n.proc for n in self.nodes if n is not None)]
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Cluster, ThrowawayPostgres, ThrowawayRedis]]:
    problem = throwaway_problem()
    if problem:
        pytest.skip(problem)
    with ThrowawayPostgres() as pg, ThrowawayRedis() as redis:
        env = {"JOBDECK_DATABASE_URL": pg.url, "JOBDECK_REDIS_URL": redis.url, **LEASES}
        c = Cluster(tmp_path, env, [free_port(), free_port()], [None, None])
        try:
            for i in (0, 1):
                c.start_node(i)
            for name in AGENTS:
                c.start_agent(name)
            yield c, pg, redis
        finally:
            c.stop_all()


class Live:
    """A client of whichever node answers."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.clients = {u: JobDeckClient(u) for u in cluster.urls}

    async def call(self, fn: Any, *args: Any, **kw: Any) -> Any:
        last: Exception | None = None
        for _ in range(60):
            for url in self.cluster.live() or self.cluster.urls:
                try:
                    return await fn(self.clients[url], *args, **kw)
                except (JobDeckError, OSError) as exc:
                    last = exc
            await asyncio.sleep(0.5)
        raise AssertionError(f"no node answered for 30 s: {last}")

    async def close(self) -> None:
        for c in self.clients.values():
            await c.close()


async def test_chaos_keeps_every_promise(cluster: tuple[Cluster, ThrowawayPostgres, ThrowawayRedis]) -> None:
    c, pg, redis = cluster
    seed = int(os.environ.get("JOBDECK_CHAOS_SEED") or random.randrange(1_000_000))
    rng = random.Random(seed)
    print(f"\nchaos seed {seed} (JOBDECK_CHAOS_SEED={seed} replays the order), {SECONDS:.0f} s of chaos")
    runs = c.tmp / "runs.log"
    live = Live(c)
    try:
        await until(lambda: _attached(live, len(AGENTS)), 60, "both agents to register")
        start_seq = (await live.call(lambda cl: cl.health()))["last_seq"]
        seen: list[int] = []
        gaps: list[dict[str, Any]] = []
        feed = asyncio.create_task(_follow(c, start_seq, seen, gaps))
        schedule = await live.call(
            lambda cl: cl.create_schedule(
                {
                    "name": "tick",
                    "cron": "* * * * * *",
                    "overlap": "allow",
                    "catch_up": "all",
                    "job": {"task": {"kind": "python", "function": "agents.builtin:noop"}},
                }
            )
        )
        submitted: dict[str, int] = {}
        stop = asyncio.Event()
        submitting = asyncio.create_task(_submit_all_along(live, runs, rng, submitted, stop))
        kills: list[tuple[float, int]] = []  # (when, pid) of every agent process killed
        agent_recovery: list[float] = []
        releases: list[float] = []
        node_recovery: list[float] = []
        watchers: list[asyncio.Task[None]] = []
        began = time.monotonic()
        plan = _plan(rng)
        for at, action in plan:
            await asyncio.sleep(max(0.0, began + at - time.monotonic()))
            print(f"  t={time.monotonic() - began:5.1f} s  {action}", flush=True)
            if action.startswith("kill agent"):
                name = action.split()[-1]
                mine = await _running_on(live, name)
                c.agents[name].kill()
                c.agents[name].wait(10)
                kills.append((time.time(), c.agents[name].pid))
                killed_at = time.monotonic()
                c.start_agent(name)
                watchers.append(
                    asyncio.create_task(_rerun_within(live, name, mine, killed_at, agent_recovery, releases))
                )
            elif action.startswith("kill node"):
                i = int(action.split()[-1])
                if len(c.live()) < 2:
                    continue  # one node always lives
                node = c.nodes[i]
                assert node is not None
                done_before = await _succeeded(live)
                node.kill()
                killed_at = time.monotonic()
                watchers.append(asyncio.create_task(_reattached(live, killed_at, done_before, node_recovery)))
                watchers.append(asyncio.create_task(_later(2.0, c.start_node, i)))
            elif action == "stop redis":
                await asyncio.to_thread(redis.stop)
                watchers.append(asyncio.create_task(_later(10.0, redis.start)))
            elif action == "restart postgres":
                await asyncio.to_thread(pg.restart)
        await asyncio.sleep(max(0.0, began + SECONDS - time.monotonic()))
        stop.set()
        await submitting
        print(f"  chaos over: {len(submitted)} jobs submitted; waiting for them to finish", flush=True)

        async def all_done() -> dict[str, int] | None:
            states = {k: v for k, v in (await _states(live)).items() if v}
            return states if states == {"succeeded": len(submitted)} else None

        try:
            await until(all_done, 120, "every submitted job to succeed")
        except AssertionError:
            states = await _states(live)
            raise AssertionError(f"not every one of {len(submitted)} jobs succeeded: {states}") from None
        await asyncio.gather(*watchers)
        last = (await live.call(lambda cl: cl.health()))["last_seq"]
        await until(lambda: bool(seen) and seen[-1] >= last, 60, "the feed to catch up")
        feed.cancel()
        fired = await live.call(fire_times, schedule["id"])
    finally:
        await live.close()

    failures: list[str] = []
    # Every run of every job, from the tasks' own notes: never two at once, never again once finished.
    # (attempt, start, end or None, pid of the agent process) of each run of each job token
    spans: dict[int, list[tuple[int, float, float | None, int]]] = {}
    open_runs: dict[tuple[int, int], tuple[float, int]] = {}
    for line in runs.read_text().splitlines():
        what, token, attempt, t, pid = line.split()
        key = (int(token), int(attempt))
        if what == "start":
            open_runs[key] = (float(t), int(pid))
        else:
            started, _ = open_runs.pop(key)
            spans.setdefault(key[0], []).append((key[1], started, float(t), int(pid)))
    for (token, attempt), (t, pid) in open_runs.items():  # cut off by the kill of its agent process
        spans.setdefault(token, []).append((attempt, t, None, pid))
    killed = {pid: at for at, pid in kills}
    excused: list[int] = []
    for token, intervals in spans.items():
        intervals.sort(key=lambda r: r[1])
        for (_, _, e1, pid1), (a2, s2, _, _) in itertools.pairwise(intervals):
            end1 = e1 if e1 is not None else killed.get(pid1, float("inf"))
            if s2 < end1:
                failures.append(f"job token {token}: attempt {a2} started while an earlier run went on: {intervals}")
        first_end = next(((e, pid) for _, _, e, pid in intervals if e is not None), None)
        if first_end is None or not any(s > first_end[0] for _, s, _, _ in intervals):
            continue
        if 0 <= killed.get(first_end[1], -1.0) - first_end[0] <= REPEAT_GRACE:
            excused.append(token)
        else:
            failures.append(f"job token {token} ran again after a run had finished: {intervals}")
    missing = set(range(len(submitted))) - set(spans)
    if missing:
        failures.append(f"{len(missing)} submitted jobs never ran: {sorted(missing)[:10]}")
    # Every fire time exactly once, one a second from the first to the last.
    ticks = sorted(fired)
    if len(ticks) != len(set(ticks)):
        failures.append(f"fire times materialised twice: {[t for t in ticks if ticks.count(t) > 1][:10]}")
    wanted = [ticks[0] + i for i in range(int(ticks[-1] - ticks[0]) + 1)]
    if sorted(set(ticks)) != wanted:
        failures.append(f"fire times missing: {sorted(set(wanted) - set(ticks))[:10]}")
    # The feed, followed across node deaths: every sequence number once, in order.
    expected = list(range(start_seq + 1, seen[-1] + 1))
    if seen != expected or gaps:
        failures.append(f"feed: gaps {sorted(set(expected) - set(seen))[:10]}, {len(seen) - len(set(seen))} "
                        f"repeats, out of order {seen != sorted(seen)}, stream.gap {gaps[:3]}")  # fmt: skip
    print(
        f"chaos checked: {len(submitted)} jobs, {len(ticks)} fire times, {len(seen)} events; "
        f"agent kill -> its runs running again: {_figures(agent_recovery)}; "
        f"node kill -> agents reattached and work flowing: {_figures(node_recovery)} (bound {RECOVERY_BOUND:.0f} s); "
        f"restarted agent registered -> its lost runs released: {_figures(releases)} (bound {RELEASE_BOUND:.0f} s); "
        f"{len(excused)} runs repeated because their agent was killed within {REPEAT_GRACE:.0f} s of their end"
    )
    slow = [t for t in agent_recovery + node_recovery if t > RECOVERY_BOUND]
    if slow:
        failures.append(f"recoveries over {RECOVERY_BOUND} s: {slow}")
    if any(t > RELEASE_BOUND for t in releases):
        failures.append(
            f"a restarted agent's runs released later than {RELEASE_BOUND} s after it registered: {releases}"
        )
    assert not failures, "\n".join(failures)


def _plan(rng: random.Random) -> list[tuple[float, str]]:
    """When to do what: a kill every 6-11 s, the Redis outage and the PostgreSQL restart once each."""
    plan: list[tuple[float, str]] = [(SECONDS * 0.3, "stop redis"), (SECONDS * 0.65, "restart postgres")]
    t = 5.0
    while t < SECONDS - 8:
        kind = rng.choice(["agent", "agent", "node"])
        plan.append((t, f"kill agent {rng.choice(AGENTS)}" if kind == "agent" else f"kill node {rng.randrange(2)}"))
        t += rng.uniform(6, 11)
    return sorted(plan)


async def _later(seconds: float, fn: Any, *args: Any) -> None:
    """Call the blocking `fn(*args)` after `seconds`, in a thread (the kills go on meanwhile)."""
    await asyncio.sleep(seconds)
    await asyncio.to_thread(fn, *args)


def _figures(values: list[float]) -> str:
    if not values:
        return "none measured"
    return f"p50 {statistics.median(values):.2f} s, max {max(values):.2f} s over {len(values)}"


async def _attached(live: Live, n: int) -> bool:
    names = {a["name"] for a in await live.call(lambda cl: cl.agents())}
    return len(names & set(AGENTS)) >= n


async def _succeeded(live: Live) -> int:
    return int((await live.call(lambda cl: cl.stats()))["by_state"].get("succeeded", 0))


async def _running_on(live: Live, name: str) -> dict[int, int]:
    """job id -> attempt of what the agent runs, as the node holding it says."""
    for url in live.cluster.live():
        with contextlib.suppress(JobDeckError, OSError):
            for a in await live.clients[url].agents():
                if a["name"] == name and a.get("node") and a["running"]:
                    jobs = [await live.call(lambda cl, j=j: cl.get_job(j)) for j in a["running"]]
                    return {j["id"]: j["attempt"] for j in jobs if j["state"] == "running"}
    return {}


async def _rerun_within(
    live: Live, name: str, runs: dict[int, int], killed_at: float, out: list[float], releases: list[float]
) -> None:
    """Seconds from an agent's kill until each run it had is running again (a newer attempt) or over;
    and (`releases`) from its restart's registration until the last of its runs was recorded lost
    (negative when the leases ran out before the restart registered)."""
    killed_wall = time.time() - (time.monotonic() - killed_at)
    pending = dict(runs)
    deadline = killed_at + 60
    while pending and time.monotonic() < deadline:
        for job_id, attempt in list(pending.items()):
            job = await live.call(lambda cl, j=job_id: cl.get_job(j))
            if job["attempt"] > attempt or job["state"] != "running":
                del pending[job_id]
        await asyncio.sleep(0.1)
    if not runs:
        return
    out.append(time.monotonic() - killed_at if not pending else float("inf"))
    back = await until(lambda: _connected_at(live, name, killed_wall), 60, f"agent {name}'s restart to register")
    lost = []
    for job_id, attempt in runs.items():
        rows = await live.call(lambda cl, j=job_id: cl.attempts(j))
        lost += [float(a["finished_at"]) for a in rows if a["attempt"] == attempt and a["outcome"] == "lost"]
    if lost:
        releases.append(max(lost) - back)


async def _connected_at(live: Live, name: str, after: float) -> float | None:
    """When the agent `name` registered, if that was after `after` (Unix seconds)."""
    for a in await live.call(lambda cl: cl.agents()):
        if a["name"] == name and a.get("connected_at") and float(a["connected_at"]) > after:
            return float(a["connected_at"])
    return None


async def _reattached(live: Live, killed_at: float, done_before: int, out: list[float]) -> None:
    """Seconds from a node's kill until both agents are connected again and a job finished since."""
    deadline = killed_at + 60
    while time.monotonic() < deadline:
        if await _attached(live, len(AGENTS)) and await _succeeded(live) > done_before:
            out.append(time.monotonic() - killed_at)
            return
        await asyncio.sleep(0.1)
    out.append(float("inf"))


async def _submit_all_along(
    live: Live, runs: Path, rng: random.Random, submitted: dict[str, int], stop: asyncio.Event
) -> None:
    """Five jobs every half second, each with an idempotency key: a submit whose answer was lost
    with its node is sent again (to any node) and returns the job the first one made."""
    token = 0
    while not stop.is_set():
        specs = []
        for _ in range(5):
            args = [str(runs), token, round(rng.uniform(0.3, 2.5), 2)]
            specs.append({"task": {"kind": "python", "function": TASK, "args": args}, "max_attempts": 20, "queue": QUEUE,
                          "backoff": {"base": 0.2, "cap": 2}, "idempotency_key": f"chaos-{token}"})  # fmt: skip
            token += 1
        out = await live.call(lambda cl, s=specs: cl.submit_batch(s))
        for spec, job_id in zip(specs, out["ids"], strict=True):
            submitted[spec["idempotency_key"]] = job_id
        await asyncio.sleep(0.5)


async def _states(live: Live) -> dict[str, int]:
    """How many of the chaos queue's jobs are in each state."""
    queues = await live.call(lambda cl: cl.queues())
    return next((dict(q["counts"]) for q in queues if q["name"] == QUEUE), {})


async def _follow(c: Cluster, since: int, seen: list[int], gaps: list[dict[str, Any]]) -> None:
    """The event feed, moving to the other node when its node dies, resuming after the last seq."""
    last = since
    for turn in itertools.count():
        url = c.urls[turn % 2]
        try:
            async with JobDeckClient(url) as client:
                async for e in client.events(since=last, reconnect=False, control=True):
                    if e.get("type") == "stream.gap":
                        gaps.append(e)
                    elif e.get("seq") is not None:
                        seen.append(int(e["seq"]))
                        last = int(e["seq"])
        except (JobDeckError, OSError):
            pass
        await asyncio.sleep(0.2)
