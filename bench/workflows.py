"""Benchmark: job dependencies (docs/workflows.md), each figure beside a baseline of the same run.

1. Resolution: two-job workflows (parent -> child) one after another. The issue's measure, the
   last parent's result committed -> the child queued, comes from the two jobs' events (their
   commit times); it is one transaction by design, so it is 0 when the store does what it says.
   What a user waits, the parent's end -> the child's start on an agent (both agent clock), is
   shown beside the pick-up latency of plain jobs (submit -> start) measured in the same run.
2. A 10,000-job fan-out/fan-in workflow (a root, 9,998 jobs that wait for it, a sink that waits
   for them all): the submit call, and submit -> the sink's end, beside a 10,000-job
   POST /v1/jobs/batch of plain no-op jobs on the same server: its call, and its last job's end.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.context import RunContext
from bench.report import Figure, Floor, percentile
from bench.server import BenchError
from bench.workload import BenchClient, epoch, noop_job, wait_for_state

NAME = "workflows"
RESOLUTION_FLOOR = Floor("<=", 10.0)  # ms, p99: result committed -> child queued (the floor)
FAN_SUBMIT_FLOOR = Floor("<=", 1.0)  # s: the 10,000-job workflow submitted
ROUNDS = 200
FAN = 10_000
SLOTS = 64


async def _wait_job(client: BenchClient, job_id: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = await client.get_job(job_id)
        if job["state"] in ("succeeded", "dead", "cancelled"):
            return job  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            raise BenchError(f"job {job_id} still {job['state']} after {timeout:.0f} s")
        await asyncio.sleep(0.005)


def _event_ts(events: list[dict[str, Any]], type_: str) -> float:
    for e in events:
        if e["type"] == type_:
            return epoch(e["ts"])
    raise BenchError(f"no {type_} event among {[e['type'] for e in events]}")


async def resolution(ctx: RunContext) -> list[Figure]:
    rounds = max(20, ROUNDS // (4 if ctx.scale.e2e_jobs <= 5_000 else 1))
    async with ctx.server("workflows-resolution", SLOTS) as (_srv, client):
        for _ in range(5):  # warm-up: the agent imports the task module once
            await _wait_job(client, (await client.submit(noop_job("warm")))["id"], ctx.scale.stall_seconds)
        pickup: list[float] = []
        for _ in range(rounds):  # baseline: plain jobs, submit -> start
            job = await _wait_job(client, (await client.submit(noop_job("plain")))["id"], ctx.scale.stall_seconds)
            pickup.append((epoch(job["started_at"]) - epoch(job["created_at"])) * 1000)
        commit_gap: list[float] = []
        handoff: list[float] = []
        for i in range(rounds):
            out = await client.submit_workflow(f"pair-{i}", [
                {"ref": "parent", **noop_job("pair")}, {"ref": "child", "depends_on": ["parent"], **noop_job("pair")},
            ])  # fmt: skip
            child = await _wait_job(client, out["ids"]["child"], ctx.scale.stall_seconds)
            parent = await client.get_job(out["ids"]["parent"])
            done = _event_ts(await client.job_events(parent["id"]), "job.succeeded")
            queued = _event_ts(await client.job_events(child["id"]), "job.queued")
            commit_gap.append((queued - done) * 1000)
            handoff.append((epoch(child["started_at"]) - epoch(parent["finished_at"])) * 1000)
    pickup.sort()
    commit_gap.sort()
    handoff.sort()
    ctx.progress(f"resolution: commit -> queued p99 {percentile(commit_gap, 99):.2f} ms; parent end -> child start "
                 f"p50 {percentile(handoff, 50):.1f} ms (plain pick-up p50 {percentile(pickup, 50):.1f} ms)")  # fmt: skip

    def ratio(p: float) -> str:
        return f"x{percentile(handoff, p) / max(percentile(pickup, p), 1e-9):.2f} of plain pick-up p{p:g} " \
               f"({percentile(pickup, p):.1f} ms)"  # fmt: skip

    return [
        Figure(NAME, "last parent's result committed -> child queued, p50", percentile(commit_gap, 50), "ms"),
        Figure(
            NAME,
            "last parent's result committed -> child queued, p99",
            percentile(commit_gap, 99),
            "ms",
            RESOLUTION_FLOOR,
            f"{rounds} parent -> child workflows, one at a time",
        ),
        Figure(
            NAME, "parent's end -> child's start (agent clock), p50", percentile(handoff, 50), "ms", None, ratio(50)
        ),
        Figure(
            NAME, "parent's end -> child's start (agent clock), p99", percentile(handoff, 99), "ms", None, ratio(99)
        ),
    ]


def _fan(n: int) -> list[dict[str, Any]]:
    middle = [{"ref": f"m{i}", "depends_on": ["root"], **noop_job("fan")} for i in range(n - 2)]
    sink = {"ref": "sink", "depends_on": [m["ref"] for m in middle], **noop_job("fan")}
    return [{"ref": "root", **noop_job("fan")}, *middle, sink]


async def fan_out_in(ctx: RunContext) -> list[Figure]:
    n = FAN if ctx.scale.e2e_jobs > 5_000 else 2_000
    async with ctx.server("workflows-fan", SLOTS * 4) as (_srv, client):
        await _wait_job(client, (await client.submit(noop_job("warm")))["id"], ctx.scale.stall_seconds)
        plain = [noop_job("plain-batch") for _ in range(n)]
        t0 = time.perf_counter()
        made = await client.submit_batch(plain)
        batch_call = time.perf_counter() - t0
        await wait_for_state(client, "plain-batch", "succeeded", made["created"], poll=0.05,
                             stall=ctx.scale.stall_seconds)  # fmt: skip
        batch_e2e = time.perf_counter() - t0
        spec = _fan(n)
        t0 = time.perf_counter()
        out = await client.submit_workflow("fan", spec)
        fan_call = time.perf_counter() - t0
        # every job of the workflow succeeded (polled with stall detection, like the batch: no fixed deadline)
        await wait_for_state(client, "fan", "succeeded", n, poll=0.05, stall=ctx.scale.stall_seconds)
        fan_e2e = time.perf_counter() - t0
        sink = await client.get_job(out["ids"]["sink"])
        wf = await client.get_workflow(out["workflow"]["id"])
    if sink["state"] != "succeeded" or wf["state"] != "succeeded":
        raise BenchError(f"the fan workflow ended {wf['state']} (sink {sink['state']}): {wf['counts']}")
    ctx.progress(f"fan {n:,}: submit {fan_call:.2f} s (batch {batch_call:.2f} s), end {fan_e2e:.2f} s "
                 f"(batch {batch_e2e:.2f} s)")  # fmt: skip
    return [
        Figure(
            NAME,
            f"{n:,}-job fan-out/fan-in workflow: POST /v1/workflows",
            fan_call,
            "s",
            FAN_SUBMIT_FLOOR,
            f"x{fan_call / batch_call:.2f} of a {n:,}-job POST /v1/jobs/batch ({batch_call:.2f} s)",
        ),
        Figure(
            NAME,
            f"{n:,}-job fan-out/fan-in workflow: submit -> sink done",
            fan_e2e,
            "s",
            None,
            f"x{fan_e2e / batch_e2e:.2f} of the same batch, submit -> last done ({batch_e2e:.2f} s); {SLOTS * 4} slots",
        ),
    ]
