"""The PostgreSQL store's claim from a queue whose jobs are chosen by key (core/flow.py `pick`): a
per-key concurrency limit, fair rotation between fairness keys. Runs in the claim's transaction,
under the queue's advisory lock (core/store/_pg_sql.py LOCK_QUEUES), so the per-key counts and the
rotation hold across every node.

A queue with a per-key limit and no fair rotation takes its next jobs in claim order, less those of
full keys, when that fills the claim (the usual case: what an unlimited claim reads). Otherwise, and in
a fair queue, the keys are read by a skip scan of jobs_claim_fair / jobs_claim_key (one index probe per
key), each key's next jobs in one LATERAL query, so a key with 100,000 jobs waiting is never read past.
A fair claim is two statements under the lock (the keys with the rotation's shares; every candidate,
whole and locked) and one after the pick (the rotation written back).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncpg

from core.flow import (
    FORGET_AFTER,
    MAX_KEYS,
    NULL_WINDOW,
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
from core.store._pg_sql import CLAIM_QUEUE, SELECT_JOB

if TYPE_CHECKING:
    from core.store._pg_writer import Conn

_FAIR, _KEY = "fairness_key", "concurrency_key"
_LABELS = "(labels = '' OR string_to_array(labels, ',') <@ $2::text[])"
# $6: now. A schedule's run written ahead waits for its run_at (see _pg_sql._CLAIMABLE).
_DUE = "(fire_time IS NULL OR run_at <= $6)"


def _keys_sql(col: str) -> str:
    """The queue's keys with jobs waiting (a skip scan: one index probe per key, in key order) and, in the
    same statement, a fair queue's rotation shares (if $3): rows (key, served, last_at, waiting)."""
    one = f"SELECT {col} FROM jobs WHERE state = 'queued' AND {col} IS NOT NULL AND queue = $1"
    # The first key by ORDER BY, not min(): with stale statistics min() walked jobs_claim (every queued job).
    keys = (f"WITH RECURSIVE k(key) AS (SELECT ({one} ORDER BY {col} LIMIT 1) UNION ALL SELECT ({one} AND {col} > "
            f"k.key ORDER BY {col} LIMIT 1) FROM k WHERE k.key IS NOT NULL), "
            "w AS (SELECT key FROM k WHERE key IS NOT NULL LIMIT $2) ")  # fmt: skip
    shares = "SELECT key, served, last_at, false FROM fair_shares WHERE queue = $1 AND $3 UNION ALL "
    return f"{keys}{shares}SELECT key, NULL::float8, NULL::float8, true FROM w"


def _heads_sql(col: str) -> str:
    """Each key's next `$4` queued jobs (a LATERAL probe per key, never past its backlog) and the next `$4`
    without a key, whole rows, locked: every candidate of the claim in one statement. (Reading candidates
    unlocked and then locking the picked ones was slower: one round trip more for fewer row locks.)"""
    # `key <= k.key AND key >= k.key`, not `=`: an equality drops the key out of the ORDER BY, and with
    # stale statistics the planner then took jobs_claim (sort_key, id) for the order, reading every queued
    # job for each key; as a range, jobs_claim_fair is the only plan that needs no sort.
    heads = (f"h AS (SELECT j.* FROM unnest($3::text[]) AS k(key) CROSS JOIN LATERAL ({SELECT_JOB} "
             f"WHERE state = 'queued' AND {col} IS NOT NULL AND queue = $1 AND {col} >= k.key AND {col} <= k.key "
             f"AND {_DUE} AND {_LABELS} ORDER BY {col}, sort_key, id LIMIT $4 FOR UPDATE SKIP LOCKED) AS j)")  # fmt: skip
    # Jobs without a key among the queue's first NULL_WINDOW queued jobs (its claim index, in order: `= ANY`
    # of a one-queue array keeps jobs_claim_queue the only sort-free plan, see CLAIM_QUEUE), each then read and
    # locked by its row address in that order (a TID scan: no index for the planner to get wrong). An ORDER
    # BY over the window's rows let the planner walk jobs_claim instead: every queued job of every queue.
    window = (f"w AS MATERIALIZED (SELECT t FROM (SELECT ctid AS t, {col} AS key FROM jobs WHERE state = 'queued' "
              f"AND queue = ANY($5::text[]) AND {_DUE} ORDER BY queue, sort_key, id LIMIT {NULL_WINDOW}) AS f "
              "WHERE key IS NULL)")  # fmt: skip
    unkeyed = (f"u AS (SELECT j.* FROM w CROSS JOIN LATERAL ({SELECT_JOB} WHERE ctid = w.t "
               f"AND {col} IS NULL AND state = 'queued' AND {_LABELS} FOR UPDATE SKIP LOCKED) AS j LIMIT $4)")  # fmt: skip
    return f"WITH {heads}, {window}, {unkeyed} SELECT * FROM h UNION ALL SELECT * FROM u"


