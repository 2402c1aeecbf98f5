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
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

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
RESERVED_FOR = 30.0  # seconds a claim's reservation (PostgreSQL) counts if its claim never ends (a dead node)


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

    def refund(self, limits: QueueLimits, now: float, unused: int) -> Bucket:
        """The bucket given back `unused` starts it had handed out (a claim took fewer than it reserved),
        up to the burst: never more than if they had not been taken."""
        if unused <= 0 or limits.rate_limit is None or self.tokens is None:
            return self
        at = now if self.at is None else max(self.at, now)
        return Bucket(min(float(limits.burst), self.level(limits, now) + unused), at)

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


def rate_text(rate: float, burst: int | None = None) -> str:
    """A rate as people say it: '10/s', '0.5/s (one every 2 s)'; with its burst '10/s (burst 5)',
    '0.5/s (one every 2 s, burst 5)'."""
    notes = ([] if rate >= 1 else [f"one every {1 / rate:g} s"]) + ([] if burst is None else [f"burst {burst}"])
    return f"{rate:g}/s" + (f" ({', '.join(notes)})" if notes else "")


def waiting_reason(queue: str, limits: QueueLimits, running: int, bucket: Bucket, now: float) -> str | None:
    """Why a queued job of `queue` is held by the queue's own limits now (None: they let it start)."""
    if limits.paused:
        return f"queue {queue!r} is paused"
    if limits.concurrency == 0:
        return f"queue {queue!r} has concurrency 0: none of its jobs start until the limit is raised or removed"
    if limits.concurrency is not None and running >= limits.concurrency:
        return f"queue {queue!r} is at its concurrency limit: {running} of {limits.concurrency} running"
    if limits.rate_limit is not None and bucket.room(limits, now) < 1:
        return f"queue {queue!r} is at its rate limit of {rate_text(limits.rate_limit, limits.burst)}"
    return None


def key_reason(queue: str, key: str, limit: int, running: int) -> str | None:
    """Why a queued job with concurrency key `key` waits, if its key is at the queue's per-key limit."""
    if running < limit:
        return None
    return f"concurrency key {key!r} of queue {queue!r} is at its limit: {running} of {limit} running"


# ---------------------------------------------------------------- choosing among keys


class Candidate(NamedTuple):
    """A queued job a claim may take, with what the choice needs (a tuple: a claim makes hundreds)."""

    id: int
    sort_key: float
    priority: int
    fairness_key: str | None
    concurrency_key: str | None


class Share(NamedTuple):
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
    partial: Collection[str | None] = (),
    dry: set[str | None] | None = None,
) -> list[Candidate]:
    """Choose up to `room` jobs among each group's next jobs (in claim order; groups are fairness keys
    in a fair queue), honouring the per-key concurrency limit and, in a fair queue, rotating between
    keys: the highest band first, then the key served least (start-time fair queueing: a key's
    service is its starts / weight, and a key that was idle starts at the queue's virtual time, so it
    neither jumps the queue with credit it saved nor waits for the others' backlog). Pure: `charge`
    then records what was really claimed.

    `partial` names groups read only to a limit (more of their jobs may wait): if one of them runs
    out, the pick stops there and adds it to `dry`, so the caller reads more of it and picks again
    (the pick is then what it would be had every job been read)."""
    running = dict(key_running)
    pos = dict.fromkeys(candidates, 0)
    picked: list[Candidate] = []
    heap: list[tuple[Any, ...]] = []  # one entry per group: its next job, ranked (a heap: O(room log keys))
    fair, key_limit = limits.fair, limits.key_concurrency
    vtime = rotation.vtime
    # The rotation as this pick changes it (pure: a copy), served and last start per key, kept apart:
    # this loop runs once per job claimed.
    served_of = {k: s.served for k, s in (rotation.shares or {}).items()}
    last_of: dict[str, float] = {k: s.last_at for k, s in (rotation.shares or {}).items()}
    weights = limits.fairness_weights or {}
    steps: dict[str, float] = {}
    ran_dry = False

    def push(k: str | None) -> None:
        nonlocal ran_dry
        items = candidates[k]
        i = pos[k]
        while i < len(items):
            c = items[i]
            ck = c.concurrency_key
            if key_limit is None or ck is None or running.get(ck, 0) < key_limit:
                break
            i += 1  # its concurrency key is full: this job waits for another claim
        else:
            pos[k] = i
            if k in partial:
                ran_dry = True
                if dry is not None:
                    dry.add(k)
            return
        pos[k] = i
        if fair:
            name = k or ""
            got = served_of.get(name)
            served = got if got is not None and got > vtime else vtime
            # band(c, last start, now, aging), inline
            enqueued = c.sort_key + c.priority * aging
            last = last_of.get(name, enqueued)
            waited = now - (enqueued if enqueued > last else last)
            b = c.priority + (math.floor(waited / aging) if waited > 0.0 else 0)
            heapq.heappush(heap, (-b, served, c.sort_key, c.id, k))
        else:
            heapq.heappush(heap, (c.sort_key, c.id, k))

    for k in candidates:
        push(k)
    while heap and len(picked) < room and not ran_dry:
        k = heapq.heappop(heap)[-1]
        c = candidates[k][pos[k]]
        ck = c.concurrency_key
        if key_limit is not None and ck is not None and running.get(ck, 0) >= key_limit:
            push(k)  # another group's pick filled this key meanwhile: look again
            continue
        pos[k] += 1
        picked.append(c)
        if ck is not None:
            running[ck] = running.get(ck, 0) + 1
        if fair:  # charge() for one start, inline
            name = k or ""
            got = served_of.get(name)
            if got is not None and got > vtime:
                vtime = got
            step = steps.get(name)
            if step is None:
                step = steps[name] = 1.0 / max(weights.get(name, 1.0), 1e-6)
            served_of[name] = vtime + step
            last_of[name] = now
        push(k)
    return picked


