"""The PostgreSQL store's claim from a queue whose jobs are chosen by key (core/flow.py `pick`): a
per-key concurrency limit, fair rotation between fairness keys. Runs in the claim's transaction,
under the queue's advisory lock (core/store/_pg_sql.py LOCK_QUEUES), so the per-key counts and the
rotation hold across every node.

A queue with a per-key limit and no fair rotation takes its next jobs in claim order, less those of
full keys, when that fills the claim (the usual case: what an unlimited claim reads). Otherwise, and in
a fair queue, the keys are read by a skip scan of jobs_claim_fair / jobs_claim_key (one index probe per
key), each key's next jobs in one LATERAL query, so a key with 100,000 jobs waiting is never read past.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncpg

from core.flow import (
    CANDIDATE_COLUMNS,
    FORGET_AFTER,
    MAX_KEYS,
    NULL_WINDOW,
    Candidate,
    KeyedClaim,
    QueueLimits,
    Rotation,
    Share,
    charge,
    forgettable,
    keyed_claim,
    keys_to_read,
)
from core.store._pg_sql import CLAIM_QUEUE, SELECT_JOB

if TYPE_CHECKING:
    from core.store._pg_writer import Conn

_LABELS = "(labels = '' OR string_to_array(labels, ',') <@ $2::text[])"


def _keys_sql(col: str) -> str:
    one = f"SELECT {col} FROM jobs WHERE state = 'queued' AND {col} IS NOT NULL AND queue = $1"
    return (f"WITH RECURSIVE k(key) AS ((SELECT min({col}) FROM jobs WHERE state = 'queued' AND {col} IS NOT NULL "
            f"AND queue = $1) UNION ALL SELECT ({one} AND {col} > k.key ORDER BY {col} LIMIT 1) FROM k "
            "WHERE k.key IS NOT NULL) SELECT key FROM k WHERE key IS NOT NULL LIMIT $2")  # fmt: skip


def _heads_sql(col: str) -> str:
    return (f"SELECT j.* FROM unnest($3::text[]) AS k(key) CROSS JOIN LATERAL (SELECT {CANDIDATE_COLUMNS} FROM jobs "
            "WHERE state = 'queued' "
            f"AND {col} IS NOT NULL AND queue = $1 AND {col} = k.key AND {_LABELS} ORDER BY sort_key, id LIMIT $4 "
            "FOR UPDATE SKIP LOCKED) AS j")  # fmt: skip


def _unkeyed_sql(col: str) -> str:
    window = f"SELECT id FROM jobs WHERE state = 'queued' AND queue = $1 ORDER BY sort_key, id LIMIT {NULL_WINDOW}"
    return (f"SELECT {CANDIDATE_COLUMNS} FROM jobs WHERE id IN (SELECT id FROM jobs WHERE id IN ({window}) "
            f"AND {col} IS NULL) "
            f"AND state = 'queued' AND {col} IS NULL AND {_LABELS} ORDER BY sort_key, id LIMIT $3 "
            "FOR UPDATE SKIP LOCKED")  # fmt: skip


SQL = {col: (_keys_sql(col), _heads_sql(col), _unkeyed_sql(col)) for col in ("fairness_key", "concurrency_key")}
RUNNING_BY_KEY = (
    "SELECT concurrency_key, count(*) FROM jobs WHERE state = 'running' AND concurrency_key IS NOT NULL "
    "AND queue = $1 GROUP BY concurrency_key"
)


async def _walk(c: Conn, queue: str, limits: QueueLimits, running: dict[str, int], offered: list[str],
                room: int) -> KeyedClaim | None:  # fmt: skip
    """A per-key limit without fair rotation: the queue's next `room` jobs in claim order (as an unlimited
    claim takes them), less those of full keys. None if that left room while more jobs wait: then each
    key's head is read instead (the rows read here stay this claim's until it commits)."""
    rows = await c.fetch(CLAIM_QUEUE, offered, [queue], room)
    counts, picked, kept = dict(running), [], []
    for r in rows:
        ck = r["concurrency_key"]
        if ck is not None and limits.key_concurrency is not None and counts.get(ck, 0) >= limits.key_concurrency:
            continue
        if ck is not None:
            counts[ck] = counts.get(ck, 0) + 1
        picked.append(Candidate(r["id"], r["sort_key"], r["priority"], r["fairness_key"], ck))
        kept.append(r)
    if len(picked) < room and len(rows) == room:
        return None
    return KeyedClaim(queue, limits, Rotation(), picked, kept)


async def pick_rows(c: Conn, queue: str, limits: QueueLimits, vtime: float, offered: list[str], room: int,
                    now: float, aging: float) -> KeyedClaim:  # fmt: skip
    """Read (and lock) each key's next queued jobs and `pick` up to `room` of them."""
    col = "fairness_key" if limits.fair else "concurrency_key"
    keys_sql, heads_sql, unkeyed_sql = SQL[col]
    running: dict[str, int] = {}
    if limits.key_concurrency is not None:
        running = {r[0]: int(r[1]) for r in await c.fetch(RUNNING_BY_KEY, queue)}
    if not limits.fair and (walked := await _walk(c, queue, limits, running, offered, room)) is not None:
        return walked
    rotation = Rotation(vtime, {})
    if limits.fair:
        rows = await c.fetch("SELECT key, served, last_at FROM fair_shares WHERE queue = $1", queue)
        rotation.shares = {r[0]: Share(r[1], r[2]) for r in rows}
    found = [r[0] for r in await c.fetch(keys_sql, queue, MAX_KEYS)]
    keys, per = keys_to_read(found, limits, running, rotation, room)
    by_key: dict[str | None, list[asyncpg.Record]] = {}
    for r in await c.fetch(heads_sql, queue, offered, keys, per) if keys else []:
        by_key.setdefault(r["fairness_key"] if limits.fair else r["concurrency_key"], []).append(r)
    if got := await c.fetch(unkeyed_sql, queue, offered, per):
        by_key[None] = list(got)
    claim = keyed_claim(queue, by_key, room, limits=limits, running=running, rotation=rotation, now=now, aging=aging)
    ids = [p.id for p in claim.picked]
    whole = {r[0]: r for r in await c.fetch(f"{SELECT_JOB} WHERE id = ANY($1::bigint[])", ids)} if ids else {}
    claim.rows = [whole[i] for i in ids]
    return claim


async def record(c: Conn, claim: KeyedClaim, claimed: set[int], now: float) -> None:
    """After the claim: charge the fair rotation with the picks that were claimed (a claim cut by the
    agent's slots starts fewer than it picked), and forget keys that are neither ahead nor recent."""
    if not claim.limits.fair:
        return
    started = [p for p in claim.picked if p.id in claimed]
    changed = sorted(charge(claim.rotation, started, claim.limits, now))
    shares = claim.rotation.shares or {}
    await c.execute(
        "INSERT INTO fair_shares (queue, key, served, last_at) SELECT $1, * FROM unnest($2::text[], $3::float8[], "
        "$4::float8[]) ON CONFLICT (queue, key) DO UPDATE SET served = excluded.served, last_at = excluded.last_at",
        claim.queue, changed, [shares[k].served for k in changed], [shares[k].last_at for k in changed],
    )  # fmt: skip
    await c.execute("UPDATE queues SET fair_vtime = $1 WHERE name = $2", claim.rotation.vtime, claim.queue)
    if forgettable(claim.rotation, now):
        await c.execute("DELETE FROM fair_shares WHERE queue = $1 AND served <= $2 AND last_at < $3",
                        claim.queue, claim.rotation.vtime, now - FORGET_AFTER)  # fmt: skip
