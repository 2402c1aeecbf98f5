"""The core side of one connected agent: its slots, its running jobs, and its messages."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import TYPE_CHECKING, Any

from core.flow import AgentClaim, agent_claims
from core.model import Job
from core.protocol import Channel, ChannelClosed, Message

if TYPE_CHECKING:
    from core.agent_hub import AgentHub

log = logging.getLogger("jobdeck.agents")

# An agent whose runs take less than this on average is given its next jobs ahead, up to its
# `prefetch` beyond its slots: they wait a moment in the agent, not for the commit of their claim.
PREFETCH_RUNS_UNDER = 0.1  # seconds
# ...but not while a run it was given more than this long ago (or 4 of its mean runs) still goes:
# the jobs would wait behind a long run, when another agent or the list could say why they wait.
PREFETCH_OVERDUE = 0.01  # seconds


def assignment(job: Job, extra: Message | None = None) -> Message:
    """What an agent needs to run one attempt of a job (`extra`: its parents' results, if it asked)."""
    return {
        **(extra or {}),
        "job_id": job.id,
        "attempt": job.attempt,
        "name": job.name,
        "queue": job.queue,
        "task": job.task,
        "timeout": job.timeout,
        "run_at": job.run_at,
        "traceparent": job.traceparent,
    }


class AgentSession:
    """One registered agent as the engine sees it."""

    def __init__(self, hub: AgentHub, channel: Channel, hello: Message) -> None:
        self.hub = hub
        self.channel = channel
        self.name = str(hello["name"])
        self.instance = str(hello.get("instance", ""))
        self.host = str(hello.get("host", ""))
        self.pid = hello.get("pid")
        self.version = str(hello.get("version", ""))
        queues = hello.get("queues") or []
        self.queues: frozenset[str] | None = frozenset(queues) if queues and "*" not in queues else None
        self.slots = int(hello.get("slots", 1))
        # Assignments the agent takes beyond its slots (0: an agent that starts whatever it is given).
        self.prefetch = max(0, min(int(hello.get("prefetch") or 0), self.slots))
        self.run_seconds: float | None = None  # a moving average of its runs' durations, from their results
        self._given: collections.deque[tuple[float, list[int]]] = collections.deque()  # (when, job ids) assigned
        self.labels: dict[str, str] = dict(hello.get("labels") or {})
        self.running: dict[int, int] = {}  # job id -> attempt
        # Bulkheads: slots kept for a queue (`--queues emails:50,reports:10`), and the queue of each run.
        self.queue_slots: dict[str, int] = {str(q): int(n) for q, n in (hello.get("queue_slots") or {}).items()}
        self.run_queue: dict[int, str] = {}
        # Runs whose result arrived and is being recorded: their slots count as free already, so
        # the dispatcher claims for them while the results commit (often in the same transaction).
        self.finishing: dict[int, int] = {}
        # Results the agent said it holds when it registered (it ran them while out of touch), not
        # received yet: their slots stay taken until they arrive, so a lost attempt's retry is not
        # claimed for this agent (and started) before its held result of that attempt is read.
        self.held: dict[int, int] = {}
        self._results: list[Message] = []  # results received, waiting for the recorder
        self._recorder: asyncio.Task[None] | None = None
        self._recording: set[asyncio.Task[None]] = set()  # result batches written into a held commit
        self._held_batch_due = False  # a task will take the results into the held commit
        self.assigned_at = 0.0  # time.monotonic() of its last assignment
        self.connected_at = time.time()
        self.last_heartbeat = self.connected_at
        self.draining = False

    @property
    def busy(self) -> int:
        """Slots whose run is still going (not counting runs whose result is being recorded)."""
        return len(self.running) - len(self.finishing.keys() & self.running.keys()) + len(self.held)

    @property
    def ahead(self) -> int:
        """Jobs it is given beyond its slots now: its prefetch while its runs are short, so a freed
        slot starts its next job at once while the claim that replaces it commits. None while its runs
        are long or not known yet (a job given ahead would wait a run, when another agent may be free),
        nor with bulkheads (their slots are counted per queue)."""
        given = self._given
        while given and not any(j in self.running for j in given[0][1]):
            given.popleft()  # every run of the oldest assignment ended
        mean = self.run_seconds
        if not self.prefetch or self.queue_slots or mean is None or mean >= PREFETCH_RUNS_UNDER:
            return 0
        overdue = bool(given) and time.monotonic() - given[0][0] > max(PREFETCH_OVERDUE, 4 * mean)
        return 0 if overdue else self.prefetch

    @property
    def slots_free(self) -> int:
        """Slots with no run (what the agents list and the slots gauge show; `free` adds the jobs ahead)."""
        return 0 if self.draining else max(0, self.slots - self.busy)

    @property
    def free(self) -> int:
        """What its next claim may take: its free slots, and what it takes ahead (`ahead`)."""
        return 0 if self.draining else max(0, self.slots + self.ahead - self.busy)

    def to_dict(self) -> dict[str, Any]:
        """The public view of an agent (the API's JSON)."""
        return {
            "name": self.name,
            "host": self.host,
            "pid": self.pid,
            "version": self.version,
            "queues": sorted(self.queues) if self.queues is not None else ["*"],
            "queue_slots": self.queue_slots,
            "labels": self.labels,
            "slots": self.slots,
            "slots_used": min(self.slots, len(self.running) + len(self.held)),
            "slots_free": self.slots_free,
            "running": sorted(self.running),
            "draining": self.draining,
            "heartbeat_age": round(time.time() - self.last_heartbeat, 3),
            "connected_at": self.connected_at,
        }

    def claims(self) -> list[AgentClaim]:
        """The claims its free slots ask for (core.flow.agent_claims: one, or one per bulkhead)."""
        if not self.queue_slots:
            return [AgentClaim(self.queues, self.free)] if self.free > 0 else []
        self.run_queue = {j: q for j, q in self.run_queue.items() if j in self.running}
        used: dict[str, int] = {}
        for q in self.run_queue.values():
            used[q] = used.get(q, 0) + 1
        return agent_claims(self.queues, self.slots, self.queue_slots, used, self.busy, self.free)

    async def assign(self, jobs: list[Job], extras: dict[int, Message] | None = None) -> None:
        self.assigned_at = time.monotonic()
        for j in jobs:
            self.running[j.id] = j.attempt
            if self.queue_slots:
                self.run_queue[j.id] = j.queue
        if self.prefetch:
            self._given.append((self.assigned_at, [j.id for j in jobs]))
            if len(self._given) > 2 * self.slots + 8:  # a long run at the head: forget the ended ones behind it
                self._given = collections.deque(g for g in self._given if any(j in self.running for j in g[1]))
        extras = extras or {}
        await self.channel.send({"type": "assign", "jobs": [assignment(j, extras.get(j.id)) for j in jobs]})

    async def cancel(self, job_id: int, attempt: int, reason: str | None = None) -> None:
        """Stop a run: cancelled by request, or (with `reason`) refused: its attempt is not this agent's."""
        msg: Message = {"type": "cancel", "job_id": job_id, "attempt": attempt}
        if reason:
            msg["reason"] = reason
        await self.channel.send(msg)

    async def serve(self) -> None:
        """Handle the agent's messages until it disconnects."""
        try:
            while True:
                msg = await self.channel.recv()
                self.last_heartbeat = time.time()  # any message shows the agent is alive
                kind = msg.get("type")
                if kind == "result":
                    self.take_results(msg["results"])
                elif kind == "heartbeat":
                    self.last_heartbeat = time.time()
                    finished = [(int(j), int(a)) for j, a in msg.get("finished", [])]
                    self.still_held(finished)
                    await self.hub.heartbeat(self, [(int(j), int(a)) for j, a in msg.get("running", [])], finished)
                elif kind == "output":
                    self.hub.record_output(self, msg["chunks"])
                elif kind == "draining":
                    self.draining = True
                elif kind == "hand_back":
                    await self.hub.hand_back(self, msg["jobs"])
                else:
                    log.warning("agent %s sent an unknown message type %r", self.name, kind)
        except (ChannelClosed, asyncio.CancelledError, ConnectionError):
            pass

    def still_held(self, finished: list[tuple[int, int]]) -> None:
        """The agent's heartbeat lists the results it holds: a slot kept for one it no longer
        holds (acknowledged by another node) is free again."""
        if self.held:
            keep = set(finished)
            self.held = {j: a for j, a in self.held.items() if (j, a) in keep}

    def take_results(self, results: list[Message]) -> None:
        """Queue an agent's results for the recorder. The serve loop goes on reading meanwhile, so
        the results that arrive while one batch commits are recorded together in the next: one
        transaction per batch, not one per message (the agent sends each run's result as it ends)."""
        self._results += results
        if self.hub.engine.pair_with_claim():
            # Writes wait for the claim that fills these slots: record now, into the same commit,
            # even while an earlier batch commits (the writer keeps their order). Messages that
            # arrive before the task runs join its batch (one op, not one per message).
            if not self._held_batch_due:
                self._held_batch_due = True
                task = asyncio.create_task(self._record_held(), name=f"jobdeck-results-{self.name}")
                self._recording.add(task)
                task.add_done_callback(self._recording.discard)
        elif self._recorder is None or self._recorder.done():
            self._recorder = asyncio.create_task(self._record(), name=f"jobdeck-results-{self.name}")

    async def _record_held(self) -> None:
        self._held_batch_due = False
        batch, self._results = self._results, []
        if batch:
            await self._record_batch(batch)

    async def _record(self) -> None:
        while self._results:
            batch, self._results = self._results, []
            await self._record_batch(batch)

    async def _record_batch(self, batch: list[Message]) -> None:
        """Write one batch. Its runs' slots count as free from here (the dispatcher claims for them
        while the results commit, often in the same transaction), not from the message's arrival:
        the batch is in the writer's queue before any claim for those slots, and the writer keeps
        that order, so a late result of a lost attempt is recorded before a claim could start the
        job's retry (which would refuse the result: the job would run twice)."""
        took = 0.0
        timed = 0
        for r in batch:
            job_id, attempt = int(r["job_id"]), int(r["attempt"])
            if self.running.get(job_id) == attempt:
                self.finishing[job_id] = attempt
            if self.held.get(job_id) == attempt:
                del self.held[job_id]
            started, finished = r.get("started_at"), r.get("finished_at")
            if isinstance(started, int | float) and isinstance(finished, int | float):
                took += max(0.0, finished - started)
                timed += 1
        if timed:
            mean = took / timed
            self.run_seconds = mean if self.run_seconds is None else 0.7 * self.run_seconds + 0.3 * mean
        self.hub.engine.wake()  # the dispatcher runs once this task waits: after the batch is queued
        self.hub.engine.result_batches += 1
        self.hub.engine.results += len(batch)
        try:
            await self.hub.finish_attempts(self, batch)
        except Exception:
            log.exception("could not record %d results from agent %s", len(batch), self.name)
        finally:
            for r in batch:
                job_id = int(r["job_id"])
                if self.finishing.get(job_id) == int(r["attempt"]):
                    del self.finishing[job_id]
