"""Flow control: what a claim may take from a queue, as pure decisions over counts the store supplies.

A queue may be paused, cap how many of its jobs run at once (`concurrency`), cap how many start
per second (`rate_limit`, a token bucket holding up to `rate_burst` starts), cap how many jobs of
one `concurrency_key` run at once (`key_concurrency`), and rotate its claims between the
`fairness_key`s of its jobs (`pick`: start-time fair queueing, optionally weighted). The stores
keep the settings, the bucket and the rotation in the store and apply these decisions inside the
claim's transaction, under the queue's lock (PostgreSQL: an advisory lock; SQLite: the one
writer), so every limit holds across every node, exactly. Nothing in this module does I/O.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any

#: The queue settings an operator changes (the `queues` columns of the same names), with their defaults.
SETTINGS: dict[str, Any] = {"paused": False, "concurrency": None, "rate_limit": None, "rate_burst": None,
                            "key_concurrency": None, "fairness_weights": None, "fair": False,
                            # circuit breakers of its http tasks (core/breaker.py; None: the defaults)
                            "breaker_mode": None, "breaker_failure_ratio": None, "breaker_window": None,
                            "breaker_reset": None, "breaker_min_requests": None}  # fmt: skip
RATE_MAX = 1_000_000.0  # jobs/s: far past what one store can start
BURST_OF_A_TENTH = 0.1  # seconds of the rate a bucket holds when no burst is set
MAX_KEYS = 10_000  # keys a claim reads of one queue; beyond, the least served of them get their turn first
NULL_WINDOW = 1000  # jobs without a key are looked for among a fair queue's first this many queued jobs
WALK_PAST = 256  # a per-key claim walks past at most this many jobs of full keys before reading each key's head
FORGET_AFTER = 3600.0  # a key not served for this long and not ahead of the queue is forgotten


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """One queue's settings as the engine and the claim use them."""

    paused: bool = False
    concurrency: int | None = None
    rate_limit: float | None = None  # jobs started per second, across every node
    rate_burst: int | None = None  # starts the bucket holds; None: default_burst(rate_limit)
    key_concurrency: int | None = None  # jobs of one concurrency_key running at once
    fairness_weights: dict[str, float] | None = None  # fairness_key -> weight (default 1)
    fair: bool = False  # claims rotate between fairness keys (set when a job with one arrives)
    breaker_mode: str | None = None  # wait | fail while a breaker of its http tasks is open (core/breaker.py)
    breaker_failure_ratio: float | None = None
    breaker_window: float | None = None
    breaker_reset: float | None = None
    breaker_min_requests: int | None = None

    @classmethod
    def of(cls, view: dict[str, Any]) -> QueueLimits:
        """From a queue view (or row dict) carrying the SETTINGS keys."""
        return cls(**{k: view.get(k, d) for k, d in SETTINGS.items()})

    @property
    def held(self) -> bool:
        """True if a claim must count before it takes from this queue (see the stores' per-queue claims)."""
        return (self.paused or self.concurrency is not None or self.rate_limit is not None
                or self.key_concurrency is not None or self.fair)  # fmt: skip

    @property
    def by_key(self) -> bool:
        """True if a claim must choose among the queue's jobs by key (`pick`), not just take the first."""
        return self.key_concurrency is not None or self.fair

    @property
    def burst(self) -> int:
        """How many starts the bucket holds when full."""
        return self.rate_burst if self.rate_burst is not None else default_burst(self.rate_limit or 0.0)


UNLIMITED = QueueLimits()


def default_burst(rate: float) -> int:
    """A tenth of a second's worth of starts, at least one: smooth, yet a dispatcher that is a few
    milliseconds late does not lose the tokens it would have had."""
    return max(1, math.ceil(rate * BURST_OF_A_TENTH))


