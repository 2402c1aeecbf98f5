"""The PostgreSQL store's flow control in a claim: what it may take of its limited queues (core/flow.py), and
which jobs of a queue chosen by key (`pick`: a per-key concurrency limit, fair rotation between keys).

Every count runs under the queues' advisory locks (TRY_WAITING, LOCK_QUEUES) and adds the open
reservations of other claims to the running jobs in one statement (one snapshot), so a limit holds
across nodes, exactly. A claim takes the locks in one of two ways:

- In its own transaction, when every lock is free at once (the usual case on one node): it counts,
  picks, claims and writes the bucket and the rotation back (`settle`) in the writer's transaction,
  holding the locks to its commit. No reservation is written: no other claim counts meanwhile.
- Through a reservation, once a node found a lock taken (another node claims the queue too): `reserve`,
  a short transaction of its own under the locks, counts, picks, takes the rate tokens, charges the
  rotation and writes a reservation per queue (claim_reservations: how many, and a keyed queue's picked
  job ids and their keys), and commits at once; the lock is held a few statements, not through the
  claim's job updates, the rest of its batch and its commit. The claim then takes at most that many
  (exactly those jobs, for a keyed queue) in the writer's transaction, and marks each reservation used
  there: the reservation stops counting in the same commit as its jobs start running. A reservation's
  unused starts go back to the bucket when the next claim of its queue folds it away; one a dead node
  left open counts until RESERVED_FOR has passed, and a claim that finds its reservation taken back
  starts none of it. The reservation commits without waiting for the disk (synchronous_commit off): a
  claim's own commit, which waits, is later in the log, so no claim survives a crash that its
  reservation did not.

A queue with a per-key limit and no fair rotation takes its next jobs in claim order, less those of
full keys, when that fills the claim (the usual case: what an unlimited claim reads). Otherwise, and in
a fair queue, the keys are read by a skip scan of jobs_claim_fair / jobs_claim_key (one index probe per
key), each key's next jobs in one LATERAL query, so a key with 100,000 jobs waiting is never read past.
Jobs another claim reserved are passed over.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from core.flow import (
    CANDIDATE_COLUMNS,
    FORGET_AFTER,
    MAX_KEYS,
    NULL_WINDOW,
    RESERVED_FOR,
    TURN_KEYS,
    Bucket,
    Candidate,
    KeyedClaim,
    KeyedPick,
    QueueLimits,
    Rotation,
    Share,
    charge,
    claim_room,
    forgettable,
    keys_to_read,
)
from core.store._pg_sql import INDEX_ORDER_ONLY, JOB_COLUMNS, LOCK_QUEUES, SELECT_JOB, TRY_WAITING, loads

if TYPE_CHECKING:
    from core.store._pg_writer import Conn

_FAIR, _KEY = "fairness_key", "concurrency_key"
_LABELS = "(labels = '' OR string_to_array(labels, ',') <@ $2::text[])"
# $6: now. A schedule's run written ahead waits for its run_at (see _pg_sql._CLAIMABLE).
_DUE = "(fire_time IS NULL OR run_at <= $6)"
_CANDIDATE = f"SELECT {CANDIDATE_COLUMNS} FROM jobs"


def _key_scan(col: str) -> str:
    """`WITH` the queue's ($1) first $2 keys with jobs waiting as `w` (a skip scan: one index probe per key,
    in key order)."""
    one = f"SELECT {col} FROM jobs WHERE state = 'queued' AND {col} IS NOT NULL AND queue = $1"
    # The first key by ORDER BY, not min(): with stale statistics min() walked jobs_claim (every queued job).
    return (f"WITH RECURSIVE k(key) AS (SELECT ({one} ORDER BY {col} LIMIT 1) UNION ALL SELECT ({one} AND {col} > "
            f"k.key ORDER BY {col} LIMIT 1) FROM k WHERE k.key IS NOT NULL), "
            "w AS (SELECT key FROM k WHERE key IS NOT NULL LIMIT $2) ")  # fmt: skip


def _keys_sql(col: str) -> str:
    """The queue's keys with jobs waiting (_key_scan) and, in the same statement, a fair queue's rotation
    shares (if $3): rows (key, served, last_at, waiting)."""
    keys = _key_scan(col)
    shares = "SELECT key, served, last_at, false FROM fair_shares WHERE queue = $1 AND $3 UNION ALL "
    return f"{keys}{shares}SELECT key, NULL::float8, NULL::float8, true FROM w"


def _heads_sql(col: str, whole: bool) -> str:
    """Each key's next `$4` queued jobs (a LATERAL probe per key, never past its backlog) and the next `$4`
    without a key, passing over the jobs other claims reserved ($7): every candidate of the pick in one
    statement. For a reservation, as candidates, unlocked: the queue's lock keeps other picks out, and
    the claim locks (and checks) the jobs it picked. In the claim's own transaction, `whole` rows, locked
    (SKIP LOCKED skips only other transactions' rows: one read again is this claim's already)."""
    select, lock = (SELECT_JOB, " FOR UPDATE SKIP LOCKED") if whole else (_CANDIDATE, "")
    # `key <= k.key AND key >= k.key`, not `=`: an equality drops the key out of the ORDER BY, and with
    # stale statistics the planner then took jobs_claim (sort_key, id) for the order, reading every queued
    # job for each key; as a range, jobs_claim_fair is the only plan that needs no sort.
    heads = (f"h AS (SELECT j.* FROM unnest($3::text[]) AS k(key) CROSS JOIN LATERAL ({select} "
             f"WHERE state = 'queued' AND {col} IS NOT NULL AND queue = $1 AND {col} >= k.key AND {col} <= k.key "
             f"AND {_DUE} AND {_LABELS} AND id <> ALL($7::bigint[]) ORDER BY {col}, sort_key, id LIMIT $4{lock}) AS j)")  # fmt: skip
    # Jobs without a key among the queue's first NULL_WINDOW queued jobs (its claim index, in order: `= ANY`
    # of a one-queue array keeps jobs_claim_queue the only sort-free plan, see CLAIM_QUEUE), each then read by
    # its row address in that order (a TID scan: no index for the planner to get wrong). An ORDER BY over the
    # window's rows let the planner walk jobs_claim instead: every queued job of every queue.
    window = (f"w AS MATERIALIZED (SELECT t FROM (SELECT ctid AS t, {col} AS key FROM jobs WHERE state = 'queued' "
              f"AND queue = ANY($5::text[]) AND {_DUE} ORDER BY queue, sort_key, id LIMIT {NULL_WINDOW}) AS f "
              "WHERE key IS NULL)")  # fmt: skip
    unkeyed = (f"u AS (SELECT j.* FROM w CROSS JOIN LATERAL ({select} WHERE ctid = w.t "
               f"AND {col} IS NULL AND state = 'queued' AND {_LABELS} AND id <> ALL($7::bigint[]){lock}) AS j LIMIT $4)")  # fmt: skip
    return f"WITH {heads}, {window}, {unkeyed} SELECT * FROM h UNION ALL SELECT * FROM u"


# A fair queue's first $2 fairness keys with jobs waiting (the skip scan of _keys_sql) and each one's next
# job (a LATERAL probe per key), the next job without a key among its first NULL_WINDOW (as a claim looks
# for them; $4: the queue as an array, see _heads_sql), and the rotation: rows (candidate..., NULL) and one
# (NULLs..., fair_vtime).
TURNS = (f"{_key_scan(_FAIR)}SELECT h.*, NULL::float8 FROM w CROSS JOIN LATERAL ({_CANDIDATE} WHERE state = 'queued' "
         "AND fairness_key IS NOT NULL AND queue = $1 AND fairness_key >= w.key AND fairness_key <= w.key "
         "AND (fire_time IS NULL OR run_at <= $3) ORDER BY fairness_key, sort_key, id LIMIT 1) AS h "
         f"UNION ALL (SELECT *, NULL::float8 FROM ({_CANDIDATE} WHERE state = 'queued' AND queue = ANY($4::text[]) "
         f"AND (fire_time IS NULL OR run_at <= $3) ORDER BY queue, sort_key, id LIMIT {NULL_WINDOW}) AS f "
         "WHERE fairness_key IS NULL LIMIT 1) "
         "UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, fair_vtime FROM queues WHERE name = $1")  # fmt: skip


async def turns(c: Conn, queue: str, now: float) -> tuple[Rotation, list[Candidate], bool]:
    """A fair queue's rotation and the next job of each of its first TURN_KEYS fairness keys with jobs
    waiting (core.flow.turn_order), and whether more keys wait: for `waiting_for`."""
    async with c.transaction():  # sorting priced out, as in the claim: a key's backlog is never read whole
        await c.execute(INDEX_ORDER_ONLY)
        rows = await c.fetch(TURNS, queue, TURN_KEYS + 1, now, [queue])
        shares = await c.fetch("SELECT key, served, last_at FROM fair_shares WHERE queue = $1", queue)
    vtime = next((r[5] for r in rows if r[0] is None), None) or 0.0
    heads = [Candidate(*r[:5]) for r in rows if r[0] is not None]
    keyed = [h for h in heads if h.fairness_key is not None]
    rotation = Rotation(vtime, {k: Share(s, at) for k, s, at in shares})
    return rotation, keyed[:TURN_KEYS] + [h for h in heads if h.fairness_key is None], len(keyed) > TURN_KEYS


#: (col, whole) -> (keys, heads): see `_heads_sql` for `whole`
SQL = {(col, whole): (_keys_sql(col), _heads_sql(col, whole)) for col in (_FAIR, _KEY) for whole in (False, True)}
# A per-key queue's next `$3` jobs in claim order (as CLAIM_QUEUE walks them), less those reserved ($5):
# candidates for a reservation, whole rows locked in the claim's own transaction.
_WALK = (
    "WHERE state = 'queued' AND (fire_time IS NULL OR run_at <= $4) "
    "AND (labels = '' OR string_to_array(labels, ',') <@ $1::text[]) AND queue = ANY($2::text[]) "
    "AND id <> ALL($5::bigint[]) ORDER BY queue, sort_key, id LIMIT $3"
)
WALK = {False: f"{_CANDIDATE} {_WALK}", True: f"{SELECT_JOB} {_WALK} FOR UPDATE SKIP LOCKED"}
_AS_CANDIDATE = [JOB_COLUMNS.index(c) for c in CANDIDATE_COLUMNS.split(", ")]  # a whole row's candidate fields
# Under the queues' locks, in one statement (one snapshot: a claim that commits between two statements
# would count in neither): reservations done with deleted (used: their claims committed; or open past
# their expiry, a dead node's, unless its claim is committing right now and holds it), and each queue's
# limits with what holds them: running jobs plus the starts of the reservations still open (and, with a
# per-key limit, the same per key, as JSON); the unused starts of those just deleted (back to the
# bucket); and the jobs open reservations picked.
ROOMS = (
    "WITH f AS (DELETE FROM claim_reservations WHERE id IN (SELECT id FROM claim_reservations WHERE queue = "
    "ANY($1::text[]) AND (used IS NOT NULL OR expires_at < $2) FOR UPDATE SKIP LOCKED) "
    "RETURNING id, queue, jobs - coalesce(used, 0) AS unused), "
    "r AS (SELECT * FROM claim_reservations WHERE queue = ANY($1::text[]) AND used IS NULL "
    "AND id NOT IN (SELECT id FROM f)) "
    "SELECT q.name, q.paused, q.concurrency, q.rate_limit, q.rate_burst, q.rate_tokens, q.rate_at, "
    "q.key_concurrency, q.fairness_weights, q.fair, q.fair_vtime, "
    "(SELECT count(*) FROM jobs j WHERE j.state = 'running' AND j.queue = q.name) "
    "+ (SELECT coalesce(sum(r.jobs), 0) FROM r WHERE r.queue = q.name), "
    "(SELECT coalesce(sum(f.unused), 0) FROM f WHERE f.queue = q.name), "
    "(SELECT coalesce(array_agg(i), '{}') FROM r CROSS JOIN LATERAL unnest(r.ids) AS i WHERE r.queue = q.name), "
    "CASE WHEN q.key_concurrency IS NOT NULL THEN (SELECT json_object_agg(k, n) FROM (SELECT k, sum(n) AS n FROM "
    "(SELECT concurrency_key AS k, count(*) AS n FROM jobs WHERE state = 'running' AND concurrency_key IS NOT NULL "
    "AND queue = q.name GROUP BY 1 UNION ALL SELECT k, count(*) FROM r CROSS JOIN LATERAL unnest(r.keys) AS k "
    "WHERE r.queue = q.name AND k IS NOT NULL GROUP BY 1) AS s GROUP BY k) AS t) END "
    "FROM queues q WHERE q.name = ANY($1::text[])"
)
# What a claim changes of its queues' flow state, in one statement (one round trip): each queue's rate
# bucket and fair virtual time (NULL: left as it is; one UPDATE, so no row is changed twice), the shares of
# the keys it started (queue, key), and the keys of the queues given in $9 (those that have some) that are
# neither ahead ($10: the queue's virtual time) nor recent ($11) forgotten, except those just written.
_SAVE = (
    "WITH b AS (UPDATE queues AS q SET rate_tokens = coalesce(v.tokens, q.rate_tokens), "
    "rate_at = coalesce(v.at, q.rate_at), fair_vtime = coalesce(v.vtime, q.fair_vtime) FROM unnest($1::text[], "
    "$2::float8[], $3::float8[], $4::float8[]) AS v(name, tokens, at, vtime) WHERE q.name = v.name), "
    "s AS (INSERT INTO fair_shares (queue, key, served, last_at) SELECT * FROM unnest($5::text[], $6::text[], "
    "$7::float8[], $8::float8[]) ON CONFLICT (queue, key) DO UPDATE SET served = excluded.served, "
    "last_at = excluded.last_at), "
    "d AS (DELETE FROM fair_shares AS f USING unnest($9::text[], $10::float8[]) AS g(queue, vtime) "
    "WHERE f.queue = g.queue AND f.served <= g.vtime AND f.last_at < $11 AND NOT EXISTS (SELECT FROM "
    "unnest($5::text[], $6::text[]) AS w(queue, key) WHERE w.queue = f.queue AND w.key = f.key)) "
)
SAVE_FLOW = f"{_SAVE}SELECT 1"
RESERVE = "INSERT INTO claim_reservations (queue, jobs, ids, keys, expires_at) VALUES ($1, $2, $3, $4, $5) RETURNING id"
# The last reservation of a claim, with what it changes of the flow state (SAVE_FLOW) in the same statement.
RESERVE_SAVING = (
    f"{_SAVE}INSERT INTO claim_reservations (queue, jobs, ids, keys, expires_at) VALUES ($12, $13, $14, $15, $16) "
    "RETURNING id"
)
# In the claim: the reservations still open (locked: no fold takes one back while the claim commits) ...
LOCK_RESERVATIONS = "SELECT id FROM claim_reservations WHERE id = ANY($1::bigint[]) AND used IS NULL FOR UPDATE"
# ... a keyed queue's picks, those still queued ...
CLAIM_PICKED = f"{SELECT_JOB} WHERE id = ANY($1::bigint[]) AND state = 'queued' FOR UPDATE SKIP LOCKED"
# ... and each reservation marked with how many it started.
USED = (
    "UPDATE claim_reservations AS r SET used = v.used FROM unnest($1::bigint[], $2::integer[]) AS v(id, used) "
    "WHERE r.id = v.id"
)
# A claim that failed gives its reservations back (one that committed after all has `used` already).
RELEASE = "UPDATE claim_reservations SET used = 0 WHERE id = ANY($1::bigint[]) AND used IS NULL"


@dataclass(slots=True)
class ClaimPlan:
    """What the count left a claim: how many it may take of each limited queue (0 or left out: none), the
    queues whose limits cut it (pickup.py), a keyed queue's picks (in rotation order) and a rate-limited
    one's bucket before the claim, the reservation of each counted queue (`reserve`), and when a rate
    limit has its next token (the engine claims again then)."""

    skip: list[str]  # the queues the claim's unlimited part leaves alone (paused, capped and limited ones)
    rooms: dict[str, int] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)
    keyed: dict[str, KeyedClaim] = field(default_factory=dict)
    buckets: dict[str, tuple[QueueLimits, Bucket]] = field(default_factory=dict)
    reservations: dict[str, int] = field(default_factory=dict)  # queue -> claim_reservations.id
    wakes: list[float] = field(default_factory=list)
    contended: bool = False  # a queue's lock was held by another claim: `reserve` waited for it


async def count(c: Conn, waiting: list[str], asked: dict[str, int], offered: list[str], now: float,
                aging: float, skip: list[str], whole: bool = False) -> ClaimPlan:  # fmt: skip
    """Under the locks of these limited queues with jobs queued (the caller holds them): what a claim may
    take of each (`asked`: how many it would), and a keyed queue's picks (`whole`: their rows too, locked,
    in the claim's own transaction). Writes nothing but the fold of the reservations done with."""
    plan = ClaimPlan(skip)
    for r in await c.fetch(ROOMS, waiting, now):
        (
            name,
            paused,
            concurrency,
            rate,
            burst,
            tokens,
            at,
            kc,
            weights,
            fair,
            vtime,
            counted,
            unused,
            reserved,
            by_key,
        ) = r
        limits = QueueLimits(paused, concurrency, rate, burst, kc, loads(weights), fair)
        bucket = Bucket(tokens, at).refund(limits, now, unused)
        room = claim_room(limits, counted, bucket, now, asked[name])
        if room < asked[name] and not paused:
            plan.held.add(name)
        if room > 0 and limits.by_key:
            running = {k: int(n) for k, n in orjson.loads(by_key).items()} if by_key else {}
            claim = plan.keyed[name] = await pick(c, name, limits, vtime, offered, room, now, aging, list(reserved),
                                                  running, whole)  # fmt: skip
            room = len(claim.picked)
        plan.rooms[name] = room
        if rate is not None:
            plan.buckets[name] = (limits, bucket)
    return plan


