"""Where a single submit's time goes, and what its slow ones wait on: `python -m bench.submit_stages [SECONDS]`.

An in-process node (no HTTP, no agent) takes sequential `engine.submit` calls for SECONDS. Each
submit is timed by stage (into the writer's queue, its ops and COMMIT, the hop back to the event
loop, the rest), and every submit over STALL_MS is matched with the WAL checkpoints and garbage
collections that overlapped it. It is a diagnosis, not a figure for the table: it wraps the
writer's functions to time them.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from core.config import load_settings
from core.node import Node
from core.store import _sqlite_writer as writer

STALL_MS = 30.0
STAGES = ("to the writer", "ops + COMMIT", "hop back to the loop", "the rest")


class _Timed:
    """A checkpointer connection whose wal_checkpoint calls are timed."""

    def __init__(self, conn: Any, spans: list[tuple[float, float]]) -> None:
        self._conn, self._spans = conn, spans

    def execute(self, sql: str, *args: Any) -> Any:
        t = time.perf_counter()
        out = self._conn.execute(sql, *args)
        if "wal_checkpoint" in sql:
            self._spans.append((t, time.perf_counter()))
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _LoopHandOff:
    """The writer's view of the event loop: notes when a commit hands its results back."""

    def __init__(self, loop: Any, marks: dict[str, float]) -> None:
        self._loop, self._marks = loop, marks

    def call_soon_threadsafe(self, *args: Any) -> Any:
        self._marks["committed"] = time.perf_counter()
        return self._loop.call_soon_threadsafe(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loop, name)


def _instrument(
    marks: dict[str, float], checkpoints: list[tuple[float, float]], gcs: list[tuple[float, float]]
) -> None:
    run, commit, deliver, connect = writer.Writer.run, writer.Writer._commit, writer._deliver, writer.connect

    def timed_run(self: Any, op: Any) -> Any:
        marks["queued"] = time.perf_counter()
        return run(self, op)

    def timed_commit(self: Any, *args: Any) -> Any:
        marks["begun"] = time.perf_counter()
        if not isinstance(self._loop, _LoopHandOff):
            self._loop = _LoopHandOff(self._loop, marks)
        return commit(self, *args)

    def timed_deliver(*args: Any) -> None:
        marks["delivered"] = time.perf_counter()
        deliver(*args)

    def timed_connect(path: Path, **kw: Any) -> Any:
        conn = connect(path, **kw)
        return _Timed(conn, checkpoints) if threading.current_thread().name.endswith("checkpoint") else conn

    writer.Writer.run, writer.Writer._commit, writer._deliver = timed_run, timed_commit, timed_deliver  # type: ignore[method-assign]
    writer.connect = timed_connect  # type: ignore[assignment]
    started: list[float] = []
    gc.callbacks.append(lambda phase, _: started.append(time.perf_counter()) if phase == "start"
                        else gcs.append((started.pop(), time.perf_counter())))  # fmt: skip


async def main(seconds: float) -> None:
    marks: dict[str, float] = {}
    checkpoints: list[tuple[float, float]] = []
    gcs: list[tuple[float, float]] = []
    _instrument(marks, checkpoints, gcs)
    node = Node(load_settings(environ={}, data_dir=Path(tempfile.mkdtemp(prefix="submit-stages-")), port=0))
    await node.start()
    spec = {"task": {"kind": "python", "function": "agents.builtin:noop"}, "queue": "stages"}
    rows: list[tuple[float, float, tuple[float, ...]]] = []
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            await node.engine.submit([spec])
            t1 = time.perf_counter()
            stages = (marks["begun"] - marks["queued"], marks["committed"] - marks["begun"],
                      marks["delivered"] - marks["committed"], t1 - marks["delivered"] + marks["queued"] - t0)  # fmt: skip
            rows.append((t0, t1, stages))
    finally:
        await node.stop()
    total = sorted(1000 * (b - a) for a, b, _ in rows)
    print(f"{len(rows):,} sequential submits: p50 {statistics.median(total):.2f} ms, "
          f"p99 {total[int(0.99 * (len(total) - 1))]:.2f} ms, max {total[-1]:.1f} ms")  # fmt: skip
    for i, name in enumerate(STAGES):
        print(f"  {name:22s} mean {1000 * statistics.mean(r[2][i] for r in rows):.3f} ms")
    slow = [r for r in rows if 1000 * (r[1] - r[0]) > STALL_MS]

    def overlapping(spans: list[tuple[float, float]], a: float, b: float) -> bool:
        return any(s < b and e > a for s, e in spans)

    largest = Counter(STAGES[max(range(4), key=lambda i: r[2][i])] for r in slow)
    print(f"{len(slow)} submits over {STALL_MS:g} ms; their largest stage: {dict(largest)}; "
          f"{sum(overlapping(checkpoints, a, b) for a, b, _ in slow)} overlapped a checkpoint "
          f"({len(checkpoints)} ran, max {max((1000 * (e - s) for s, e in checkpoints), default=0):.1f} ms), "
          f"{sum(overlapping(gcs, a, b) for a, b, _ in slow)} a garbage collection")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1]) if len(sys.argv) > 1 else 15.0))