@dataclass(frozen=True, slots=True)
class Bucket:
    """A token bucket as stored: `tokens` left at time `at` (None, None: full, never used)."""

    tokens: float | None
    at: float | None

    def level(self, limits: QueueLimits, now: float) -> float:
        """Tokens in the bucket at `now`: what was left, refilled at the rate, up to the burst."""
        burst = float(limits.burst)
        if self.tokens is None or self.at is None or limits.rate_limit is None:
            return burst
        return min(burst, self.tokens + max(0.0, now - self.at) * limits.rate_limit)

    def room(self, limits: QueueLimits, now: float) -> int:
        """How many jobs may start at `now` (any number if the queue has no rate limit)."""
        if limits.rate_limit is None:
            return 1 << 62
        return math.floor(self.level(limits, now) + 1e-9)

    def take(self, limits: QueueLimits, now: float, started: int) -> Bucket:
        """The bucket after `started` jobs started at `now` (a clock a moment behind another node's
        never refills it twice: time only moves forward)."""
        if limits.rate_limit is None:
            return self
        at = now if self.at is None else max(self.at, now)
        return Bucket(self.level(limits, now) - started, at)

    def next_token_at(self, limits: QueueLimits, now: float) -> float | None:
        """When the next whole token is in the bucket, if it is empty now; None if one is there."""
        if limits.rate_limit is None:
            return None
        level = self.level(limits, now)
        if level >= 1.0 - 1e-9:
            return None
        return now + (1.0 - level) / limits.rate_limit


def claim_room(limits: QueueLimits, running: int, bucket: Bucket, now: float, asked: int) -> int:
    """How many jobs a claim may take from the queue now: the least of what was asked, the free part
    of its concurrency limit and the tokens of its rate limit (0 if paused)."""
    if limits.paused:
        return 0
    room = asked
    if limits.concurrency is not None:
        room = min(room, limits.concurrency - running)
    room = min(room, bucket.room(limits, now))
    return max(0, room)


def rate_text(rate: float) -> str:
    """A rate as people say it: '10/s', '0.5/s' (one every 2 s)."""
    shown = f"{rate:g}/s"
    return shown if rate >= 1 else f"{shown} (one every {1 / rate:g} s)"


def waiting_reason(queue: str, limits: QueueLimits, running: int, bucket: Bucket, now: float) -> str | None:
    """Why a queued job of `queue` is held by the queue's own limits now (None: they let it start)."""
    if limits.paused:
        return f"queue {queue!r} is paused"
    if limits.concurrency == 0:
        return f"queue {queue!r} has concurrency 0: none of its jobs start until the limit is raised or removed"
    if limits.concurrency is not None and running >= limits.concurrency:
        return f"queue {queue!r} is at its concurrency limit: {running} of {limits.concurrency} running"
    if limits.rate_limit is not None and bucket.room(limits, now) < 1:
        return (f"queue {queue!r} is at its rate limit of {rate_text(limits.rate_limit)} "
                f"(burst {limits.burst})")  # fmt: skip
    return None


def key_reason(queue: str, key: str, limit: int, running: int) -> str | None:
    """Why a queued job with concurrency key `key` waits, if its key is at the queue's per-key limit."""
    if running < limit:
        return None
    return f"concurrency key {key!r} of queue {queue!r} is at its limit: {running} of {limit} running"


# ---------------------------------------------------------------- choosing among keys


@dataclass(frozen=True, slots=True)
class Candidate:
    """A queued job a claim may take, with what the choice needs."""

    id: int
    sort_key: float
    priority: int
    fairness_key: str | None
    concurrency_key: str | None


@dataclass(frozen=True, slots=True)
class Share:
    """What one fairness key of a queue was served: starts / weight, and when it last started one."""

    served: float
    last_at: float


@dataclass(slots=True)
class Rotation:
    """A fair queue's rotation state: its virtual time and the shares of keys served past it."""

    vtime: float = 0.0
    shares: dict[str, Share] | None = None


def band(c: Candidate, last_at: float | None, now: float, aging: float) -> int:
    """A fair queue's priority band of a key whose next job is `c`: its priority, plus one per `aging`
    seconds the key has waited for a start (since its job was enqueued, or since the key last started
    one, whichever is later). A higher band goes first; within a band, the least served key."""
    enqueued = c.sort_key + c.priority * aging
    waited = now - max(enqueued, last_at if last_at is not None else enqueued)
    return c.priority + math.floor(max(0.0, waited) / aging)