def charge(rotation: Rotation, started: list[Candidate], limits: QueueLimits, now: float) -> set[str]:
    """Record starts (in pick order) in a fair queue's rotation; return the share keys changed."""
    shares = rotation.shares if rotation.shares is not None else {}
    rotation.shares = shares
    weights = limits.fairness_weights or {}
    vtime = rotation.vtime
    served: dict[str, float] = {}  # a start begins at the key's service or the virtual time, the later
    for c in started:
        name = c.fairness_key or ""
        got = served.get(name)
        if got is None:
            share = shares.get(name)
            got = share.served if share is not None else vtime
        if got > vtime:
            vtime = got
        served[name] = vtime + 1.0 / max(weights.get(name, 1.0), 1e-6)
    rotation.vtime = vtime
    for name, s in served.items():
        shares[name] = Share(s, now)
    return set(served)


def forgettable(rotation: Rotation, now: float) -> bool:
    """Whether some key of a fair queue's rotation is neither ahead of it nor recent (its share row can
    go): the claim deletes them only then, not on every claim."""
    cutoff = now - FORGET_AFTER
    return any(s.served <= rotation.vtime and s.last_at < cutoff for s in (rotation.shares or {}).values())


def fetch_per_key(room: int, keys: int) -> int:
    """How many of each key's next jobs a claim of `room` reads (a per-key limit without fair rotation):
    enough for an even share twice over."""
    return room if keys <= 2 else min(room, 2 * math.ceil(room / keys))


def fair_per_key(room: int, keys: list[Any], weights: dict[str, float] | None) -> int:
    """How many of each key's next jobs a fair claim of `room` reads: the heaviest key's share of the room,
    plus one (what a rotation takes of a key when each has jobs enough). A key that runs out of what was
    read while more of its jobs wait is read again (`pick`'s `partial`), so this is what a claim usually
    needs, not a bound on what it may take."""
    if len(keys) <= 1:
        return room
    w = weights or {}
    each = [max(w.get(k, 1.0), 1e-6) for k in keys]
    return min(room, math.ceil(room * max(each) / sum(each)) + 1)


@dataclass(slots=True)
class KeyedClaim:
    """One queue's picks in a claim (store rows in pick order), and what to record once the claim is cut."""

    queue: str
    limits: QueueLimits
    rotation: Rotation
    picked: list[Candidate]
    rows: list[Any]
    dry: set[Any] = field(default_factory=set)  # groups to read further before the pick holds (see `pick`)


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
    if limits.fair:
        return keys, fair_per_key(room, keys, limits.fairness_weights)
    return keys, fetch_per_key(room, len(keys) + 1)


