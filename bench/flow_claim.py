"""What one fair claim costs the store itself: `claim_jobs` called in this process (no server, agent or
event delivery), from a queue of no-ops without keys and from one whose jobs carry 100 fairness keys,
at a few claim sizes, the two queues in alternating rounds on the same store (a fresh SQLite file, or a
fresh PostgreSQL schema). Each figure is the median claim; the ratio is fair / plain of the same round.
The drain benchmark (bench/flow.py) says what this costs end to end; this one says where it is."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.context import RunContext
from bench.report import Figure, load_average
from core.model import Policy, build_job
from core.store.base import ClaimRequest

NAME = "flow claim"
QUEUED = 20_000  # jobs of each queue
KEYS = 100
ROOMS = (4, 32, 256)
CLAIMS = 30  # claims of each size, from each queue, per round
ROUNDS = 2
POLICY = Policy(aging_seconds_per_priority=60.0, lease_seconds=30.0)
NOOP = {"kind": "python", "function": "agents.builtin:noop"}


async def _fill(store: Any) -> None:
    now = time.time()
    for queue, keyed in (("plain", False), ("fair", True)):
        jobs = [build_job({"task": NOOP, "queue": queue, **({"fairness_key": f"k{i % KEYS}"} if keyed else {})},
                          now, POLICY) for i in range(QUEUED)]  # fmt: skip
        for i in range(0, len(jobs), 5_000):
            await store.submit_jobs(jobs[i : i + 5_000])


async def _claims(store: Any, queue: str, room: int) -> float:
    """The median seconds of CLAIMS claims of `room` jobs from `queue`."""
    times = []
    for _ in range(CLAIMS):
        req = ClaimRequest(agent="bench", limit=room, queues=frozenset([queue]))
        t = time.perf_counter()
        got = await store.claim_jobs(req, time.time())
        times.append(time.perf_counter() - t)
        if len(got) != room:
            raise RuntimeError(f"a claim of {room} from {queue!r} took {len(got)}")
    return statistics.median(times)


async def claim_cost(ctx: RunContext) -> list[Figure]:
    """Median claim time of a plain and a fair queue per claim size, and their ratio."""
    backend = ctx.backend
    async with backend.fresh("flow-claim") as env:
        with tempfile.TemporaryDirectory(prefix="flow-claim-", dir=ctx.servers.tmp_root) as tmp:
            if backend.kind == "sqlite":
                from core.store.sqlite import SQLiteStore

                store: Any = SQLiteStore(Path(tmp) / "claims.db", POLICY, on_commit=lambda events: None)
            else:
                from core.store.postgres import PostgresStore

                store = PostgresStore(env["JOBDECK_DATABASE_URL"], POLICY, on_commit=lambda events: None)
            await store.open()
            try:
                await _fill(store)
                got: dict[tuple[str, int], list[float]] = {}
                for _ in range(ROUNDS):
                    for room in ROOMS:
                        for queue in ("plain", "fair"):
                            got.setdefault((queue, room), []).append(await _claims(store, queue, room))
            finally:
                await store.close()
    figures = []
    for room in ROOMS:
        plain, fair = statistics.median(got[("plain", room)]), statistics.median(got[("fair", room)])
        ctx.progress(f"room {room}: plain {1e3 * plain:.2f} ms, fair {1e3 * fair:.2f} ms a claim")
        note = f"{QUEUED:,} queued in each queue, {KEYS} fairness keys; load {load_average()}"
        figures.append(Figure(NAME, f"claim of {room}, no keys", 1e3 * plain, "ms", None, note))
        figures.append(Figure(NAME, f"claim of {room}, {KEYS} fairness keys", 1e3 * fair, "ms", None, note))
        figures.append(Figure(NAME, f"claim of {room}, fair / plain", fair / plain, "x", None, "same rounds"))
    return figures