def pick(
    candidates: dict[str | None, list[Candidate]],
    room: int,
    *,
    limits: QueueLimits,
    key_running: dict[str, int],
    rotation: Rotation,
    now: float,
    aging: float,
) -> list[Candidate]:
    """Choose up to `room` jobs among each group's next jobs (in claim order; groups are fairness keys
    in a fair queue), honouring the per-key concurrency limit and, in a fair queue, rotating between
    keys: the highest band first, then the key served least (start-time fair queueing: a key's
    service is its starts / weight, and a key that was idle starts at the queue's virtual time, so it
    neither jumps the queue with credit it saved nor waits for the others' backlog). Pure: `charge`
    then records what was really claimed."""
    running = dict(key_running)
    trial = Rotation(rotation.vtime, dict(rotation.shares or {}))
    pos = dict.fromkeys(candidates, 0)
    picked: list[Candidate] = []
    heap: list[tuple[Any, ...]] = []  # one entry per group: its next job, ranked (a heap: O(room log keys))
    shares: dict[str, Share] = trial.shares  # type: ignore[assignment]
    weights = limits.fairness_weights or {}

    def step(name: str) -> float:
        return 1.0 / max(weights.get(name, 1.0), 1e-6)

    def push(k: str | None) -> None:
        items = candidates[k]
        while pos[k] < len(items):
            c = items[pos[k]]
            ck = c.concurrency_key
            if limits.key_concurrency is None or ck is None or running.get(ck, 0) < limits.key_concurrency:
                break
            pos[k] += 1  # its concurrency key is full: this job waits for another claim
        else:
            return
        if limits.fair:
            share = shares.get(k or "")
            served = max(share.served if share else trial.vtime, trial.vtime)
            rank: tuple[Any, ...] = (-band(c, share.last_at if share else None, now, aging), served, c.sort_key, c.id)
        else:
            rank = (c.sort_key, c.id)
        heapq.heappush(heap, (*rank, k))

    for k in candidates:
        push(k)
    while heap and len(picked) < room:
        k = heapq.heappop(heap)[-1]
        c = candidates[k][pos[k]]
        ck = c.concurrency_key
        if limits.key_concurrency is not None and ck is not None and running.get(ck, 0) >= limits.key_concurrency:
            push(k)  # another group's pick filled this key meanwhile: look again
            continue
        pos[k] += 1
        picked.append(c)
        if ck is not None:
            running[ck] = running.get(ck, 0) + 1
        if limits.fair:  # charge() for one start, inline: this loop runs once per job claimed
            name = k or ""
            share = shares.get(name)
            start = share.served if share is not None and share.served > trial.vtime else trial.vtime
            trial.vtime = start
            shares[name] = Share(start + step(name), now)
        push(k)
    return picked


def charge(rotation: Rotation, started: list[Candidate], limits: QueueLimits, now: float) -> set[str]:
    """Record starts (in pick order) in a fair queue's rotation; return the share keys changed."""
    shares = rotation.shares if rotation.shares is not None else {}
    rotation.shares = shares
    weights = limits.fairness_weights or {}
    changed = set()
    for c in started:
        name = c.fairness_key or ""
        share = shares.get(name)
        start = max(share.served if share else rotation.vtime, rotation.vtime)
        rotation.vtime = max(rotation.vtime, start)
        shares[name] = Share(start + 1.0 / max(weights.get(name, 1.0), 1e-6), now)
        changed.add(name)
    return changed


def forgettable(rotation: Rotation, now: float) -> bool:
    """Whether some key of a fair queue's rotation is neither ahead of it nor recent (its share row can
    go): the claim deletes them only then, not on every claim."""
    cutoff = now - FORGET_AFTER
    return any(s.served <= rotation.vtime and s.last_at < cutoff for s in (rotation.shares or {}).values())


def fetch_per_key(room: int, keys: int) -> int:
    """How many of each key's next jobs a claim of `room` reads: enough for an even share twice over."""
    return room if keys <= 2 else min(room, 2 * math.ceil(room / keys))


@dataclass(slots=True)
class KeyedClaim:
    """One queue's picks in a claim (store rows in pick order), and what to record once the claim is cut."""

    queue: str
    limits: QueueLimits
    rotation: Rotation
    picked: list[Candidate]
    rows: list[Any]


#: The columns of a candidate, in Candidate's order: what a claim reads of each key's next jobs.
CANDIDATE_COLUMNS = "id, sort_key, priority, fairness_key, concurrency_key"


def keys_to_read(keys: list[Any], limits: QueueLimits, running: dict[str, int], rotation: Rotation,
                 room: int) -> tuple[list[Any], int]:  # fmt: skip
    """Of a queue's keys with jobs waiting, the ones a claim of `room` reads, and how many jobs of each:
    a key at its concurrency limit is not read (in a queue that is not fair), and of very many keys,
    the least served first (they are the ones a rotation would take)."""
    if not limits.fair and limits.key_concurrency is not None:
        keys = [k for k in keys if running.get(k, 0) < limits.key_concurrency]
    shares = rotation.shares or {}
    if len(keys) > 2 * room:
        keys = sorted(keys, key=lambda k: shares[k].served if k in shares else rotation.vtime)[: 2 * room]
    return keys, fetch_per_key(room, len(keys) + 1)