async def count_here(c: Conn, queues: list[str], asked: dict[str, int], offered: list[str], now: float,
                     aging: float, skip: list[str]) -> ClaimPlan | None:  # fmt: skip
    """In the claim's own transaction: `count` these limited queues (those with a job queued) if each of
    their locks is free at once, holding them to its commit; None, having changed nothing, if another
    claim holds one (the locks it did take go at the commit)."""
    got = await c.fetch(TRY_WAITING, queues)
    if not all(free for _, free in got):
        return None
    waiting = [q for q, _ in got]
    return await count(c, waiting, asked, offered, now, aging, skip, whole=True) if waiting else ClaimPlan(skip)


async def lock(c: Conn, queues: list[str]) -> tuple[list[str], bool]:
    """Take the locks of these queues that have a job queued: (those queues, whether any lock was held by
    another claim, which this waited for)."""
    got = await c.fetch(TRY_WAITING, queues)
    if busy := [q for q, free in got if not free]:
        await c.execute(LOCK_QUEUES, busy)
    return [q for q, _ in got], bool(busy)


async def reserve(c: Conn, queues: list[str], asked: dict[str, int], offered: list[str], now: float,
                  aging: float, skip: list[str]) -> ClaimPlan:  # fmt: skip
    """Lock, count, pick and reserve, for a claim of these limited queues, in the caller's transaction on
    `c`, which commits it at once. The picks and the rate tokens are charged as reserved."""
    waiting, contended = await lock(c, queues)
    if not waiting:
        return ClaimPlan(skip)
    plan = await count(c, waiting, asked, offered, now, aging, skip)
    plan.contended = contended
    saved = _save_args(plan, plan.rooms, {q: k.picked for q, k in plan.keyed.items()}, now)
    made = [(name, room) for name, room in plan.rooms.items() if room > 0]
    for i, (name, room) in enumerate(made):
        picked = plan.keyed[name].picked if name in plan.keyed else None
        ids = None if picked is None else [p.id for p in picked]
        keys = None if picked is None else [p.concurrency_key for p in picked]
        args = (name, room, ids, keys, now + RESERVED_FOR)
        last = i == len(made) - 1
        plan.reservations[name] = await c.fetchval(
            RESERVE_SAVING if last else RESERVE, *(saved + args if last else args)
        )
    if not made and saved[0]:
        await c.execute(SAVE_FLOW, *saved)
    return plan


