"""The embedded store's claim from a queue whose jobs are chosen by key (core/flow.py `pick`): a per-key
concurrency limit, fair rotation between fairness keys. Runs in the writer's transaction (exact).

A queue with a per-key limit and no fair rotation is walked in claim order, skipping the jobs of full
keys, as long as few are skipped (the usual case: about what an unlimited claim reads). Otherwise, and
in a fair queue, each key's next jobs are read from its own index range (jobs_claim_fair /
jobs_claim_key), the keys themselves by a skip scan of that index, so a key with 100,000 jobs waiting
costs one index probe, not a walk past its backlog.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from typing import Any

import orjson

from core.flow import (
    CANDIDATE_COLUMNS,
    FORGET_AFTER,
    MAX_KEYS,
    NULL_WINDOW,
    TURN_KEYS,
    WALK_PAST,
    Candidate,
    KeyedClaim,
    KeyedPick,
    QueueLimits,
    Rotation,
    Share,
    charge,
    forgettable,
    keys_to_read,
)

_KEYS = """WITH RECURSIVE k(key) AS (
    SELECT (SELECT {col} FROM jobs INDEXED BY {index} WHERE state = 'queued' AND {col} IS NOT NULL
            AND queue = ?1 ORDER BY {col} LIMIT 1)
    UNION ALL
    SELECT (SELECT {col} FROM jobs INDEXED BY {index} WHERE state = 'queued' AND {col} IS NOT NULL
            AND queue = ?1 AND {col} > k.key ORDER BY {col} LIMIT 1) FROM k WHERE k.key IS NOT NULL
) SELECT key FROM k WHERE key IS NOT NULL LIMIT ?2"""


_HEADS = ("SELECT " + ", ".join(f"j.{c}" for c in CANDIDATE_COLUMNS.split(", ")) + ", k.value "
          "FROM json_each(?3) AS k JOIN jobs AS j ON j.id IN (SELECT h.id FROM jobs AS h INDEXED BY {index} "
          "WHERE h.state = 'queued' AND h.{col} IS NOT NULL AND h.queue = ?1 AND h.{col} = k.value "
          "AND (h.fire_time IS NULL OR h.run_at <= ?5) "
          "AND (h.labels = '' OR jobdeck_labels_ok(h.labels, ?2)) ORDER BY h.sort_key, h.id LIMIT ?4)")  # fmt: skip


@functools.lru_cache(maxsize=4)
def _positions(select_job: str) -> tuple[int, ...]:
    """Where a job row (`select_job`'s columns) has the columns of a Candidate."""
    cols = select_job[len("SELECT ") : select_job.index(" FROM ")].split(", ")
    return tuple(cols.index(name) for name in CANDIDATE_COLUMNS.split(", "))


def _walk(c: sqlite3.Connection, select_job: str, queue: str, limits: QueueLimits, running: dict[str, int],
          labels: str, room: int, now: float) -> KeyedClaim | None:  # fmt: skip
    """A per-key limit without fair rotation: walk the queue in claim order (its claim index, as an
    unlimited claim does), skipping jobs whose key is full, and stop at `room` picks. None if keys at
    their limit hold more than WALK_PAST of the first jobs: then each key's head is read instead, so a
    key with 100,000 waiting is never walked past."""
    limit, at = limits.key_concurrency, _positions(select_job)
    cur = c.execute(f"{select_job} INDEXED BY jobs_claim_queue WHERE state = 'queued' AND queue = ? "
                    "AND (fire_time IS NULL OR run_at <= ?) AND (labels = '' OR jobdeck_labels_ok(labels, ?)) "
                    "ORDER BY sort_key, id", (queue, now, labels))  # fmt: skip
    counts, picked, rows, skipped = dict(running), [], [], 0
    try:
        for r in cur:
            cand = Candidate(*(r[i] for i in at))
            ck = cand.concurrency_key
            if ck is not None and limit is not None and counts.get(ck, 0) >= limit:
                skipped += 1
                if skipped > WALK_PAST:
                    return None
                continue
            if ck is not None:
                counts[ck] = counts.get(ck, 0) + 1
            picked.append(cand)
            rows.append(r)
            if len(picked) >= room:
                break
    finally:
        cur.close()
    return KeyedClaim(queue, limits, Rotation(), picked, rows)


def pick_rows(c: sqlite3.Connection, select_job: str, queue: str, limits: QueueLimits, vtime: float, labels: str,
              room: int, now: float, aging: float) -> KeyedClaim:  # fmt: skip
    """Read each key's next queued jobs and `pick` up to `room` of them."""
    col, index = ("fairness_key", "jobs_claim_fair") if limits.fair else ("concurrency_key", "jobs_claim_key")
    running: dict[str, int] = {}
    if limits.key_concurrency is not None:
        running = dict(c.execute(
            "SELECT concurrency_key, count(*) FROM jobs INDEXED BY jobs_running_key WHERE state = 'running' "
            "AND concurrency_key IS NOT NULL AND queue = ? GROUP BY concurrency_key", (queue,)))  # fmt: skip
    if not limits.fair and (walked := _walk(c, select_job, queue, limits, running, labels, room, now)) is not None:
        return walked
    rotation = Rotation(vtime, {})
    if limits.fair:
        rows = c.execute("SELECT key, served, last_at FROM fair_shares WHERE queue = ?", (queue,))
        rotation.shares = {k: Share(s, at) for k, s, at in rows}
    found = [r[0] for r in c.execute(_KEYS.format(col=col, index=index), (queue, MAX_KEYS))]
    keys, per = keys_to_read(found, limits, running, rotation, room)
    heads = _HEADS.format(col=col, index=index)
    by_key: dict[str | None, list[Sequence[Any]]] = {}
    if keys:  # one statement: each key's next `per` jobs, from its own range of the index
        for r in c.execute(heads, (queue, labels, orjson.dumps(keys).decode(), per, now)):
            by_key.setdefault(r[-1], []).append(r[:-1])
    unkeyed = (f"SELECT {CANDIDATE_COLUMNS} FROM jobs WHERE id IN (SELECT id FROM (SELECT id, {col} FROM jobs "
               f"INDEXED BY jobs_claim_queue WHERE state = 'queued' AND queue = ? AND (fire_time IS NULL OR run_at <= ?) "
               "ORDER BY sort_key, id "
               f"LIMIT {NULL_WINDOW}) WHERE {col} IS NULL) AND (labels = '' OR jobdeck_labels_ok(labels, ?)) "
               "ORDER BY sort_key, id LIMIT ?")  # fmt: skip
    if got := c.execute(unkeyed, (queue, now, labels, per)).fetchall():
        by_key[None] = got
    picking = KeyedPick(queue, room, limits, running, rotation, now, aging, by_key, per)
    while more := picking.step():  # the pick ran these dry while more of them wait: read further, pick again
        for k, n in more.items():
            if k is None:
                by_key[None] = c.execute(unkeyed, (queue, now, labels, n)).fetchall()
            else:
                by_key[k] = [r[:-1] for r in c.execute(heads, (queue, labels, orjson.dumps([k]).decode(), n, now))]
    claim = picking.claim
    ids = [p.id for p in claim.picked]
    whole = {r[0]: r for r in c.execute(f"{select_job} WHERE id IN ({', '.join('?' * len(ids))})", ids)}
    claim.rows = [whole[i] for i in ids]
    return claim


_TURN_HEAD = (f"SELECT {CANDIDATE_COLUMNS} FROM jobs INDEXED BY jobs_claim_fair WHERE state = 'queued' "
              "AND fairness_key IS NOT NULL AND queue = ? AND fairness_key = ? AND (fire_time IS NULL OR run_at <= ?) "
              "ORDER BY sort_key, id LIMIT 1")  # fmt: skip
# The next job without a fairness key among the queue's first NULL_WINDOW (where a claim looks for them).
_TURN_UNKEYED = (f"SELECT {CANDIDATE_COLUMNS} FROM (SELECT {CANDIDATE_COLUMNS} FROM jobs INDEXED BY jobs_claim_queue "
                 "WHERE state = 'queued' AND queue = ? AND (fire_time IS NULL OR run_at <= ?) ORDER BY sort_key, id "
                 f"LIMIT {NULL_WINDOW}) WHERE fairness_key IS NULL LIMIT 1")  # fmt: skip


def turns(c: sqlite3.Connection, queue: str, now: float) -> tuple[Rotation, list[Candidate], bool]:
    """A fair queue's rotation and the next job of each of its first TURN_KEYS fairness keys with jobs
    waiting (core.flow.turn_order), and whether more keys wait: for `waiting_for`."""
    row = c.execute("SELECT fair_vtime FROM queues WHERE name = ?", (queue,)).fetchone()
    shares = c.execute("SELECT key, served, last_at FROM fair_shares WHERE queue = ?", (queue,))
    rotation = Rotation(row[0] if row else 0.0, {k: Share(s, at) for k, s, at in shares})
    keys = [r[0] for r in c.execute(_KEYS.format(col="fairness_key", index="jobs_claim_fair"), (queue, TURN_KEYS + 1))]
    heads = [Candidate(*h) for k in keys[:TURN_KEYS] if (h := c.execute(_TURN_HEAD, (queue, k, now)).fetchone())]
    if unkeyed := c.execute(_TURN_UNKEYED, (queue, now)).fetchone():
        heads.append(Candidate(*unkeyed))
    return rotation, heads, len(keys) > TURN_KEYS


def record(c: sqlite3.Connection, claim: KeyedClaim, claimed: set[int], now: float) -> None:
    """After the claim: charge the fair rotation with the picks that were claimed (a claim cut by
    the agent's slots starts fewer than it picked), and forget keys that are neither ahead nor recent."""
    if not claim.limits.fair:
        return
    started = [p for p in claim.picked if p.id in claimed]
    changed = charge(claim.rotation, started, claim.limits, now)
    shares = claim.rotation.shares or {}
    c.executemany(
        "INSERT OR REPLACE INTO fair_shares (queue, key, served, last_at) VALUES (?, ?, ?, ?)",
        [(claim.queue, k, shares[k].served, shares[k].last_at) for k in changed],
    )
    c.execute("UPDATE queues SET fair_vtime = ? WHERE name = ?", (claim.rotation.vtime, claim.queue))
    if forgettable(claim.rotation, now):
        c.execute("DELETE FROM fair_shares WHERE queue = ? AND served <= ? AND last_at < ?",
                  (claim.queue, claim.rotation.vtime, now - FORGET_AFTER))  # fmt: skip
