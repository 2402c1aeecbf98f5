"""Two nodes on PostgreSQL + Redis, two agents, 5,000 jobs and a cron firing every second;
one node is SIGKILLed in the middle. Nothing is lost, nothing runs twice at once, every fire
time is materialised exactly once, and the survivor's feed has every sequence number."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.client import JobDeckClient
from tests.conftest import ServerProcess, fire_times, spawn_agent, spawn_jobdeck, until
from tests.services import REDIS_URL, redis_problem

LEASES = {"JOBDECK_LEASE_SECONDS": "2", "JOBDECK_HEARTBEAT_SECONDS": "0.5", "JOBDECK_REAP_INTERVAL_SECONDS": "0.2"}


@pytest.fixture
def cluster(pg_url: str, tmp_path: Path) -> Iterator[tuple[list[ServerProcess], list[subprocess.Popen[str]]]]:
    problem = redis_problem()
    if problem:
        pytest.skip(problem)
    env = {"JOBDECK_DATABASE_URL": pg_url, "JOBDECK_REDIS_URL": REDIS_URL, **LEASES}
    nodes = [spawn_jobdeck(tmp_path / f"node{i}", "server", env=env) for i in (1, 2)]
    both = ",".join(n.url for n in nodes)
    agents = []
    for i, first in enumerate((both, ",".join(reversed(both.split(","))))):
        agents.append(spawn_agent(first, f"agent{i}", tmp_path, "--slots", "100", "--heartbeat", "0.5"))
    try:
        yield nodes, agents
    finally:
        for p in [*agents, *(n.proc for n in nodes)]:
            if p.poll() is None:
                p.kill()
                p.wait(10)


async def test_killing_a_node_loses_nothing_and_runs_nothing_twice(
    cluster: tuple[list[ServerProcess], list[subprocess.Popen[str]]], tmp_path: Path
) -> None:
    (a, b), _ = cluster
    runs = tmp_path / "runs.log"
    async with JobDeckClient(a.url) as ca, JobDeckClient(b.url) as cb:
        await until(lambda: _agents_on_cluster(ca, cb, 2), 20, "both agents to register")
        start = (await cb.health())["last_seq"]
        seen: list[int] = []
        feed = asyncio.create_task(_follow(cb, start, seen))
        # overlap allow: every fire time makes its job even while the last tick's job still runs
        # (the default, skip, records a busy tick as skipped), which is what this test counts.
        schedule = await ca.create_schedule({"name": "tick", "cron": "* * * * * *", "overlap": "allow",
                                            "job": {"task": {"kind": "python", "function": "agents.builtin:noop"}}})  # fmt: skip
        task = {"kind": "python", "function": "tests.agents.tasks_for_tests:record_run"}
        specs = [{"task": {**task, "args": [str(runs), i, 0.05]}, "max_attempts": 5, "backoff": {"base": 0.1}}
                 for i in range(5_000)]  # fmt: skip
        await ca.submit_batch(specs[:2_500])
        await cb.submit_batch(specs[2_500:])

        async def progressed() -> bool:
            return (await cb.stats())["by_state"].get("succeeded", 0) >= 1_500

        await until(progressed, 60, "1,500 jobs done before the kill")
        a.kill()  # SIGKILL node A in the middle of the work
        killed_at = time.time()

        async def all_done() -> dict[str, int] | None:
            by_state = (await cb.stats())["by_state"]
            return by_state if by_state.get("succeeded", 0) >= 5_000 + 1 else None

        await until(all_done, 120, "every job to succeed on the surviving node")
        before = len(await fire_times(cb, schedule["id"]))

        async def two_more_ticks() -> list[float] | None:
            fired = await fire_times(cb, schedule["id"])
            return fired if len(fired) >= before + 2 else None

        fired = await until(two_more_ticks, 10, "the survivor alone to fire the schedule twice more")
        last = (await cb.health())["last_seq"]
        await until(lambda: bool(seen) and seen[-1] >= last, 20, "the feed on node B to catch up")
        feed.cancel()

    # Nothing lost: every one of the 5,000 tasks finished a run.
    spans: dict[int, list[tuple[float, float]]] = {}
    open_runs: dict[int, float] = {}
    for line in runs.read_text().splitlines():
        what, token, t = line.split()
        if what == "start":
            assert int(token) not in open_runs, f"task {token} started again while its run was still going"
            open_runs[int(token)] = float(t)
        else:
            spans.setdefault(int(token), []).append((open_runs.pop(int(token)), float(t)))
    assert len(spans) == 5_000, f"{5_000 - len(spans)} jobs never finished a run"
    # Never two runs at once: a run cut off by the kill (no end line) ends at the kill at the latest.
    for token, t in open_runs.items():
        spans.setdefault(token, []).append((t, killed_at))
    for token, intervals in spans.items():
        intervals.sort()
        for (_, e1), (s2, _) in itertools.pairwise(intervals):
            assert s2 >= e1, f"task {token} ran twice at once: {intervals}"
    # Every fire time exactly once, one a second, none missing while a node lived.
    assert len(fired) == len(set(fired)), f"a fire time was materialised twice: {sorted(fired)}"
    ticks = sorted(fired)
    assert ticks == [ticks[0] + i for i in range(len(ticks))], f"missing fire times: {ticks}"
    # The survivor's feed: every sequence number, in order, none twice.
    expected = list(range(start + 1, seen[-1] + 1))
    assert seen == expected, (
        f"feed gaps: {sorted(set(expected) - set(seen))[:10]}, repeats: {len(seen) - len(set(seen))}"
    )


async def _agents_on_cluster(ca: JobDeckClient, cb: JobDeckClient, n: int) -> bool:
    return len(await ca.agents()) + len(await cb.agents()) >= n


async def _follow(client: JobDeckClient, since: int, seen: list[int]) -> None:
    async for e in client.events(since=since):
        seen.append(int(e["seq"]))