async def settle(c: Conn, plan: ClaimPlan, started: list[Any], now: float) -> None:
    """In a claim that counted in its own transaction (it holds the queues' locks): the rate tokens and
    the rotation charged with the jobs it started (`started`: the claimed jobs)."""
    ids = {j.id for j in started}
    picks = {q: [p for p in k.picked if p.id in ids] for q, k in plan.keyed.items()}
    saved = _save_args(plan, Counter(j.queue for j in started), picks, now)
    if saved[0]:
        await c.execute(SAVE_FLOW, *saved)


def _save_args(plan: ClaimPlan, started: Mapping[str, int], picks: dict[str, list[Candidate]],
               now: float) -> tuple[Any, ...]:  # fmt: skip
    """SAVE_FLOW's arguments for `started` jobs of each queue (`picks` of the keyed ones), and the wakes of
    the rate limits they leave empty (set on the plan). Its first, the queues changed, is empty if none is."""
    state: dict[str, list[float | None]] = {}  # queue -> [tokens, at, vtime]
    for q, (limits, bucket) in plan.buckets.items():
        after = bucket.take(limits, now, started.get(q, 0))
        state[q] = [after.tokens, after.at, None]
        if (wake := after.next_token_at(limits, now)) is not None:
            plan.wakes.append(wake)
    shares: list[tuple[str, str, float, float]] = []
    forget: list[tuple[str, float]] = []
    for q, claim in plan.keyed.items():
        if not claim.limits.fair:
            continue
        changed = sorted(charge(claim.rotation, picks.get(q, []), claim.limits, now))
        got = claim.rotation.shares or {}
        shares += [(q, k, got[k].served, got[k].last_at) for k in changed]
        state.setdefault(q, [None, None, None])[2] = claim.rotation.vtime
        if forgettable(claim.rotation, now):
            forget.append((q, claim.rotation.vtime))
    names = sorted(state)
    return (
        names, [state[q][0] for q in names], [state[q][1] for q in names], [state[q][2] for q in names],
        [s[0] for s in shares], [s[1] for s in shares], [s[2] for s in shares], [s[3] for s in shares],
        [f[0] for f in forget], [f[1] for f in forget], now - FORGET_AFTER,
    )  # fmt: skip