SQL = {col: (_keys_sql(col), _heads_sql(col)) for col in ("fairness_key", "concurrency_key")}
RUNNING_BY_KEY = (
    "SELECT concurrency_key, count(*) FROM jobs WHERE state = 'running' AND concurrency_key IS NOT NULL "
    "AND queue = $1 GROUP BY concurrency_key"
)
# A fair claim's rotation after it, in one statement: the shares of the keys it started, the queue's
# virtual time, and (if $6) the keys neither ahead nor recent forgotten. The keys just written are not
# deleted (they are recent anyway; one statement must not change a row twice).
RECORD = (
    "WITH s AS (INSERT INTO fair_shares (queue, key, served, last_at) SELECT $1, * FROM unnest($2::text[], "
    "$3::float8[], $4::float8[]) ON CONFLICT (queue, key) DO UPDATE SET served = excluded.served, "
    "last_at = excluded.last_at), v AS (UPDATE queues SET fair_vtime = $5 WHERE name = $1) "
    "DELETE FROM fair_shares WHERE $6 AND queue = $1 AND served <= $5 AND last_at < $7 AND key <> ALL($2::text[])"
)


async def _walk(c: Conn, queue: str, limits: QueueLimits, running: dict[str, int], offered: list[str],
                room: int, now: float) -> KeyedClaim | None:  # fmt: skip
    """A per-key limit without fair rotation: the queue's next `room` jobs in claim order (as an unlimited
    claim takes them), less those of full keys. None if that left room while more jobs wait: then each
    key's head is read instead (the rows read here stay this claim's until it commits)."""
    rows = await c.fetch(CLAIM_QUEUE, offered, [queue], room, now)
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
    """Read (and lock) each key's next queued jobs and `pick` up to `room` of them: in a fair queue two
    statements under the queue's lock, the keys with the rotation's shares, then every candidate whole."""
    col = "fairness_key" if limits.fair else "concurrency_key"
    keys_sql, heads_sql = SQL[col]
    running: dict[str, int] = {}
    if limits.key_concurrency is not None:
        running = {r[0]: int(r[1]) for r in await c.fetch(RUNNING_BY_KEY, queue)}
    if not limits.fair and (walked := await _walk(c, queue, limits, running, offered, room, now)) is not None:
        return walked
    shares: dict[str, Share] = {}
    found = []
    for key, served, last_at, waiting in await c.fetch(keys_sql, queue, MAX_KEYS, limits.fair):
        if waiting:
            found.append(key)
        else:
            shares[key] = Share(served, last_at)
    rotation = Rotation(vtime, shares)
    keys, per = keys_to_read(found, limits, running, rotation, room)
    by_key: dict[str | None, list[tuple[int, float, int, str | None, str | None]]] = {}
    whole: dict[int, asyncpg.Record] = {}

    async def read(keys: list[str], per: int, keyless: bool) -> None:
        for r in await c.fetch(heads_sql, queue, offered, keys, per, [queue] if keyless else [], now):
            by_key.setdefault(r[col], []).append((r["id"], r["sort_key"], r["priority"], r[_FAIR], r[_KEY]))
            whole[r["id"]] = r

    await read(keys, per, True)
    picking = KeyedPick(queue, room, limits, running, rotation, now, aging, by_key, per)
    while more := picking.step():  # the pick ran these dry while more of them wait: read further, pick again
        # Rows read again are this claim's already (locked by it: SKIP LOCKED skips only other claims' rows).
        for n in sorted(set(more.values())):
            again = [k for k, m in more.items() if m == n]
            await read([k for k in again if k is not None], n, None in again)
    claim = picking.claim
    claim.rows = [whole[p.id] for p in claim.picked]
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
        RECORD, claim.queue, changed, [shares[k].served for k in changed], [shares[k].last_at for k in changed],
        claim.rotation.vtime, forgettable(claim.rotation, now), now - FORGET_AFTER,
    )  # fmt: skip
