"""GET /v1/stats/slo on a real node: the pick-up objectives (p50 100 ms, p95 500 ms, p99 2 s) and the
success ratio over the last hour and day, from the jobs that finished in each window."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from core.client import JobDeckClient
from core.model import RunResult, build_job, decide_finish
from core.store.base import ClaimRequest
from tests.conftest import node_settings, start_node, stop_node
from tests.store.conftest import POLICY


async def ran(store: Any, latency: float, finished_ago: float, outcome: str = "succeeded", n: int = 1) -> None:
    """n jobs that started `latency` s after they were due and finished `finished_ago` s ago."""
    end = time.time() - finished_ago
    due = end - latency - 1
    spec = {"queue": "slo", "max_attempts": 1, "task": {"kind": "shell", "command": "true"}}
    made = [j for j, _ in await store.submit_jobs([build_job(spec, due, POLICY) for _ in range(n)])]
    ids = {j.id for j in made}
    claimed = [j for j in await store.claim_jobs(ClaimRequest("a", 1000, frozenset({"slo"})), due) if j.id in ids]

    def finish(job: Any) -> Any:
        res = RunResult(job.id, job.attempt, outcome, started_at=due + latency, finished_at=end)
        return decide_finish(job, res, end, POLICY)

    await store.change_jobs(dict.fromkeys([j.id for j in claimed], finish))


async def test_slo_windows_from_the_store(tmp_path: Path) -> None:
    node, url, task = await start_node(node_settings(tmp_path), local_agent=False)
    try:
        store = node.store
        await ran(store, 0.05, 60, n=10)  # within every limit
        await ran(store, 0.3, 60, n=6)  # within 500 ms and 2 s
        await ran(store, 3.0, 60, n=2)  # over 2 s
        await ran(store, 0.05, 60, outcome="failed", n=2)  # max_attempts 1: dead
        await ran(store, 0.05, 5 * 3600, n=30)  # in the day, not the hour
        async with JobDeckClient(url) as c:
            slo = await c.slo()
        assert slo["success_target"] == 0.99
        hour, day = slo["windows"]
        assert (hour["window"], hour["jobs"], hour["succeeded"], hour["dead"]) == ("1h", 20, 18, 2), hour
        by_pct = {p["percentile"]: p for p in hour["pickup"]}
        assert by_pct[50]["jobs_within"] == 12 and by_pct[50]["share"] == 0.6 and by_pct[50]["met"] is True
        assert by_pct[95]["jobs_within"] == 18 and by_pct[95]["met"] is False, by_pct[95]
        assert by_pct[99]["jobs_within"] == 18 and by_pct[99]["share"] == 0.9 and by_pct[99]["met"] is False
        assert hour["success_ratio"] == 0.9
        # 1 % of 20 ended jobs may fail (0.2); 2 did: the budget is overspent ten times over
        assert hour["error_budget_left"] == round(1 - 2 / 0.2, 4)
        assert hour["dead_allowed"] == 0.2
        assert (day["window"], day["jobs"], day["succeeded"]) == ("24h", 50, 48), day
        assert {p["percentile"]: p["jobs_within"] for p in day["pickup"]} == {50: 42, 95: 48, 99: 48}
    finally:
        await stop_node(node, task)


async def test_an_empty_store_has_no_figures_rather_than_zeros(tmp_path: Path) -> None:
    node, url, task = await start_node(node_settings(tmp_path), local_agent=False)
    try:
        async with JobDeckClient(url) as c:
            hour = (await c.slo())["windows"][0]
        assert hour["jobs"] == 0 and hour["success_ratio"] is None and hour["error_budget_left"] is None
        assert all(p["share"] is None and p["met"] is None for p in hour["pickup"])
    finally:
        await stop_node(node, task)