async def _walk(c: Conn, queue: str, limits: QueueLimits, running: dict[str, int], offered: list[str],
                room: int, now: float, reserved: list[int], whole: bool) -> KeyedClaim | None:  # fmt: skip
    """A per-key limit without fair rotation: the queue's next `room` jobs in claim order (as an unlimited
    claim takes them), less those of full keys. None if that left room while more jobs wait: then each
    key's head is read instead."""
    rows = await c.fetch(WALK[whole], offered, [queue], room, now, reserved)
    counts, picked, kept = dict(running), [], []
    for r in rows:
        ck = r["concurrency_key"]
        if ck is not None and limits.key_concurrency is not None and counts.get(ck, 0) >= limits.key_concurrency:
            continue
        if ck is not None:
            counts[ck] = counts.get(ck, 0) + 1
        picked.append(Candidate(*(r[i] for i in _AS_CANDIDATE)) if whole else Candidate(*r))
        kept.append(r)
    if len(picked) < room and len(rows) == room:
        return None
    return KeyedClaim(queue, limits, Rotation(), picked, kept if whole else [])


async def pick(c: Conn, queue: str, limits: QueueLimits, vtime: float, offered: list[str], room: int,
               now: float, aging: float, reserved: list[int], running: dict[str, int],
               whole: bool) -> KeyedClaim:  # fmt: skip
    """Read each key's next queued jobs (those no open reservation holds) and `pick` up to `room` of them
    (`running`: each concurrency key's running jobs and reserved starts; `whole`: the picks' rows too, in
    the claim's `rows`, locked): in a fair queue two statements, the keys with the rotation's shares, then
    every candidate."""
    col = _FAIR if limits.fair else _KEY
    keys_sql, heads_sql = SQL[col, whole]
    if not limits.fair and (walked := await _walk(c, queue, limits, running, offered, room, now, reserved, whole)):
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
    rows: dict[int, Any] = {}

    async def read(keys: list[str], per: int, keyless: bool) -> None:
        for r in await c.fetch(heads_sql, queue, offered, keys, per, [queue] if keyless else [], now, reserved):
            if whole:
                rows[r["id"]] = r
                by_key.setdefault(r[col], []).append(tuple(r[i] for i in _AS_CANDIDATE))
            else:
                by_key.setdefault(r[col], []).append(tuple(r))

    await read(keys, per, True)
    picking = KeyedPick(queue, room, limits, running, rotation, now, aging, by_key, per)
    while more := picking.step():  # the pick ran these dry while more of them wait: read further, pick again
        for n in sorted(set(more.values())):
            again = [k for k, m in more.items() if m == n]
            await read([k for k in again if k is not None], n, None in again)
    claim = picking.claim
    claim.rows = [rows[p.id] for p in claim.picked] if whole else []
    return claim
