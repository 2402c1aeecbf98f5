"""Pick-up latency history, split by why a job waited, kept by the claim transaction (migration 0017).

A job that became ready (due) and was claimed later waited for one of two reasons:

- **held**: its queue's own policy held it back: the queue was paused, or a claim found it at its
  concurrency or rate limit, after the job was ready;
- **slot**: it was ready and its queue would have let it go, but no agent had a free slot for it.

Each queue keeps `held_at`, the last time its policy held jobs back (set when it is resumed, and by
any claim that its limits cut short, at most once per `GRAIN`). A claimed job counts as held if it
was ready before `held_at + GRAIN`. Each claim batch adds its jobs to one row per (minute, node,
class, latency bucket) in `pickup_minutes`: one upsert per claim, not one per job, and each node
writes its own rows so nodes never contend. GET /v1/stats/history reads the sums for any range,
whatever the node's uptime; percentiles are estimated within the buckets (as Prometheus'
histogram_quantile does), so they are exact to a bucket's width.

Not counted as held: a per-key concurrency limit (it holds some of a queue's jobs, not the queue).
"""

from __future__ import annotations

import bisect
import sqlite3
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from core.model import iso

if TYPE_CHECKING:
    from core.model import Job
    from core.store._pg_writer import Conn

#: Upper bounds (seconds) of the latency buckets; a wait over the last falls in one more bucket.
BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
GRAIN = 0.25  # seconds: a limited queue's held_at is written at most this often
KEEP_SECONDS = 25 * 3600.0  # the longest range (24 h) and an hour to spare
CLASSES = ("held", "slot")
PERCENTILES = (50, 95, 99)

Cells = dict[tuple[int, int], list[float]]  # (held 0/1, bucket) -> [count, summed seconds]


def bucket_of(wait: float) -> int:
    """The latency bucket of a wait (seconds)."""
    return bisect.bisect_left(BOUNDS, wait)


def was_held(ready_at: float, held_at: float | None) -> bool:
    """True if the queue's policy held jobs back after this job was ready."""
    return held_at is not None and ready_at < held_at + GRAIN


def should_mark(held_at: float | None, now: float) -> bool:
    """True if a claim that its queue's limits cut short must write held_at (at most once per GRAIN)."""
    return held_at is None or now - held_at >= GRAIN


def cells_of(jobs: Iterable[Job], held_at: dict[str, float | None], now: float) -> Cells:
    """The claim's histogram cells from its jobs and their queues' held_at (read before the claim)."""
    cells: Cells = {}
    for j in jobs:
        wait = max(0.0, now - j.run_at)
        cell = cells.setdefault((int(was_held(j.run_at, held_at.get(j.queue))), bucket_of(wait)), [0, 0.0])
        cell[0] += 1
        cell[1] += wait
    return cells


# -- SQLite (the writer's transaction; one node)

SQLITE_ADD = (
    "INSERT INTO pickup_minutes (minute, node, held, bucket, n, seconds) VALUES (?, '', ?, ?, ?, ?) "
    "ON CONFLICT (minute, node, held, bucket) DO UPDATE SET n = n + excluded.n, seconds = seconds + excluded.seconds"
)
SQLITE_MARK = "UPDATE queues SET held_at = ? WHERE name = ?"


