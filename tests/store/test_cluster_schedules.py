"""Two `jobdeck server` processes on one PostgreSQL (+ Redis), two agents, a schedule firing every
second whose run takes longer than that, under overlap skip; one server is SIGKILLed mid-way. The
runs (recorded by the task itself) never overlap, and every fire time is made or skipped once."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from core.client import JobDeckClient
from tests.agents.conftest import TASKS
from tests.agents.test_no_overlap import runs_of
from tests.conftest import ROOT, ServerProcess, fire_times, until
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


CANCEL_EVERY = 2.0  # the schedule's interval: each fire time finds the last run still going
LONG_RUN = 60.0  # a run's natural length: every run ends by being cancelled


async def test_cancel_previous_holds_across_two_server_processes_with_one_killed(
    cluster: tuple[list[ServerProcess], list[subprocess.Popen[str]]], tmp_path: Path
) -> None:
    """Each fire time cancels the run still going and starts the new one only once the old one has
    really stopped (the task's own ticks end before the next run's start), with both nodes firing,
    across one node's SIGKILL, whichever node the cancel and the release go through."""
    (a, b), _ = cluster
    log = tmp_path / "ticks.log"
    code = f"import sys; from {TASKS} import record_ticks; record_ticks(sys.argv[1], sys.argv[2], float(sys.argv[3]))"
    task = {"kind": "shell", "argv": [sys.executable, "-c", code, str(log), "tick", str(LONG_RUN)], "cwd": str(ROOT)}
    async with JobDeckClient(a.url) as ca, JobDeckClient(b.url) as cb:
        await until(lambda: _agents_on_cluster(ca, cb, 2), 20, "both agents to register")
        s = await ca.create_schedule({"name": "supersede", "interval": CANCEL_EVERY, "overlap": "cancel_previous",
                                      "job": {"task": task, "max_attempts": 1}})  # fmt: skip
        await until(lambda: len(runs_of(log, "tick")) >= 4, 40, "4 runs with both nodes firing")
        a.kill()  # SIGKILL: its loops stop wherever they are; its agent moves to the survivor
        killed_at = time.time()
        await until(lambda: len([r for r in runs_of(log, "tick") if r.start > killed_at]) >= 4, 60,
                    "4 more runs after the kill")  # fmt: skip
        await cb.schedule_action(s["id"], "pause")
        for j in (await cb.list_jobs(schedule_id=s["id"], limit=500))["jobs"]:
            if j["state"] not in ("succeeded", "dead", "cancelled"):
                await cb.job_action(j["id"], "cancel")
        ended = await until(lambda: _all_ended(cb, s["id"]), 30, "every run to end once the schedule is paused")
        stopped_at = time.time()
    await until(lambda: time.time() > stopped_at + 0.5, 2, "a moment for a run that was not stopped to note more")
    runs = runs_of(log, "tick")
    assert len(runs) >= 8, f"expected at least 8 runs, got {len(runs)}"
    for old, new in itertools.pairwise(runs):
        assert new.start > old.last, (
            f"a run started at {new.start:.3f} while the one before it still ran (it noted {old.last:.3f}; "
            f"killed at {killed_at:.3f}): {[(r.start, r.last) for r in runs]}"
        )
    assert all(r.last <= stopped_at for r in runs), "a run went on after its job was cancelled"
    fired = [j["fire_time"] for j in ended if j["fire_time"] is not None]
    assert len(fired) == len(set(fired)), f"a fire time made twice: {sorted(fired)}"
    states = [j["state"] for j in ended]
    assert set(states) <= {"cancelled"}, f"every run ends cancelled (superseded or stopped at the end): {states}"
    assert len(ended) >= len(runs), f"{len(runs)} runs noted but only {len(ended)} jobs"


async def _all_ended(c: JobDeckClient, schedule_id: int) -> list[dict[str, Any]] | None:
    jobs = (await c.list_jobs(schedule_id=schedule_id, limit=500))["jobs"]
    return jobs if jobs and all(j["state"] in ("succeeded", "dead", "cancelled") for j in jobs) else None
