"""The embedded store's claim from a queue whose jobs are chosen by key (core/flow.py `pick`): a per-key
concurrency limit, fair rotation between fairness keys. Runs in the writer's transaction (exact).

Each key's next jobs are read from its own index range (jobs_claim_fair / jobs_claim_key), the keys
themselves by a skip scan of that index, so a key with 100,000 jobs waiting costs one index probe,
not a walk past its backlog.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from core.flow import (
    CANDIDATE_COLUMNS,
    FORGET_AFTER,
    MAX_KEYS,
    NULL_WINDOW,
    KeyedClaim,
    QueueLimits,
    Rotation,
    Share,
    charge,
    keyed_claim,
    keys_to_read,
)

_KEYS = """WITH RECURSIVE k(key) AS (
    SELECT (SELECT {col} FROM jobs INDEXED BY {index} WHERE state = 'queued' AND {col} IS NOT NULL
            AND queue = ?1 ORDER BY {col} LIMIT 1)
    UNION ALL
    SELECT (SELECT {col} FROM jobs INDEXED BY {index} WHERE state = 'queued' AND {col} IS NOT NULL
            AND queue = ?1 AND {col} > k.key ORDER BY {col} LIMIT 1) FROM k WHERE k.key IS NOT NULL
) SELECT key FROM k WHERE key IS NOT NULL LIMIT ?2"""


def pick_rows(c: sqlite3.Connection, select_job: str, queue: str, limits: QueueLimits, vtime: float, labels: str,
              room: int, now: float, aging: float) -> KeyedClaim:  # fmt: skip
    """Read each key's next queued jobs and `pick` up to `room` of them."""
    col, index = ("fairness_key", "jobs_claim_fair") if limits.fair else ("concurrency_key", "jobs_claim_key")
    running: dict[str, int] = {}
    if limits.key_concurrency is not None:
        running = dict(c.execute(
            "SELECT concurrency_key, count(*) FROM jobs INDEXED BY jobs_running_key WHERE state = 'running' "
            "AND concurrency_key IS NOT NULL AND queue = ? GROUP BY concurrency_key", (queue,)))  # fmt: skip
    rotation = Rotation(vtime, {})
    if limits.fair:
        rows = c.execute("SELECT key, served, last_at FROM fair_shares WHERE queue = ?", (queue,))
        rotation.shares = {k: Share(s, at) for k, s, at in rows}
    found = [r[0] for r in c.execute(_KEYS.format(col=col, index=index), (queue, MAX_KEYS))]
    keys, per = keys_to_read(found, limits, running, rotation, room)
    heads = (f"SELECT {CANDIDATE_COLUMNS} FROM jobs INDEXED BY {index} WHERE state = 'queued' AND {col} IS NOT NULL "
             f"AND queue = ? AND {col} = ? AND (labels = '' OR jobdeck_labels_ok(labels, ?)) ORDER BY sort_key, id "
             "LIMIT ?")  # fmt: skip
    by_key: dict[str | None, list[Sequence[Any]]] = {}
    for k in keys:
        if got := c.execute(heads, (queue, k, labels, per)).fetchall():
            by_key[k] = got
    unkeyed = (f"SELECT {CANDIDATE_COLUMNS} FROM jobs WHERE id IN (SELECT id FROM (SELECT id, {col} FROM jobs "
               f"INDEXED BY jobs_claim_queue WHERE state = 'queued' AND queue = ? ORDER BY sort_key, id "
               f"LIMIT {NULL_WINDOW}) WHERE {col} IS NULL) AND (labels = '' OR jobdeck_labels_ok(labels, ?)) "
               "ORDER BY sort_key, id LIMIT ?")  # fmt: skip
    if got := c.execute(unkeyed, (queue, labels, per)).fetchall():
        by_key[None] = got
    claim = keyed_claim(queue, by_key, room, limits=limits, running=running, rotation=rotation, now=now, aging=aging)
    ids = [p.id for p in claim.picked]
    whole = {r[0]: r for r in c.execute(f"{select_job} WHERE id IN ({', '.join('?' * len(ids))})", ids)}
    claim.rows = [whole[i] for i in ids]
    return claim


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
    c.execute("DELETE FROM fair_shares WHERE queue = ? AND served <= ? AND last_at < ?",
              (claim.queue, claim.rotation.vtime, now - FORGET_AFTER))  # fmt: skip
