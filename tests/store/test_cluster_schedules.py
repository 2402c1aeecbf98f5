"""Two `jobdeck server` processes on one PostgreSQL (+ Redis), two agents, a schedule firing every
second whose run takes longer than that, under overlap skip; one server is SIGKILLed mid-way. The
runs (recorded by the task itself) never overlap, and every fire time is made or skipped once."""

from __future__ import annotations

import itertools
import subprocess
import time
from pathlib import Path

import pytest

from core.client import JobDeckClient
from tests.conftest import ServerProcess, fire_times, until
from tests.store.test_cluster_chaos import _agents_on_cluster, cluster

__all__ = ["cluster"]  # the fixture, shared with the chaos test
pytestmark = pytest.mark.timeout(120)
RUN_SECONDS = 1.3  # each run outlasts the next fire time: skip has to decide


def _runs(path: Path) -> tuple[list[tuple[float, float]], float | None]:
    """The finished runs (start, end), in order, and the start of one still going (or None); fails
    at once if a run started while another was going."""
    done: list[tuple[float, float]] = []
    going: float | None = None
    for line in path.read_text().splitlines() if path.exists() else []:
        what, _, t = line.split()
        if what == "start":
            assert going is None, f"a run started at {t} while the one from {going} was still going: {done}"
            going = float(t)
        else:
            assert going is not None, f"a run ended at {t} that never started"
            done.append((going, float(t)))
            going = None
    return done, going


async def test_skip_holds_across_two_server_processes_with_one_killed(
    cluster: tuple[list[ServerProcess], list[subprocess.Popen[str]]], tmp_path: Path
) -> None:
    (a, b), _ = cluster
    log = tmp_path / "runs.log"
    task = {"kind": "python", "function": "tests.agents.tasks_for_tests:record_run", "args": [str(log), 0, RUN_SECONDS]}
    async with JobDeckClient(a.url) as ca, JobDeckClient(b.url) as cb:
        await until(lambda: _agents_on_cluster(ca, cb, 2), 20, "both agents to register")
        s = await ca.create_schedule({"name": "slow-tick", "cron": "* * * * * *", "overlap": "skip",
                                      "job": {"task": task, "max_attempts": 5}})  # fmt: skip
        await until(lambda: len(_runs(log)[0]) >= 4, 40, "4 runs with both nodes firing")
        a.kill()  # SIGKILL: its loops stop wherever they are
        killed_at = time.time()
        await until(lambda: len(_runs(log)[0]) >= 8, 60, "4 more runs on the survivor")
        await cb.schedule_action(s["id"], "pause")
        made = await fire_times(cb, s["id"])
        skipped: list[float] = []
        async for e in cb.events(since=0, types=["schedule.skipped"], until_caught_up=True):
            if e.get("data", {}).get("schedule_id") == s["id"]:
                skipped += [float(t) for t in _epochs(e["data"]["fire_times"])]
        stored = await cb.get_schedule(s["id"])
    done, going = _runs(log)  # asserts no run started while another went
    assert len(made) == len(set(made)), f"a fire time made twice: {sorted(made)}"
    assert not set(made) & set(skipped), f"fire times both made and skipped: {sorted(set(made) & set(skipped))}"
    seen = sorted([*made, *skipped])
    span = int(seen[-1] - seen[0]) + 1  # every second from the first fire time to the last
    assert len(seen) + stored["missed"] == span, (
        f"{span} fire times: {len(made)} made + {len(skipped)} skipped + {stored['missed']} missed do not add up "
        f"(killed at {killed_at:.3f}): {seen}"
    )
    assert skipped, "every run outlasts a second: some fire times must have been skipped"
    assert stored["fired"] == len(made) and stored["skipped"] == len(skipped), (stored, len(made), len(skipped))
    spans = [*done, *([(going, time.time())] if going is not None else [])]
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, f"two runs at once: {spans}"


def _epochs(values: list[str]) -> list[float]:
    from datetime import datetime

    return [datetime.fromisoformat(v).timestamp() for v in values]
