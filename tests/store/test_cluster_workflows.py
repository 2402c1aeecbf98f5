"""Two `jobdeck server` processes on one PostgreSQL (+ Redis) and two agents; a fan-out/fan-in
workflow submitted to one node, which is SIGKILLed while parts of it run. The survivor reaps what the
dead node leased and the workflow still ends right: every job succeeded once, none started before its
parents' last run ended, none ran twice at once."""

from __future__ import annotations

import itertools
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from core.client import JobDeckClient
from tests.conftest import ServerProcess, recorder_task, run_spans, until
from tests.store.test_cluster_chaos import _agents_on_cluster, cluster

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
