"""Every agent connected to this node: registration, taking back the runs of a reconnecting
agent, heartbeats, live output, results, draining, and why a job no agent can take waits."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from core.agent_session import AgentSession
from core.errors import JobDeckError, NotFound
from core.flow import UNLIMITED, Bucket, waiting_reason
from core.model import Job, RunResult, decide_finish, decide_hand_back, decide_lost, labels_satisfied, labels_text
from core.protocol import PROTOCOL_VERSION, Channel, ChannelClosed
from core.store.base import Decide, JobFilter, ephemeral_event

if TYPE_CHECKING:
    from core.engine import Engine

log = logging.getLogger("jobdeck.agents")

RUN_RESULT_FIELDS = frozenset(f.name for f in dataclasses.fields(RunResult))


def _pairs(value: Any) -> list[tuple[int, int]]:
    """[[job, attempt], ...] of a register or heartbeat message as tuples."""
    return [(int(j), int(a)) for j, a in value or []]


class AgentHub:
    """The agents of one node, as the engine sees them."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.store = engine.store
        self.bus = engine.bus
        self.settings = engine.settings
        self.policy = engine.policy
        self.clock = engine.clock
        self.sessions: dict[str, AgentSession] = {}
        self.node_id = uuid.uuid4().hex
        self.remote: dict[str, tuple[dict[str, Any], float]] = {}  # agents of other nodes, when heard
        self.live_output: dict[tuple[int, int], str] = {}  # (job, attempt) -> tail of a running job

    async def attach(self, channel: Channel, may_serve: Callable[[list[str]], str | None] | None = None) -> None:
        """Serve one agent on `channel` until it disconnects: check its registration (and, with
        `may_serve`, that its credentials allow its queues), take back the jobs it still runs
        (stopping any whose lease was lost meanwhile), then serve it."""
        hello = await channel.recv()
        problem = self._registration_problem(hello)
        if problem is None and may_serve is not None:
            problem = may_serve([str(q) for q in hello.get("queues") or ["*"]])
        if problem is None and hello["name"] in self.sessions:
            old = self.sessions[hello["name"]]
            if old.instance == hello.get("instance"):
                await old.channel.close()  # the same process reconnected before we saw it leave
                self.sessions.pop(old.name, None)
            else:
                problem = (
                    f"an agent named {old.name!r} is connected already (from {old.host}, pid {old.pid}); use --name"
                )
        if problem is not None:
            log.warning("refused an agent: %s", problem)
            with contextlib.suppress(ChannelClosed, ConnectionError):
                await channel.send({"type": "error", "message": problem})
                await channel.close()
            return
        session = AgentSession(self, channel, hello)
        self.sessions[session.name] = session
        await channel.send(
            {"type": "welcome", "protocol": PROTOCOL_VERSION, "lease_seconds": self.policy.lease_seconds}
        )
        await self._adopt(session, _pairs(hello.get("running")), _pairs(hello.get("finished")))
        await self.store.record_event("agent.connected", {"agent": session.to_dict()})
        self.engine.wake()
        try:
            await session.serve()
        finally:
            if self.sessions.get(session.name) is session:
                del self.sessions[session.name]
            # Its jobs keep their leases: if it comes back it goes on, if not the reaper takes them.
            with contextlib.suppress(Exception):
                await self.store.record_event("agent.disconnected", {"agent": session.name})

    def _registration_problem(self, hello: dict[str, Any]) -> str | None:
        if hello.get("type") != "register" or not hello.get("name"):
            return "the first message must be a register message with a name"
        if hello.get("protocol") != PROTOCOL_VERSION:
            return (
                f"this agent speaks protocol {hello.get('protocol')} but the core speaks {PROTOCOL_VERSION}: "
                "run the same JobDeck version on both"
            )
        slots = hello.get("slots")
        if not isinstance(slots, int) or slots < 0:
            return f"slots must be a whole number >= 0, not {slots!r}"
        return None

    async def _adopt(
        self, session: AgentSession, running: list[tuple[int, int]], finished: list[tuple[int, int]]
    ) -> None:
        """Keep the runs the agent still has whose leases are still ours; stop the others. Runs it
        finished and holds the results of keep their leases until those results arrive."""
        if not running and not finished:
            return
        until = self.clock() + self.policy.lease_seconds
        stale = set(await self.store.extend_leases(session.name, running + finished, until))
        for job_id, attempt in running:
            if (job_id, attempt) not in stale:
                session.running[job_id] = attempt
            else:
                log.warning(
                    "agent %s still runs job %s attempt %s, whose lease it lost: stopping it",
                    session.name, job_id, attempt,
                )  # fmt: skip
                await session.cancel(job_id, attempt)

    async def reclaim_orphans(self, prefix: str, current: str) -> None:
        """Right after start: runs of this node's earlier local agents (named `prefix`...) died with
        it, so count them lost now instead of waiting for their leases. Only safe where one node
        owns the store (the embedded SQLite file is locked by its node)."""
        running = await self.store.list_jobs(JobFilter(states=("running",)), None, 100_000)
        orphans = [j.id for j in running if (j.agent or "").startswith(prefix) and j.agent != current]
        if orphans:
            reason = "the node restarted during the run (its local agent died with it)"
            await self.engine.change_many(orphans, lambda job: decide_lost(job, reason, self.clock(), self.policy))
            log.warning("%d jobs were running when this node last stopped; they are retried", len(orphans))
            self.engine.wake_promoter()
            self.engine.wake()

    def describe(self) -> list[dict[str, Any]]:
        """Agents connected to this node and, as they last announced them, to the others."""
        now = time.monotonic()
        mine = [dict(s.to_dict(), node=self.node_id) for s in self.sessions.values()]
        theirs = [
            a
            for a, seen in self.remote.values()
            if now - seen < self.policy.lease_seconds and a["name"] not in self.sessions
        ]
        return sorted(mine + theirs, key=lambda a: str(a["name"]))

    def announce(self) -> None:
        """Tell the other nodes which agents this node holds (a live event; they forget it after a lease)."""
        if self.sessions:
            agents = [dict(s.to_dict(), node=self.node_id) for s in self.sessions.values()]
            self.bus.publish([ephemeral_event("agent.status", None, {"node": self.node_id, "agents": agents})])

    def remember(self, data: dict[str, Any]) -> None:
        """Another node's announcement of its agents."""
        if data.get("node") == self.node_id:
            return
        now = time.monotonic()
        for a in data.get("agents", []):
            self.remote[str(a["name"])] = (a, now)

    async def drain(self, name: str) -> dict[str, Any]:
        """Give an agent no new work; it finishes what it runs and stays connected. An agent of
        another node is asked through the bus."""
        session = self.sessions.get(name)
        if session is None:
            known = {a["name"]: a for a in self.describe()}
            if name not in known:
                raise NotFound(f"no agent named {name!r} is connected", field="name")
            self.bus.publish([ephemeral_event("agent.drain", None, {"agent": name})])
            return dict(known[name], draining=True)
        session.draining = True
        with contextlib.suppress(ChannelClosed, ConnectionError):
            await session.channel.send({"type": "drain"})
        await self.store.record_event("agent.draining", {"agent": name})
        return session.to_dict()

    def waiting_for(self, job: Job) -> str | None:
        """Why a queued job is not running, when no connected agent (of any node) could take it."""
        if job.state != "queued":
            return None
        limits = self.engine.queue_settings.get(job.queue, UNLIMITED)
        if limits.paused or limits.concurrency == 0:
            return waiting_reason(job.queue, limits, 0, Bucket(None, None), 0.0)
        agents = self.describe()
        if not agents:
            return "no agent is connected"
        serving = [a for a in agents if a["queues"] == ["*"] or job.queue in a["queues"]]
        if not serving:
            return f"no connected agent serves queue {job.queue!r}"
        able = [a for a in serving if labels_satisfied(job.labels, a["labels"])]
        if not able:
            return f"no connected agent has the labels {labels_text(job.labels)}"
        if all(a["draining"] for a in able):
            return "every agent that could run it is draining"
        return None

    async def finish_attempts(self, session: AgentSession, results: list[dict[str, Any]]) -> None:
        """Record what an agent reports, then acknowledge each result: recorded (None) or refused
        with the reason (the attempt number is the fence: a result of an attempt that is not the
        job's running one is refused). Nothing is acknowledged when the store cannot write them:
        the agent holds them and sends them again."""
        decisions: dict[int, Decide] = {}
        runs: dict[int, RunResult] = {}
        for r in results:
            rr = RunResult(**{k: v for k, v in r.items() if k in RUN_RESULT_FIELDS})
            runs[rr.job_id] = rr
            decisions[rr.job_id] = functools.partial(self._decide_finish, rr)
        try:
            out = await self.store.change_jobs(decisions)
        except Exception as exc:
            log.warning(
                "could not record %d results from %s (%s): it sends them again", len(results), session.name, exc
            )
            return
        metrics = self.engine.metrics
        acks: list[list[Any]] = []
        for job_id, res in out.items():
            rr = runs[job_id]
            if session.running.get(job_id) == rr.attempt:
                del session.running[job_id]
            self.live_output.pop((job_id, rr.attempt), None)
            if isinstance(res, JobDeckError):
                log.info("refused a result from %s: %s", session.name, res.message)
                acks.append([job_id, rr.attempt, res.message])
                continue
            acks.append([job_id, rr.attempt, None])
            metrics.ran(res.queue, rr.outcome, rr.started_at, rr.finished_at)
            if res.state == "failed" and res.run_at < self.engine.next_promote_at:
                self.engine.wake_promoter()
        self.engine.wake()
        with contextlib.suppress(ChannelClosed, ConnectionError):
            await session.channel.send({"type": "result_ack", "results": acks})

    def _decide_finish(self, rr: RunResult, job: Job) -> Any:
        return decide_finish(job, rr, self.clock(), self.policy)

    async def heartbeat(
        self, session: AgentSession, running: Sequence[tuple[int, int]], finished: Sequence[tuple[int, int]] = ()
    ) -> None:
        """The agent still runs these (job, attempt) pairs, and holds the results of `finished` ones
        not yet acknowledged: extend their leases (a result waiting behind a large batch must not
        see its lease run out). A run whose lease is no longer this agent's (expired and retried
        elsewhere, or fenced) is told to stop."""
        until = self.clock() + self.policy.lease_seconds
        stale = await self.store.extend_leases(session.name, [*running, *finished], until)
        done = set(finished)
        for job_id, attempt in stale:
            if (job_id, attempt) in done:
                continue  # its result is on its way; the fence decides when it arrives
            session.running.pop(job_id, None)
            await session.cancel(job_id, attempt)

    def record_output(self, session: AgentSession, chunks: list[list[Any]]) -> None:
        """Live output of running jobs: kept as a tail per attempt and streamed on the feed."""
        events = []
        for job_id, attempt, text in chunks:
            tail = self.live_output.setdefault((int(job_id), int(attempt)), "") + text
            self.live_output[(int(job_id), int(attempt))] = tail[-self.settings.output_tail_bytes :]
            events.append(ephemeral_event("job.output", int(job_id), {"attempt": attempt, "text": text}))
        self.bus.publish(events)

    async def hand_back(self, session: AgentSession, jobs: list[list[int]]) -> None:
        """The agent returns jobs it did not start."""
        decisions: dict[int, Decide] = {}
        for job_id, attempt in jobs:
            session.running.pop(job_id, None)
            decisions[job_id] = functools.partial(
                lambda a, job: decide_hand_back(job, a, self.clock(), self.policy), attempt
            )
        await self.store.change_jobs(decisions)
        self.engine.wake()

    async def send_cancel(self, agent: str | None, job_id: int, attempt: int) -> None:
        session = self.sessions.get(agent or "")
        if session is not None and session.running.get(job_id) == attempt:
            with contextlib.suppress(ChannelClosed, ConnectionError):
                await session.cancel(job_id, attempt)

    async def drop_silent_agents(self) -> None:
        """An agent that has said nothing for a whole lease is lost: close it (its leases run out)."""
        cutoff = time.time() - self.policy.lease_seconds
        for s in list(self.sessions.values()):
            if s.last_heartbeat < cutoff:
                log.warning(
                    "agent %s missed its heartbeats for %.0f s: marking it lost", s.name, self.policy.lease_seconds
                )
                self.sessions.pop(s.name, None)
                with contextlib.suppress(Exception):
                    await s.channel.close()