def sqlite_record(c: sqlite3.Connection, jobs: Sequence[Job], held_at: dict[str, float | None],
                  held: Iterable[str], now: float) -> None:  # fmt: skip
    """Add the claimed jobs to this minute's histogram, then mark the queues whose limits cut the claim."""
    if jobs:
        minute = int(now // 60)
        rows = [(minute, h, b, int(n), s) for (h, b), (n, s) in cells_of(jobs, held_at, now).items()]
        c.executemany(SQLITE_ADD, rows)
    marks = [(now, q) for q in held if should_mark(held_at.get(q), now)]
    if marks:
        c.executemany(SQLITE_MARK, marks)


def sqlite_history(c: sqlite3.Connection, since: float, bucket: float) -> list[tuple[int, int, int, int, float]]:
    """(held, interval number, latency bucket, count, summed seconds) since `since`."""
    sql = ("SELECT held, CAST(minute * 60 / ? AS INTEGER) AS b, bucket, sum(n), sum(seconds) FROM pickup_minutes "
           "WHERE minute >= ? GROUP BY held, b, bucket")  # fmt: skip
    return [(int(h), int(b), int(k), int(n), float(s)) for h, b, k, n, s in c.execute(sql, (bucket, since // 60))]


# -- PostgreSQL (the claim's transaction; each node its own rows)

# The class is decided in SQL from each queue's held_at in the claim's snapshot (taken under the
# capped queues' advisory locks), so a pause lifted or a limit met on another node counts too.
PG_ADD = """INSERT INTO pickup_minutes AS p (minute, node, held, bucket, n, seconds)
SELECT $1::bigint, $2::text, (CASE WHEN q.held_at IS NOT NULL AND t.ready < q.held_at + $3::float8 THEN 1 ELSE 0 END) AS h,
       t.bucket, count(*), sum(greatest(0, $4::float8 - t.ready))
FROM unnest($5::text[], $6::float8[], $7::smallint[]) AS t(queue, ready, bucket)
LEFT JOIN queues q ON q.name = t.queue
GROUP BY h, t.bucket
ON CONFLICT (minute, node, held, bucket) DO UPDATE SET n = p.n + excluded.n, seconds = p.seconds + excluded.seconds"""
PG_MARK = (
    "UPDATE queues SET held_at = $1::float8 WHERE name = ANY($2::text[]) "
    "AND (held_at IS NULL OR held_at <= $1::float8 - $3::float8)"
)


async def pg_record(c: Conn, node: str, jobs: Sequence[Job], held: Iterable[str], now: float) -> None:
    """Add the claimed jobs to this node's histogram row of the minute, then mark the limited queues."""
    if jobs:
        queues = [j.queue for j in jobs]
        ready = [j.run_at for j in jobs]
        buckets = [bucket_of(max(0.0, now - j.run_at)) for j in jobs]
        await c.execute(PG_ADD, int(now // 60), node, GRAIN, now, queues, ready, buckets)
    if marks := sorted(set(held)):
        await c.execute(PG_MARK, now, marks, GRAIN)


async def pg_history(c: Conn, since: float, bucket: float) -> list[tuple[int, int, int, int, float]]:
    """(held, interval number, latency bucket, count, summed seconds) since `since`."""
    rows = await c.fetch(
        "SELECT held, floor(minute * 60 / $1)::bigint AS b, bucket, sum(n), sum(seconds) FROM pickup_minutes "
        "WHERE minute >= $2 GROUP BY held, b, bucket",
        bucket,
        int(since // 60),
    )
    return [(int(r[0]), int(r[1]), int(r[2]), int(r[3]), float(r[4])) for r in rows]


# -- the view


def quantile(counts: Sequence[int], q: float) -> float | None:
    """The q-quantile (0..1) of a bucketed histogram, interpolated within its bucket; None if empty.
    Beyond the last bound it answers the last bound (the wait was at least that)."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            if i >= len(BOUNDS):
                return BOUNDS[-1]
            lower = BOUNDS[i - 1] if i else 0.0
            return lower + (BOUNDS[i] - lower) * max(0.0, rank - seen) / n
        seen += n
    return BOUNDS[-1]


def history_view(rows: Iterable[tuple[int, int, int, int, float]], now: float, span: float,
                 bucket: float) -> dict[str, Any]:  # fmt: skip
    """Pick-up latency per interval for each class: jobs claimed, mean and p50/p95/p99 in ms (None
    where no job of the class was claimed), every interval present."""
    bucket = max(60.0, bucket)  # the history is kept per minute
    last = int(now // bucket)
    first = int((now - span) // bucket) + 1
    width = last - first + 1
    hist = {c: [[0] * (len(BOUNDS) + 1) for _ in range(width)] for c in CLASSES}
    sums = {c: [0.0] * width for c in CLASSES}
    for held, b, k, n, s in rows:
        if first <= b <= last and 0 <= k <= len(BOUNDS):
            cls = CLASSES[0] if held else CLASSES[1]
            hist[cls][b - first][k] += n
            sums[cls][b - first] += s
    out: dict[str, Any] = {"bucket_seconds": int(bucket), "buckets": [iso(b * bucket) for b in range(first, last + 1)]}
    for cls in CLASSES:
        counts = [sum(h) for h in hist[cls]]
        series: dict[str, Any] = {"jobs": counts}
        series["mean_ms"] = [round(1000 * s / n, 1) if n else None for s, n in zip(sums[cls], counts, strict=True)]
        for p in PERCENTILES:
            # one job's wait is known exactly (its sum); more are estimated within their buckets
            values = (
                sums[cls][i] if n == 1 else quantile(h, p / 100)
                for i, (h, n) in enumerate(zip(hist[cls], counts, strict=True))
            )
            series[f"p{p}_ms"] = [None if v is None else round(1000 * v, 1) for v in values]
        out[cls] = series
    return out