def keyed_claim(queue: str, by_key: dict[Any, list[Any]], room: int, *, limits: QueueLimits,
                running: dict[str, int], rotation: Rotation, now: float, aging: float,
                partial: Collection[Any] = ()) -> KeyedClaim:  # fmt: skip
    """`pick` among the rows (CANDIDATE_COLUMNS) read for each key (None: jobs without one). The claim
    then reads the picked jobs whole, into `rows`. In a fair queue, `partial` names the keys read to a
    limit: if the pick ran one of them dry, `dry` names them and the claim reads more and picks again."""
    groups = {k: [Candidate(*r) for r in rows] for k, rows in by_key.items()}
    dry: set[Any] = set()
    if not limits.fair:  # a concurrency key is not a fairness group: every job competes in claim order
        groups = {None: sorted((c for cs in groups.values() for c in cs), key=lambda c: (c.sort_key, c.id))}
        partial = ()
    picked = pick(groups, room, limits=limits, key_running=running, rotation=rotation, now=now, aging=aging,
                  partial=partial, dry=dry)  # fmt: skip
    if len(picked) >= room:
        dry.clear()
    return KeyedClaim(queue, limits, rotation, picked, [], dry)


@dataclass(slots=True)
class KeyedPick:
    """One queue's pick among the rows read for each of its groups (CANDIDATE_COLUMNS first; None: jobs
    without a key), read further while the pick runs a group dry. `step` picks (`keyed_claim`) and names
    the groups to read again and how many of each (twice what was had, up to the room), dropping what
    it had of them; the store reads those into `by_key` and steps again until nothing is named. Then
    `claim` is the pick it would be had every job been read. Pure: each store only reads."""

    queue: str
    room: int
    limits: QueueLimits
    running: dict[str, int]
    rotation: Rotation
    now: float
    aging: float
    by_key: dict[Any, list[Any]]
    per: int  # how many of each group's jobs the first read asked for
    read_to: dict[Any, int] = field(default_factory=dict)  # groups read again: how many were asked for
    claim: KeyedClaim = field(init=False)

    def step(self) -> dict[Any, int]:
        """Pick among the rows read; the groups to read again (and how many of each), or {} once it holds."""
        partial: Collection[Any] = ()
        if self.limits.fair:  # a group read to its limit may have more waiting
            partial = {k for k, rows in self.by_key.items() if self.room > len(rows) >= self.read_to.get(k, self.per)}
        self.claim = keyed_claim(self.queue, self.by_key, self.room, limits=self.limits, running=self.running,
                                 rotation=self.rotation, now=self.now, aging=self.aging, partial=partial)  # fmt: skip
        more = {k: min(self.room, 2 * len(self.by_key[k])) for k in self.claim.dry}
        for k, n in more.items():
            self.read_to[k] = n
            del self.by_key[k]
        return more


TURN_KEYS = 1000  # fairness keys a `waiting_for` read of a fair queue orders, at most


def turn_order(heads: list[Candidate], limits: QueueLimits, rotation: Rotation, now: float,
               aging: float) -> list[str | None]:  # fmt: skip
    """A fair queue's fairness keys (None: its jobs without one, a key of their own) in the order its claims
    serve them next: `pick` over each key's next job (`heads`), its per-key limit aside."""
    groups: dict[str | None, list[Candidate]] = {c.fairness_key: [c] for c in heads}
    picked = pick(groups, len(groups), limits=replace(limits, key_concurrency=None), key_running={},
                  rotation=rotation, now=now, aging=aging)  # fmt: skip
    return [c.fairness_key for c in picked]


def turn_reason(queue: str, key: str, order: list[str | None], more: bool) -> str | None:
    """The part of a fair queue's job's `waiting_for` that says where its fairness key is in the rotation
    (`order`: turn_order; `more`: keys past TURN_KEYS were not read)."""
    if key not in order:
        return None
    ahead = order.index(key)
    keys = f"{len(order)}{'+' if more else ''} fairness keys with jobs waiting in queue {queue!r}"
    if None in order:
        keys += " (its jobs without a key count as one)"
    if ahead == 0:
        return f"fairness key {key!r} is next of the {keys}"
    return f"fairness key {key!r} waits its turn: of the {keys}, {ahead} {'goes' if ahead == 1 else 'go'} before it"


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