def keyed_claim(queue: str, by_key: dict[Any, list[Any]], room: int, *, limits: QueueLimits,
                running: dict[str, int], rotation: Rotation, now: float, aging: float) -> KeyedClaim:  # fmt: skip
    """`pick` among the rows (CANDIDATE_COLUMNS) read for each key (None: jobs without one). The claim
    then reads the picked jobs whole, into `rows`."""
    groups = {k: [Candidate(*r) for r in rows] for k, rows in by_key.items()}
    if not limits.fair:  # a concurrency key is not a fairness group: every job competes in claim order
        groups = {None: sorted((c for cs in groups.values() for c in cs), key=lambda c: (c.sort_key, c.id))}
    picked = pick(groups, room, limits=limits, key_running=running, rotation=rotation, now=now, aging=aging)
    return KeyedClaim(queue, limits, rotation, picked, [])


def merge_keys(picked: list[Candidate]) -> list[tuple[float, int]]:
    """Claim-order keys for jobs picked in rotation order, for merging them with other queues' jobs:
    the picks' own keys sorted, handed out in pick order, so a claim that must cut the merge keeps
    this queue's first picks (its rotation), not its oldest jobs."""
    return sorted((c.sort_key, c.id) for c in picked)


# ---------------------------------------------------------------- bulkheads (slots an agent keeps per queue)


def parse_bulkheads(text: str) -> tuple[list[str], dict[str, int]]:
    """`emails:50,reports:10,*` as the queues an agent serves and the slots it keeps for each numbered
    one (a queue without a number, or `*` for any other, shares the slots left over). ValueError
    says what is wrong."""
    queues: list[str] = []
    reserved: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, number = part.partition(":")
        name = name.strip()
        if not name:
            raise ValueError(f"{part!r}: a queue name before the ':'")
        if sep:
            if name == "*":
                raise ValueError("'*' takes the slots left over: it has no number of its own")
            if not number.strip().isdigit() or int(number) < 1:
                raise ValueError(f"{part!r}: the slots kept for a queue are a whole number, at least 1")
            reserved[name] = int(number)
        if name in queues:
            raise ValueError(f"queue {name!r} is named twice")
        queues.append(name)
    return queues, reserved


@dataclass(frozen=True, slots=True)
class AgentClaim:
    """One claim to make for an agent: from which queues (None: any), how many, and queues to leave."""

    queues: frozenset[str] | None
    limit: int
    leave: frozenset[str] = frozenset()
    caps: dict[str, int] | None = None  # queue -> how many more this agent may run of it


def agent_claims(queues: frozenset[str] | None, slots: int, reserved: dict[str, int], used: dict[str, int],
                 busy: int, free: int) -> list[AgentClaim]:  # fmt: skip
    """The claims to make for an agent with `free` slots. Without bulkheads: one, for all it serves.
    With them: one for the numbered queues, each up to the slots it keeps minus those its jobs use;
    one for the other queues it serves, up to the shared slots (`slots` minus every reservation) that
    are free. So a flood in one queue never takes the slots another queue keeps."""
    if not reserved:
        return [AgentClaim(queues, free)] if free > 0 else []
    rooms = {q: max(0, n - used.get(q, 0)) for q, n in reserved.items()}
    out = []
    numbered = sum(rooms.values())
    if numbered and free:
        out.append(AgentClaim(frozenset(q for q, r in rooms.items() if r), min(numbered, free), caps=rooms))
    shared_used = busy - sum(min(used.get(q, 0), n) for q, n in reserved.items())
    shared_free = min(free, slots - sum(reserved.values()) - max(0, shared_used))
    others = None if queues is None else queues - set(reserved)
    if shared_free > 0 and (others is None or others):
        out.append(AgentClaim(others, shared_free, leave=frozenset(reserved)))
    return out


def held_by_limits(room: dict[str, int], claim: AgentClaim, limit: int) -> frozenset[str]:
    """The queues whose concurrency limit (`room`: how many more of each may run) lets this claim take
    fewer than the agent would: their waiting jobs are held by policy, not waiting for a slot."""
    wanted = limit
    held = set()
    for q, n in room.items():
        if q in claim.leave or (claim.queues is not None and q not in claim.queues):
            continue
        if claim.caps is not None:
            wanted = min(limit, claim.caps.get(q, limit))
        if n < wanted:
            held.add(q)
    return frozenset(held)
