"""The node-side cost of metrics and tracing per job, measured in this process: the hooks a job goes
through (claim, result, commits; the submit, wait, run and result spans with their export over
OTLP/HTTP), each set timed as CPU per job, best of a few repetitions. At a high machine load the
end-to-end drain ratios (bench/observability.py) swing by more than the 5-15 % they are meant to
resolve; these figures are what each feature adds to a job's CPU, whatever the rest of the machine does.
"""

from __future__ import annotations

import os
import time
from typing import Any

from core.model import Job, Policy, build_job
from core.obs.metrics import NodeMetrics
from core.obs.tracing import Tracing
from core.store.base import Event

JOBS = 2000
REPEATS = 3
CLAIM = 32  # jobs per claim and per result batch, as a busy node makes them


def _jobs() -> list[Job]:
    now = time.time()
    jobs = [build_job({"task": {"kind": "shell", "command": "true"}}, now, Policy()) for _ in range(JOBS)]
    for i, j in enumerate(jobs):
        j.id = i + 1
    return jobs


def metrics_us_per_job() -> float:
    """CPU (us) per job of the metrics hooks: its claim, its run's end, its 3 events, its share of commits."""
    m = NodeMetrics()
    jobs = _jobs()
    now = time.time()
    events = [Event(i, now, t, j.id, j.queue, b"{}") for i, j in enumerate(jobs)
              for t in ("job.created", "job.running", "job.succeeded")]  # fmt: skip
    best = float("inf")
    for _ in range(REPEATS):
        c0 = time.process_time()
        for k in range(0, JOBS, CLAIM):
            m.claimed(jobs[k : k + CLAIM], now + 0.01)
            m.store_commit(0.002)
        for k in range(0, JOBS, CLAIM):
            m.ran([(j.queue, "succeeded", now, now + 0.001) for j in jobs[k : k + CLAIM]])
        for k in range(0, len(events), 3 * CLAIM):
            m.committed(events[k : k + 3 * CLAIM])
        best = min(best, (time.process_time() - c0) / JOBS * 1e6)
    return best


def tracing_us_per_job(endpoint: str, sampler: str | None) -> float:
    """CPU (us) per job of tracing: a submit of its own (one trace per job), wait, run and result spans,
    exported over OTLP/HTTP to `endpoint` (the export thread's CPU included, the collector stand-in's not). `sampler`: an
    OTEL_TRACES_SAMPLER value, or None for JobDeck's default (core/obs/tracing.py)."""
    saved = {
        k: os.environ.get(k) for k in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_SAMPLER", "OTEL_BSP_MAX_QUEUE_SIZE")
    }
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    os.environ["OTEL_BSP_MAX_QUEUE_SIZE"] = "65536"  # every span exported, none dropped: all of the cost
    if sampler:
        os.environ["OTEL_TRACES_SAMPLER"] = sampler
    else:
        os.environ.pop("OTEL_TRACES_SAMPLER", None)
    try:
        from core.obs.tracing import tracing_for

        tracing: Tracing = tracing_for("otlp")
        from bench.observability import _Collector

        best = float("inf")
        for _ in range(REPEATS):
            jobs = _jobs()
            c0, collector0 = time.process_time(), _Collector.cpu
            _one_round(tracing, jobs)
            tracing.flush()
            time.sleep(0.05)  # the collector's last request thread has added its CPU
            # the collector stand-in runs in this process too: its CPU is the collector's, not the node's
            used = time.process_time() - c0 - (_Collector.cpu - collector0)
            best = min(best, used / JOBS * 1e6)
        tracing.shutdown()
        return best
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _one_round(tracing: Tracing, jobs: list[Job]) -> Any:
    for j in jobs:
        with tracing.submit(1) as traceparent:
            j.traceparent = traceparent
    for k in range(0, JOBS, CLAIM):
        tracing.claimed(jobs[k : k + CLAIM], time.time(), "a1")
    for j in jobs:
        with tracing.run(j.traceparent, j.id, 1, j.queue):
            pass
    for j in jobs:
        tracing.result(j, "succeeded", 1, time.time())
