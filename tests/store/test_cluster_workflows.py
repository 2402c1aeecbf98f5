"""Two `jobdeck server` processes on one PostgreSQL (+ Redis) and two agents. A fan-out/fan-in
workflow submitted to one node, which is SIGKILLed while parts of it run: the survivor reaps what the
dead node leased and the workflow still ends right (every job succeeded once, none started before its
parents' last run ended, none ran twice at once). A workflow schedule under cancel_previous across
one node's SIGKILL: each fire time cancels the whole previous workflow and starts the next only once
its jobs really stopped."""

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
from tests.conftest import ROOT, ServerProcess, recorder_task, run_spans, until
from tests.store.test_cluster_chaos import _agents_on_cluster, cluster
from tests.store.test_cluster_schedules import _all_ended

__all__ = ["cluster"]  # the fixture, shared with the chaos test
pytestmark = pytest.mark.timeout(150)
PARTS = 8


async def test_a_node_killed_mid_workflow_the_other_finishes_it_right(
    cluster: tuple[list[ServerProcess], list[subprocess.Popen[str]]], tmp_path: Path
) -> None:
    (a, b), _ = cluster
    task = recorder_task(tmp_path, 0.8)
    jobs: list[dict[str, Any]] = [{"ref": "extract", "task": task}]
    jobs += [{"ref": f"part{i}", "task": task, "depends_on": ["extract"]} for i in range(PARTS)]
    jobs += [{"ref": "load", "task": task, "depends_on": [f"part{i}" for i in range(PARTS)]}]
    async with JobDeckClient(a.url) as ca, JobDeckClient(b.url) as cb:
        await until(lambda: _agents_on_cluster(ca, cb, 2), 20, "both agents to register")
        made = await ca.submit_workflow("cluster-etl", jobs)
        wf_id, ids = made["workflow"]["id"], made["ids"]

        async def parts_running() -> bool:
            nodes = (await cb.get_workflow(wf_id))["nodes"]
            return any(n["state"] == "running" and n["ref"].startswith("part") for n in nodes)

        await until(parts_running, 30, "parts of the workflow running")
        a.kill()  # SIGKILL: the node that took the submit, mid-workflow
        killed_at = time.time()

        async def ended() -> bool:
            return (await cb.get_workflow(wf_id))["state"] != "running"

        await until(ended, 90, "the workflow to end on the surviving node")
        wf = await cb.get_workflow(wf_id)
        attempts = {r: await cb.attempts(i) for r, i in ids.items()}
    assert (wf["state"], wf["counts"]) == ("succeeded", {"succeeded": PARTS + 2}), wf
    for ref, tries in attempts.items():
        assert [t["outcome"] for t in tries].count("succeeded") == 1, (ref, tries)
    spans = run_spans(tmp_path, killed_at)
    assert set(spans) == set(ids.values()), f"every job ran: {sorted(spans)} vs {sorted(ids.values())}"
    for job, intervals in spans.items():
        intervals.sort()
        for (_, e1), (s2, _) in itertools.pairwise(intervals):
            assert s2 >= e1, f"job {job} ran twice at once: {intervals}"
    first_start = {j: min(s for s, _ in iv) for j, iv in spans.items()}
    last_end = {j: max(e for _, e in iv) for j, iv in spans.items()}
    for spec in jobs:
        for parent in spec.get("depends_on", []):
            child, par = ids[spec["ref"]], ids[parent]
            assert first_start[child] >= last_end[par], (
                f"{spec['ref']} started at {first_start[child]} before its parent {parent} ended at {last_end[par]}"
            )


async def test_cancel_previous_of_a_workflow_schedule_holds_across_two_nodes_with_one_killed(
    cluster: tuple[list[ServerProcess], list[subprocess.Popen[str]]], tmp_path: Path
) -> None:
    """Every 2 s a workflow (a short step, then one of 60 s that only ends by being cancelled): each
    fire time cancels the whole previous run; no step of a run starts before the last tick of the
    run before it, with both nodes firing and across one node's SIGKILL; every run ends cancelled and
    none counts as a failure."""
    (a, b), _ = cluster
    log = tmp_path / "ticks.log"

    def step(ref: str, seconds: float, *deps: str) -> dict[str, Any]:
        code = (
            f"import sys; from {TASKS} import record_ticks; record_ticks(sys.argv[1], sys.argv[2], float(sys.argv[3]))"
        )
        task = {"kind": "shell", "argv": [sys.executable, "-c", code, str(log), "wf", str(seconds)], "cwd": str(ROOT)}
        return {"ref": ref, "task": task, "max_attempts": 1, "depends_on": list(deps)}

    flow = {"name": "superseded", "jobs": [step("prep", 0.2), step("long", 60.0, "prep")]}
    async with JobDeckClient(a.url) as ca, JobDeckClient(b.url) as cb:
        await until(lambda: _agents_on_cluster(ca, cb, 2), 20, "both agents to register")
        s = await ca.create_schedule({"name": "wf-supersede", "interval": 2.0, "overlap": "cancel_previous",
                                      "workflow": flow})  # fmt: skip
        await until(lambda: len(runs_of(log, "wf")) >= 6, 45, "3 runs (6 steps) with both nodes firing")
        a.kill()
        killed_at = time.time()
        await until(lambda: len([r for r in runs_of(log, "wf") if r.start > killed_at]) >= 6, 60,
                    "3 more runs after the kill")  # fmt: skip
        await cb.schedule_action(s["id"], "pause")
        for w in (await cb.workflows())["workflows"]:
            if w["state"] == "running" and not w["cancel_requested"]:
                await cb._call("POST", f"/v1/workflows/{w['id']}/cancel")
        ended = await until(lambda: _all_ended(cb, s["id"]), 30, "every run to end once the schedule is paused")
        stopped_at = time.time()
        flows = (await cb.workflows())["workflows"]
        stored = await cb.get_schedule(s["id"])
    await until(lambda: time.time() > stopped_at + 0.5, 2, "a moment for a step that was not stopped to note more")
    steps = runs_of(log, "wf")
    for old, new in itertools.pairwise(steps):
        assert new.start > old.last, (
            f"a step started at {new.start:.3f} while the one before it still ran (it noted {old.last:.3f}; "
            f"killed at {killed_at:.3f}): {[(r.start, r.last) for r in steps]}"
        )
    assert all(r.last <= stopped_at for r in steps), "a step went on after its workflow was cancelled"
    fired = [j["fire_time"] for j in ended if j["fire_time"] is not None]
    assert len(fired) == len(set(fired)), f"a fire time made twice: {sorted(fired)}"
    assert {j["state"] for j in ended} == {"cancelled"}, [j["state"] for j in ended]
    assert {w["state"] for w in flows} == {"cancelled"}, [(w["id"], w["state"], w["counts"]) for w in flows]
    assert stored["failures"] == 0, f"a cancelled run is nobody's failure: {stored}"
