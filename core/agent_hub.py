"""Every agent connected to this node: registration, taking back the runs of a reconnecting
agent, heartbeats, live output, results, draining, and why a job no agent can take waits."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from core.agent_session import AgentSession
from core.breaker import breaker_key
from core.errors import JobDeckError, NotFound
from core.flow import UNLIMITED, Bucket, waiting_reason
from core.model import (
    Job,
    RunResult,
    decide_finish,
    decide_hand_back,
    decide_lost,
    labels_satisfied,
    labels_text,
    stale_run_reason,
)
from core.protocol import PROTOCOL_VERSION, Channel, ChannelClosed
from core.store.base import Decide, JobFilter, ephemeral_event

if TYPE_CHECKING:
    from core.engine import Engine

log = logging.getLogger("jobdeck.agents")

RUN_RESULT_FIELDS = frozenset(f.name for f in dataclasses.fields(RunResult))


def _pairs(value: Any) -> list[tuple[int, int]]:
    """[[job, attempt], ...] of a register or heartbeat message as tuples."""
    return [(int(j), int(a)) for j, a in value or []]


def _room_for(s: AgentSession, queue: str) -> bool:
    """Whether the agent's next claims may take a job of `queue` now."""
    return any(c.limit > 0 and (c.queues is None or queue in c.queues) and queue not in c.leave
               and (c.caps is None or c.caps.get(queue, c.limit) > 0) for c in s.claims())  # fmt: skip


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
        self._registering: set[str] = set()

    async def attach(self, channel: Channel, may_serve: Callable[[list[str]], str | None] | None = None) -> None:
        """Serve one agent on `channel` until it disconnects: check its registration (and, with
        `may_serve`, that its credentials allow its queues), take back the jobs it still runs
        (stopping any whose lease was lost meanwhile), release at once the runs leased to its name
        that it no longer has (it restarted, or an assignment never reached it), then serve it."""
        hello = await channel.recv()
        problem = self._registration_problem(hello)
        if problem is None and may_serve is not None:
            problem = may_serve([str(q) for q in hello.get("queues") or ["*"]])
        refusal: dict[str, Any] = {}
        if problem is None:
            problem = await self._name_problem(hello)
            # The name may be held by the agent's own dead process (not noticed yet): the agent may
            # try again for a lease, after which a silent connection is dropped.
            refusal = {"retry_seconds": 2 * self.policy.lease_seconds} if problem else {}
        if problem is not None:
            log.warning("refused an agent: %s", problem)
            with contextlib.suppress(ChannelClosed, ConnectionError):
                await channel.send({"type": "error", "message": problem, **refusal})
                await channel.close()
            return
        session = AgentSession(self, channel, hello)
        self._registering.add(session.name)
        try:
            await channel.send(
                {"type": "welcome", "protocol": PROTOCOL_VERSION, "lease_seconds": self.policy.lease_seconds}
            )
            running, finished = _pairs(hello.get("running")), _pairs(hello.get("finished"))
            await self._adopt(session, running, finished)
            # Before the session can take work: nothing is leased to it here that it was not told of.
            await self._release_forgotten(session, {*running, *finished})
            self.sessions[session.name] = session
        finally:
            self._registering.discard(session.name)
        await self.store.record_event(
            "agent.connected", {"agent": session.to_dict(), "node": self.node_id, "instance": session.instance}
        )
        self.engine.wake()
        try:
            await session.serve()
        finally:
            if self.sessions.get(session.name) is session:
                del self.sessions[session.name]
            # Its jobs keep their leases: if it comes back it goes on, if not the reaper takes them.
            with contextlib.suppress(Exception):
                await self.store.record_event(
                    "agent.disconnected", {"agent": session.name, "node": self.node_id, "instance": session.instance}
                )

    async def _name_problem(self, hello: dict[str, Any]) -> str | None:
        """An agent name is one live agent's: a namesake (another instance) is refused while the name
        is connected here or, as the other nodes last said, there. The same instance (a reconnect,
        or a restart with its state folder) takes the name over: its old connection is closed."""
        name, instance = str(hello["name"]), str(hello.get("instance", ""))
        if name in self._registering:
            return f"an agent named {name!r} is registering already; use --name"
        old = self.sessions.get(name)
        if old is not None:
            if old.instance != instance or not instance:
                return f"an agent named {name!r} is connected already (from {old.host}, pid {old.pid}); use --name"
            self.sessions.pop(name, None)
            await old.channel.close()  # the same agent reconnected before we saw it leave
            return None
        seen = self.remote.get(name)
        if seen is not None and time.monotonic() - seen[1] < self.policy.lease_seconds:
            other = seen[0]
            if other.get("instance") != instance or not instance:
                return (
                    f"an agent named {name!r} is connected to another node already "
                    f"(from {other.get('host')}, pid {other.get('pid')}); use --name"
                )
        return None

    async def _release_forgotten(self, session: AgentSession, held: set[tuple[int, int]]) -> None:
        """Runs leased to this agent's name that it neither runs nor holds a result of are gone (the
        process restarted, or the assignment was lost with a node): lost now and retried, instead
        of waiting for their leases. Each is fenced by its attempt number."""
        gone = [(j, a) for j, a in await self.store.leased_attempts(session.name) if (j, a) not in held]
        if not gone:
            return
        reason = f"agent {session.name} came back without this run (it restarted, or the assignment was lost)"
        now = self.clock()
        decisions: dict[int, Decide] = {
            j: functools.partial(lambda a, job: decide_lost(job, reason, now, self.policy, attempt=a), a)
            for j, a in gone
        }
        out = await self.store.change_jobs(decisions)
        lost = [j for j, res in out.items() if isinstance(res, Job)]
        if lost:
            log.warning("agent %s reconnected without %d of its runs: recorded lost, retried now", session.name,
                        len(lost))  # fmt: skip
            self.engine.wake_promoter()

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
        session.held = dict(finished)  # their slots are taken until the results arrive
        until = self.clock() + self.policy.lease_seconds
        stale = set(await self.store.extend_leases(session.name, running + finished, until))
        for job_id, attempt in running:
            if (job_id, attempt) not in stale:
                session.running[job_id] = attempt
            else:
                await self._refuse_run(session, job_id, attempt)

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
            {k: v for k, v in a.items() if k != "instance"}
            for a, seen in self.remote.values()
            if now - seen < self.policy.lease_seconds and a["name"] not in self.sessions
        ]
        return sorted(mine + theirs, key=lambda a: str(a["name"]))

    def announce(self) -> None:
        """Tell the other nodes which agents this node holds (a live event; they forget it after a lease)."""
        if self.sessions:
            agents = [dict(s.to_dict(), node=self.node_id, instance=s.instance) for s in self.sessions.values()]
            self.bus.publish([ephemeral_event("agent.status", None, {"node": self.node_id, "agents": agents})])

    def remember(self, data: dict[str, Any]) -> None:
        """Another node's announcement of its agents."""
        if data.get("node") == self.node_id:
            return
        now = time.monotonic()
        node = data.get("node")
        listed = {str(a["name"]) for a in data.get("agents", [])}
        for name, (a, _) in list(self.remote.items()):
            if a.get("node") == node and name not in listed:
                del self.remote[name]  # it left that node
        for a in data.get("agents", []):
            self.remote[str(a["name"])] = (a, now)

    async def heard_connected(self, data: dict[str, Any]) -> None:
        """An agent registered on some node (an agent.connected event). If it is one of ours, the
        agent moved and our session of it is a ghost: close it, so nothing more is assigned to it."""
        if data.get("node") == self.node_id:
            return
        agent = dict(data.get("agent") or {}, node=data.get("node"), instance=data.get("instance"))
        name = str(agent.get("name"))
        self.remote[name] = (agent, time.monotonic())
        ghost = self.sessions.get(name)
        if ghost is not None and ghost.instance == data.get("instance"):
            log.warning("agent %s reconnected to another node: closing its old connection here", name)
            self.sessions.pop(name, None)
            with contextlib.suppress(Exception):
                await ghost.channel.close()

    def heard_disconnected(self, data: dict[str, Any]) -> None:
        """An agent left another node (an agent.disconnected event)."""
        name = str(data.get("agent"))
        seen = self.remote.get(name)
        if data.get("node") != self.node_id and seen is not None and seen[0].get("node") == data.get("node"):
            del self.remote[name]

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
        agents = self._offers()
        if not agents:
            return "no agent is connected"
        serving = [a for a in agents if a[0] is None or job.queue in a[0]]
        if not serving:
            return f"no connected agent serves queue {job.queue!r}"
        able = [a for a in serving if labels_satisfied(job.labels, a[1])]
        if not able:
            return f"no connected agent has the labels {labels_text(job.labels)}"
        if all(a[2] for a in able):
            return "every agent that could run it is draining"
        return self._bulkhead_reason(job, len(able))

    def _bulkhead_reason(self, job: Job, able: int) -> str | None:
        """Why a job waits although an agent that could run it has free slots: those slots are kept
        for other queues (bulkheads), and the slots its own queue may use are busy. Only when every
        agent that could run it is this node's (another node's agents' slot use is not known here)."""
        mine = [s for s in self.sessions.values() if not s.draining and (s.queues is None or job.queue in s.queues)
                and labels_satisfied(job.labels, s.labels)]  # fmt: skip
        if len(mine) != able or not any(s.free > 0 for s in mine) or any(_room_for(s, job.queue) for s in mine):
            return None
        parts = []
        for s in mine:
            kept = s.queue_slots.get(job.queue)
            if kept is not None:
                parts.append(f"agent {s.name} keeps {kept} slots for {job.queue!r}, all busy")
            else:
                others = ", ".join(sorted(s.queue_slots))
                parts.append(f"agent {s.name}'s shared slots are all busy (its free ones are kept for {others})")
        return f"the bulkhead of queue {job.queue!r} is full: " + "; ".join(parts)

    def slots_reason(self, job: Job) -> str | None:
        """Why a queued job waits when agents could run it but every slot they could give it is busy
        (None: one has room, so a claim takes it soon). Another node's agents count as they last
        announced their free slots."""
        if job.state != "queued":
            return None
        mine = [s for s in self.sessions.values() if not s.draining and (s.queues is None or job.queue in s.queues)
                and labels_satisfied(job.labels, s.labels)]  # fmt: skip
        if any(_room_for(s, job.queue) for s in mine):
            return None
        now = time.monotonic()
        # a bulkhead may keep its free ones for other queues; jobs given ahead wait beyond the slots
        busy = [(s.name, min(s.busy, s.slots), s.slots) for s in mine]
        for a, seen in self.remote.values():
            if (now - seen >= self.policy.lease_seconds or a["name"] in self.sessions or a["draining"]
                    or (a["queues"] != ["*"] and job.queue not in a["queues"])
                    or not labels_satisfied(job.labels, a["labels"])):  # fmt: skip
                continue
            if a["slots_free"] > 0:
                return None
            busy.append((a["name"], a["slots_used"], a["slots"]))
        if not busy:
            return None
        used, slots = sum(b[1] for b in busy), sum(b[2] for b in busy)
        kept = "" if used >= slots else f" (the other {slots - used} are kept for other queues)"
        if len(busy) == 1:
            return f"no free slot: agent {busy[0][0]} runs {used} of its {slots} slots{kept}"
        return f"no free slot: the {len(busy)} agents that could run it run {used} of their {slots} slots{kept}"

    def _offers(self) -> list[tuple[Collection[str] | None, dict[str, str], bool]]:
        """(queues, None for all; labels; draining) of each agent describe() lists, read without
        building its view: every submit asks, and a view sorts the agent's running jobs."""
        now = time.monotonic()
        mine = [(s.queues, s.labels, s.draining) for s in self.sessions.values()]
        theirs = [
            (None if a["queues"] == ["*"] else a["queues"], a["labels"], a["draining"])
            for a, seen in self.remote.values()
            if now - seen < self.policy.lease_seconds and a["name"] not in self.sessions
        ]
        return mine + theirs

    async def finish_attempts(self, session: AgentSession, results: list[dict[str, Any]]) -> None:
        """Record what an agent reports, then acknowledge each result: recorded (None) or refused
        with the reason (the attempt number is the fence: a result of an attempt that is not the
        job's running one is refused). Nothing is acknowledged when the store cannot write them:
        the agent holds them and sends them again."""
        began = time.time()
        decisions: dict[int, Decide] = {}
        runs: dict[int, RunResult] = {}
        reported: dict[int, dict[str, Any]] = {}
        for r in results:
            rr = RunResult(**{k: v for k, v in r.items() if k in RUN_RESULT_FIELDS})
            runs[rr.job_id] = rr
            reported[rr.job_id] = r
            decisions[rr.job_id] = functools.partial(self._decide_finish, rr)
        try:
            out = await self.store.change_jobs(decisions)
        except Exception as exc:
            log.warning(
                "could not record %d results from %s (%s): it sends them again", len(results), session.name, exc
            )
            return
        acks: list[list[Any]] = []
        ran: list[tuple[str, str, float | None, float | None]] = []  # for the run-time histogram, at once
        sent: list[tuple[str, str, int, bool]] = []  # outcomes of http requests, for their breakers
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
            if (ok := reported[job_id].get("breaker_ok")) is not None and (host := breaker_key(res.task)):
                sent.append((res.queue, host, job_id, bool(ok)))
            ran.append((res.queue, rr.outcome, rr.started_at, rr.finished_at))
            self.engine.tracing.result(res, rr.outcome, rr.attempt, began)
            if res.state == "failed" and res.run_at < self.engine.next_promote_at:
                self.engine.wake_promoter()
        self.engine.metrics.ran(ran)
        self.engine.wake()
        with contextlib.suppress(ChannelClosed, ConnectionError):
            await session.channel.send({"type": "result_ack", "results": acks})
        try:
            await self.engine.breakers.record(sent)
        except Exception as exc:  # the results are recorded; a breaker missing a few outcomes is still a breaker
            log.warning("could not count %d request outcomes in their circuit breakers: %s", len(sent), exc)

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
            await self._refuse_run(session, job_id, attempt)

    async def _refuse_run(self, session: AgentSession, job_id: int, attempt: int) -> None:
        """The agent reports a run whose lease is not its own any more: stop it, saying why (the agent
        logs the reason). A newer attempt may run elsewhere, so this one must not go on."""
        try:
            reason = stale_run_reason(await self.store.get_job(job_id), attempt, session.name)
        except NotFound:
            reason = f"job {job_id} attempt {attempt} is no longer agent {session.name}'s to run: the job was deleted"
        log.warning("stopping a run agent %s reported: %s", session.name, reason)
        await session.cancel(job_id, attempt, reason)

    def record_output(self, session: AgentSession, chunks: list[list[Any]]) -> None:
        """Live output of running jobs: kept as a tail per attempt and streamed on the feed."""
        events = []
        for job_id, attempt, text in chunks:
            tail = self.live_output.setdefault((int(job_id), int(attempt)), "") + text
            self.live_output[(int(job_id), int(attempt))] = tail[-self.settings.output_tail_bytes :]
            events.append(ephemeral_event("job.output", int(job_id), {"attempt": attempt, "text": text}))
        self.bus.publish(events)

    async def hand_back(self, session: AgentSession, jobs: list[list[int]]) -> None:
        """The agent returns jobs it did not start (draining, or given ahead and kept waiting by runs
        that turned out long: no more jobs ahead until its results say its runs are short again)."""
        session.run_seconds = None
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
