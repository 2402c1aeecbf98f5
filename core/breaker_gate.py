"""One node's side of the circuit breakers (core/breaker.py): the open breakers as the store has them,
the gate a claim's http jobs pass before they go to an agent, and the recording of request outcomes.

The gate runs after the claim transaction, never in it: a claim that took no http job, or any job
while no breaker is open, costs a dict lookup per job. A job whose breaker is open is held back
(wait mode: scheduled again, unsent, its attempt not used) or failed at once (fail mode); when the
breaker's trial time has come, one job (across every node: the store decides) goes as the trial.
The breaker's closing releases the jobs it held.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.breaker import Breaker, BreakerSettings, breaker_key, held_until
from core.errors import NotFound
from core.flow import UNLIMITED
from core.model import Change, Job, Policy, RunResult, decide_breaker_hold, decide_breaker_release, decide_finish
from core.store.base import Decide

if TYPE_CHECKING:
    from core.engine import Engine

log = logging.getLogger("jobdeck.breakers")

FRESH_FOR = 1.0  # seconds this node trusts its list of open breakers (events refresh it sooner)


class BreakerGate:
    """The open breakers as this node last read them, and what a claim does with their jobs."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.open: dict[tuple[str, str], Breaker] = {}
        self._read_at = float("-inf")

    def settings(self, queue: str) -> BreakerSettings:
        """A queue's breaker numbers."""
        return BreakerSettings.of(self.engine.queue_settings.get(queue, UNLIMITED))

    def _all_settings(self, queues: set[str]) -> dict[str, BreakerSettings]:
        return {q: self.settings(q) for q in queues}

    async def refresh(self, force: bool = False) -> None:
        """Read the open breakers again if the list is older than FRESH_FOR (or `force`)."""
        if not force and time.monotonic() - self._read_at < FRESH_FOR:
            return
        self._read_at = time.monotonic()
        self.open = {(b.queue, b.key): b for b in await self.engine.store.list_breakers(open_only=True)}  # type: ignore[attr-defined]

    def heard(self, event: str) -> None:
        """A breaker opened or closed (perhaps on another node): read them again at the next gate."""
        self._read_at = float("-inf")

    def reason(self, job: Job, now: float) -> str | None:
        """Why a waiting http job is held by an open breaker, as far as this node knows (None: it is not)."""
        if not self.open or job.task.get("kind") != "http" or job.state not in ("queued", "scheduled"):
            return None
        b = self.open.get((job.queue, breaker_key(job.task) or ""))
        return None if b is None else b.reason(now, self.settings(job.queue))

    async def gate(self, jobs: list[Job], now: float) -> list[Job]:
        """The claimed jobs that may go to the agent; the others are held or failed here."""
        http = [(j, k) for j in jobs if j.task.get("kind") == "http" and (k := breaker_key(j.task)) is not None]
        if not http:
            return jobs
        await self.refresh()
        if not self.open:
            return jobs
        held: dict[int, tuple[str, str]] = {}
        trials: dict[tuple[str, str], int] = {}
        for j, k in http:
            b = self.open.get((j.queue, k))
            if b is None:
                continue
            if b.retry_at is not None and b.retry_at <= now and (j.queue, k) not in trials:
                trials[(j.queue, k)] = j.id
            else:
                held[j.id] = (j.queue, k)
        if trials:
            after = await self.engine.store.take_breaker_trials(trials, self._all_settings({q for q, _ in trials}))  # type: ignore[attr-defined]
            for key, job_id in trials.items():
                b = after.get(key)
                if b is None or b.opened_at is None:  # it closed meanwhile
                    self.open.pop(key, None)
                    continue
                self.open[key] = b  # as the store has it now: the others of its jobs wait for this trial
                if b.probe_job != job_id:
                    held[job_id] = key  # another job (perhaps on another node) is the trial
                else:
                    log.info("breaker of %s in queue %r: job %d goes as the trial request", key[1], key[0], job_id)
        held = {i: key for i, key in held.items() if key in self.open}
        if not held:
            return jobs
        policy = self.engine.policy
        decisions: dict[int, Decide] = {}
        for j in jobs:
            if (hk := held.get(j.id)) is None:
                continue
            b, s = self.open[hk], self.settings(j.queue)
            why = b.reason(now, s)
            if s.mode == "fail":
                rr = RunResult(j.id, j.attempt, "failed", error=why)
                decisions[j.id] = functools.partial(_fail_fast, rr=rr, now=now, policy=policy)
            else:
                until = held_until(b, now, s)
                decisions[j.id] = functools.partial(_hold, attempt=j.attempt, until=until, why=why, now=now,
                                                    policy=policy)  # fmt: skip
        await self.engine.store.change_jobs(decisions)
        self.engine.wake_promoter()
        return [j for j in jobs if j.id not in held]

    async def record(self, outcomes: Sequence[tuple[str, str, int, bool]]) -> None:
        """Count the outcomes of requests http tasks sent; release what a closing breaker held."""
        if not outcomes:
            return
        store = self.engine.store
        turns = await store.record_breaker_outcomes(outcomes, self._all_settings({q for q, *_ in outcomes}))  # type: ignore[attr-defined]
        for event, b, before in turns:
            if event == "breaker.opened":
                log.warning("circuit breaker opened for host %s in queue %r", b.key, b.queue)
                self.open[(b.queue, b.key)] = b
                continue
            log.info("circuit breaker closed for host %s in queue %r", b.key, b.queue)
            await self._release(b, before)

    async def reset(self, queue: str, host: str) -> Breaker:
        """An operator closes a breaker at once (open, half open or closed: its window starts empty); the
        jobs it held are released. NotFound if the queue has no breaker for that host."""
        turn = await self.engine.store.reset_breaker(queue, host, self.settings(queue))  # type: ignore[attr-defined]
        if turn is None:
            raise NotFound(f"queue {queue!r} has no circuit breaker for host {host!r}", field="host")
        _, b, before = turn
        log.info("circuit breaker of host %s in queue %r reset by an operator", host, queue)
        await self._release(b, before)
        return b  # type: ignore[no-any-return]

    async def _release(self, b: Breaker, before: float | None) -> None:
        """A breaker closed: forget it, and queue the jobs it held until `before` (its trial time)."""
        self.open.pop((b.queue, b.key), None)
        if before is None:
            return
        waiting = await self.engine.store.breaker_waiters(b.queue, before)  # type: ignore[attr-defined]
        ids = [i for i, task in waiting if breaker_key(task) == b.key]
        if ids:
            await self.engine.change_many(ids, lambda job: decide_breaker_release(job, self.engine.clock(),
                                                                                    self.engine.policy))  # fmt: skip
            self.engine.wake()


def _fail_fast(job: Job, *, rr: RunResult, now: float, policy: Policy) -> Change:
    return decide_finish(job, rr, now, policy)


def _hold(job: Job, *, attempt: int, until: float, why: str, now: float, policy: Policy) -> Change:
    return decide_breaker_hold(job, attempt, until, why, now, policy)
