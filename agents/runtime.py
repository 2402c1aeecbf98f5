"""The agent runtime: takes assignments over a channel, runs them in slots, reports results.

The same runtime serves `jobdeck up` (an in-process channel) and remote agents (a WebSocket).
Its jobs outlive a connection: when the link to the core drops, running jobs go on, results
wait, and on reconnect the agent registers again with the jobs it still runs and the results it
still holds. A result is held until a core acknowledges it (recorded, or refused with a reason):
it is sent again on every new connection, to any node, and after RESEND_SECONDS without an
answer. With a state folder (agents/state.py) held results survive the agent's own death too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agents.handlers import HANDLERS, RunContext
from agents.pool import WorkerPool
from agents.secrets import SecretStore
from agents.state import AgentStateDir
from core.obs import logs
from core.obs.tracing import Tracing
from core.protocol import PROTOCOL_VERSION, Channel, ChannelClosed, Message

log = logging.getLogger("jobdeck.agent")

VERSION = "0.1.0"
OUTPUT_FLUSH_SECONDS = 0.2
RESEND_SECONDS = 10.0  # a result sent without an acknowledgement for this long is sent again
# An assignment beyond the slots (the core gives an agent of short runs its next jobs ahead, see
# AgentConfig.prefetch) that waited this long for a slot goes back to the core, for another agent.
PREFETCH_WAIT_SECONDS = 1.0


@dataclass
class AgentConfig:
    """Who the agent is and how much it takes on."""

    name: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    queues: tuple[str, ...] = ("*",)
    slots: int = 32
    # Assignments it takes beyond its slots, each started as a slot frees (None: as many as its slots).
    # The core gives them only while the agent's runs are short: the next jobs then wait here a moment,
    # not for the commit of their claim (core/agent_session.py AgentSession.ahead).
    prefetch: int | None = None
    queue_slots: dict[str, int] = field(default_factory=dict)  # bulkheads: slots kept for a queue
    labels: dict[str, str] = field(default_factory=dict)
    heartbeat_seconds: float = 5.0
    kill_grace_seconds: float = 5.0
    output_tail_bytes: int = 64 * 1024
    secrets_dir: str | None = None  # a folder with one file per secret (besides JOBDECK_SECRET_* variables)
    state_dir: str | None = None  # identity and unacknowledged results, kept across restarts (agents/state.py)
    tracing: Tracing = field(default_factory=Tracing)  # spans of its runs (core/obs/tracing.py); off by default


MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # results are sent in messages of at most about this size
MAX_RESULT_BYTES = 256 * 1024  # a job's return value is kept up to this size


def _first_batch(results: list[tuple[Message, int]]) -> list[tuple[Message, int]]:
    """The longest prefix of (report, size) pairs that fits one message (at least one report)."""
    total = 0
    for i, (_, size) in enumerate(results):
        total += size
        if total > MAX_MESSAGE_BYTES and i > 0:
            return results[:i]
    return results[:]


class AgentRefused(Exception):
    """The core will not take this agent (bad protocol version, name in use, bad token)."""


class NameBusy(AgentRefused):
    """The agent's name is held by a connection the core still counts as live: perhaps this
    agent's own dead process, not yet noticed. Worth trying again for `retry_seconds`."""

    def __init__(self, message: str, retry_seconds: float) -> None:
        super().__init__(message)
        self.retry_seconds = retry_seconds


def _jsonable(value: Any) -> tuple[Any, int]:
    """The value as the job's result (and its JSON size): repr() if it is not JSON, a note if too big."""
    try:
        size = len(orjson.dumps(value))
    except TypeError:
        value = repr(value)
        size = len(value)
    if size > MAX_RESULT_BYTES:
        return f"[result of {size} bytes not kept: over {MAX_RESULT_BYTES}; store big data elsewhere]", 100
    return value, size


class AgentRuntime:
    """Runs the jobs a core node assigns, each in a slot, and reports them in batches."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.state: AgentStateDir | None = None
        if config.state_dir:
            self.state = AgentStateDir(Path(config.state_dir))
            self.state.acquire()  # StateDirBusy: another process is this agent already
        # Tells this agent (this process, or a restart of it with its state folder) from a namesake.
        self.instance = self.state.instance() if self.state else uuid.uuid4().hex
        self.tasks: dict[int, tuple[int, asyncio.Task[None]]] = {}  # job id -> (attempt, task)
        # Assignments beyond the slots, in the order they came: job id -> (attempt, assignment, since when)
        self._waiting: dict[int, tuple[int, Message, float]] = {}
        self._waiting_timer: asyncio.TimerHandle | None = None
        self._handing_back: set[asyncio.Task[None]] = set()
        self._cancelled: set[tuple[int, int]] = set()
        self._refused: dict[tuple[int, int], str] = {}  # runs the core stopped as not ours, and why
        # Finished reports (with their rough size) no core has acknowledged, in the order they
        # finished; those of them to send on this connection; when each was last sent.
        self._unacked: dict[tuple[int, int], tuple[Message, int]] = {}
        self._to_send: dict[tuple[int, int], None] = {}
        self._sent_at: dict[tuple[int, int], float] = {}
        self._to_write: list[tuple[int, int]] = []  # held results not in the state folder yet
        self._to_drop: list[tuple[int, int]] = []  # acknowledged ones still in it
        self._state_lock = asyncio.Lock()
        self._syncing: asyncio.Task[None] | None = None
        self._all_acked = asyncio.Event()
        self._all_acked.set()
        for report in self.state.kept_results() if self.state else []:
            key = (int(report["job_id"]), int(report["attempt"]))
            self._unacked[key] = (report, len(orjson.dumps(report)))
        if self._unacked:
            self._all_acked.clear()
            log.info("%d results of an earlier run of this agent wait for a core", len(self._unacked))
        self._results_ready = asyncio.Event()
        self._output: dict[tuple[int, int], list[bytes]] = {}
        self._job_started = asyncio.Event()  # the output streamer sleeps while nothing runs
        self._stopping = False
        self._hurry = asyncio.Event()
        self._channel: Channel | None = None
        self._beat = config.heartbeat_seconds
        self._lease = 3 * config.heartbeat_seconds  # until a core tells us its lease
        self._last_contact = time.monotonic()
        self._fenced: set[tuple[int, int]] = set()
        self.workers = WorkerPool(config.slots)  # sync python tasks run in these processes
        self.secrets = SecretStore(config.secrets_dir)

    # ------------------------------------------------------------ connections

    async def run_forever(self, connect: Callable[[], Awaitable[Channel]]) -> None:
        """Stay connected: reconnect with backoff whenever the link drops, until shut down."""
        delay = 0.2
        busy_until: float | None = None
        while not self._stopping:
            try:
                channel = await connect()
            except AgentRefused:
                raise
            except (OSError, ChannelClosed, TimeoutError) as exc:
                log.warning("cannot reach the core (%s); retrying in %.1f s", exc, delay)
                self._fence_if_out_of_touch()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            delay = 0.2
            try:
                await self.serve(channel)
            except NameBusy as exc:
                # A restart can beat the core to noticing that the old process died (a partition,
                # a node that died with it): wait for the name to come free, up to what it says.
                busy_until = busy_until or time.monotonic() + exc.retry_seconds
                if time.monotonic() > busy_until:
                    raise
                log.warning("%s; trying again for up to %.0f s", exc, busy_until - time.monotonic())
                await asyncio.sleep(1.0)
                continue
            except AgentRefused:
                raise
            except (ChannelClosed, ConnectionError, OSError) as exc:
                log.warning("the connection failed (%s)", exc)
            if not self._stopping:
                log.warning("lost the connection to the core; %d jobs keep running; reconnecting", len(self.tasks))

    async def serve(self, channel: Channel) -> None:
        """One connection's life: register, then take assignments until the channel closes."""
        c = self.config
        await channel.send(
            {
                "type": "register",
                "protocol": PROTOCOL_VERSION,
                "name": c.name,
                "instance": self.instance,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "version": VERSION,
                "queues": list(c.queues),
                "slots": c.slots,
                "prefetch": c.slots if c.prefetch is None else max(0, c.prefetch),
                "queue_slots": c.queue_slots,
                "labels": c.labels,
                "running": self.running_pairs(),
                "finished": self.finished_pairs(),
            }
        )
        first = await channel.recv()
        if first.get("type") == "error":
            await channel.close()
            if first.get("retry_seconds"):
                raise NameBusy(str(first.get("message")), float(first["retry_seconds"]))
            raise AgentRefused(str(first.get("message")))
        self._channel = channel
        # Beat at least three times a lease, whatever we were configured with.
        self._lease = float(first.get("lease_seconds") or 0) or self._lease
        self._beat = min(self.config.heartbeat_seconds, self._lease / 3)
        self._last_contact = time.monotonic()
        if self._stopping:
            await channel.send({"type": "draining"})
        self._to_send = dict.fromkeys(self._unacked)  # results that waited for this connection
        self._sent_at.clear()
        helpers = [
            asyncio.create_task(loop(channel)) for loop in (self._send_results, self._heartbeat, self._send_output)
        ]
        self._results_ready.set()
        try:
            while True:
                msg = await channel.recv()
                self._last_contact = time.monotonic()
                kind = msg.get("type")
                if kind == "assign":
                    if self._stopping:  # raced with our "draining": give them back unstarted
                        back = [[a["job_id"], a["attempt"]] for a in msg["jobs"]]
                        await channel.send({"type": "hand_back", "jobs": back})
                        continue
                    for a in msg["jobs"]:
                        self._start(a)
                elif kind == "result_ack":
                    self._acknowledged(msg["results"])
                elif kind == "cancel":
                    self._cancel(int(msg["job_id"]), int(msg["attempt"]), msg.get("reason"))
                elif kind == "drain":
                    log.info("the core asked this agent to drain: no new work")
                    self._stopping = True
                    await channel.send({"type": "draining"})
                    await self._hand_back_waiting(channel, self._waiting)
        except ChannelClosed:
            pass
        finally:
            self._channel = None
            for t in helpers:
                t.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)

    def _fence_if_out_of_touch(self) -> None:
        """Out of touch with every core for nearly a lease: our leases are running out and the
        jobs will be retried elsewhere, so stop them here first, or two runs could overlap."""
        if not self.tasks or time.monotonic() - self._last_contact < 0.8 * self._lease:
            return
        log.warning("no core reachable for %.0f s: stopping %d runs whose leases expire", self._lease, len(self.tasks))
        self._waiting.clear()  # not started: their leases run out too, and they run elsewhere
        for job_id, (attempt, task) in list(self.tasks.items()):
            self._fenced.add((job_id, attempt))
            task.cancel()

    def running_pairs(self) -> list[list[int]]:
        """[job id, attempt] of every job running here, or waiting for a slot (its lease is ours too)."""
        return [[j, a] for j, (a, _) in self.tasks.items()] + [[j, a] for j, (a, _, _) in self._waiting.items()]

    def finished_pairs(self) -> list[list[int]]:
        """[job id, attempt] of every finished run whose result no core has acknowledged yet."""
        return [[j, a] for j, a in self._unacked]

    # ------------------------------------------------------------ jobs

    def _start(self, a: Message) -> None:
        job_id, attempt = int(a["job_id"]), int(a["attempt"])
        if job_id in self.tasks or job_id in self._waiting:  # the core re-sent an assignment we already have
            return
        if len(self.tasks) >= self.config.slots:  # given ahead: it starts when a run ends
            self._waiting[job_id] = (attempt, a, time.monotonic())
            if self._waiting_timer is None:
                self._waiting_timer = asyncio.get_running_loop().call_later(PREFETCH_WAIT_SECONDS, self._hand_back_late)
            return
        self._launch(a)

    def _launch(self, a: Message) -> None:
        job_id, attempt = int(a["job_id"]), int(a["attempt"])
        task = asyncio.create_task(self._run_one(a), name=f"job-{job_id}")
        self.tasks[job_id] = (attempt, task)
        self._job_started.set()

    def _start_waiting(self) -> None:
        """Slots came free: start the assignments that wait for them, oldest first."""
        while self._waiting and len(self.tasks) < self.config.slots and not self._stopping:
            _, a, _ = self._waiting.pop(next(iter(self._waiting)))
            self._launch(a)

    def _hand_back_late(self) -> None:
        """Assignments that waited PREFETCH_WAIT_SECONDS for a slot (the runs ahead of them turned out
        long) go back to the core, which can give them to an agent with a free slot."""
        self._waiting_timer = None
        now = time.monotonic()
        late = {j: w for j, w in self._waiting.items() if now - w[2] >= PREFETCH_WAIT_SECONDS}
        if late and self._channel is not None:
            self._spawn_hand_back(self._channel, late)
        if self._waiting:
            since = min(w[2] for w in self._waiting.values())
            delay = max(0.0, since + PREFETCH_WAIT_SECONDS - now)
            self._waiting_timer = asyncio.get_running_loop().call_later(delay, self._hand_back_late)

    def _spawn_hand_back(self, channel: Channel, which: dict[int, tuple[int, Message, float]]) -> None:
        task = asyncio.create_task(self._hand_back_waiting(channel, which))
        self._handing_back.add(task)
        task.add_done_callback(self._handing_back.discard)

    async def _hand_back_waiting(self, channel: Channel, which: dict[int, tuple[int, Message, float]]) -> None:
        """Give back assignments that never started (the core queues them again, attempt not counted,
        or ends a cancelled one). Ones still here after a failed send are reported running on the next
        connection, as a started run is."""
        back = [[j, w[0]] for j, w in list(which.items()) if self._waiting.get(j) == w]
        if not back:
            return
        with contextlib.suppress(ChannelClosed, ConnectionError, OSError):
            await channel.send({"type": "hand_back", "jobs": back})
            for j, _ in back:
                self._waiting.pop(j, None)

    def _cancel(self, job_id: int, attempt: int, refusal: str | None = None) -> None:
        """Stop a run: cancelled by request, or refused (`refusal`: why the core will not let this
        attempt go on here, e.g. a newer attempt started while we were out of touch)."""
        waiting = self._waiting.get(job_id)
        if waiting is not None and waiting[0] == attempt:
            if refusal:  # not ours to run any more: it never started, so nothing goes back
                log.warning("the core took back job %s attempt %s before it started: %s", job_id, attempt, refusal)
                del self._waiting[job_id]
            elif self._channel is not None:  # handed back unstarted, the core ends it cancelled
                self._spawn_hand_back(self._channel, {job_id: waiting})
            return
        entry = self.tasks.get(job_id)
        if entry is None or entry[0] != attempt:
            return
        if refusal:
            log.warning("the core stopped job %s attempt %s: %s", job_id, attempt, refusal)
            self._refused[(job_id, attempt)] = refusal
        else:
            self._cancelled.add((job_id, attempt))
        entry[1].cancel()

    async def _run_one(self, a: Message) -> None:
        job_id, attempt = int(a["job_id"]), int(a["attempt"])
        logs.job.set((job_id, attempt, str(a.get("queue") or "")))  # this task's own context: its log lines' ids
        task: dict[str, Any] = a["task"]
        key = (job_id, attempt)

        def stream(chunk: bytes) -> None:
            self._output.setdefault(key, []).append(chunk)

        ctx = RunContext(job_id, attempt, self.config.output_tail_bytes, self.config.kill_grace_seconds, stream,
                         self.workers, self.secrets)  # fmt: skip
        ctx.parent_results = dict(a.get("parent_results") or {})
        report: Message = {"job_id": job_id, "attempt": attempt, "started_at": time.time()}
        size = 200
        handler = HANDLERS.get(task.get("kind", ""))
        try:
            if a.get("parent_results_error"):  # over the size limit: another attempt cannot help
                report.update(outcome="failed", retryable=False, error=str(a["parent_results_error"]))
            elif handler is None:
                report.update(
                    outcome="failed",
                    retryable=False,
                    error=f"this agent has no handler for task kind {task.get('kind')!r}",
                )
            else:
                with self.config.tracing.run(a.get("traceparent"), job_id, attempt, str(a.get("queue") or "")) as span:
                    # the task continues the job's trace: from the run's span, else from the submit's context
                    ctx.trace = span if span is not None else a.get("traceparent")
                    if a.get("timeout"):
                        async with asyncio.timeout(a["timeout"]):
                            outcome = await handler(task, ctx)
                    else:
                        outcome = await handler(task, ctx)
                    if span is not None and not outcome.ok:
                        span.note("jobdeck.error", str(outcome.error or "")[:500])
                result, result_size = _jsonable(outcome.result)
                size += result_size
                report.update(
                    outcome="succeeded" if outcome.ok else "failed",
                    error=outcome.error,
                    exit_code=outcome.exit_code,
                    result=result,
                    retryable=outcome.retryable,
                )
                if outcome.breaker_ok is not None:
                    report["breaker_ok"] = outcome.breaker_ok
        except TimeoutError:
            report.update(outcome="timeout", error=f"timed out after {a.get('timeout')} s")
            if task.get("kind") == "http":  # the host did not answer in time: unwell, for its breaker
                report["breaker_ok"] = False
        except asyncio.CancelledError:
            if key in self._cancelled:
                report.update(outcome="cancelled", error="cancelled by request")
            elif key in self._refused:
                report.update(outcome="lost", error=f"stopped by the core: {self._refused[key]}")
            elif key in self._fenced:
                report.update(outcome="lost", error="the agent lost contact with the core for a whole lease")
            elif self._stopping:
                report.update(outcome="interrupted", error="the agent shut down during the run; it runs again")
            else:
                raise
        except Exception as exc:
            log.exception("handler crashed on job %s", job_id)
            report.update(outcome="failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            self._cancelled.discard(key)
            self._refused.pop(key, None)
            self._fenced.discard(key)
            if self.tasks.get(job_id, (None,))[0] == attempt:
                del self.tasks[job_id]
                self._start_waiting()
        report["output"] = ctx.output
        report["finished_at"] = time.time()
        log.debug("run ended: %s in %.3f s", report.get("outcome"), report["finished_at"] - report["started_at"])
        self._hold(report, size + len(report["output"]))

    def _hold(self, report: Message, size: int) -> None:
        """Keep a finished run's report until a core acknowledges it, and send it."""
        key = (int(report["job_id"]), int(report["attempt"]))
        self._unacked[key] = (report, size)
        self._to_send[key] = None
        if self.state is not None:
            self._to_write.append(key)
            self._sync_soon()
        self._all_acked.clear()
        self._results_ready.set()

    def _acknowledged(self, acks: list[list[Any]]) -> None:
        """The core answered for these results: recorded (None), or refused with a reason. Either
        way they are done: a refused result can never be recorded (a newer attempt, a deleted job)."""
        for job_id, attempt, refusal in acks:
            key = (int(job_id), int(attempt))
            if refusal:
                log.warning("the core did not record the result of job %s attempt %s: %s", key[0], key[1], refusal)
            self._unacked.pop(key, None)
            self._to_send.pop(key, None)
            self._sent_at.pop(key, None)
            if self.state is not None:
                self._to_drop.append(key)
        if not self._unacked:
            self._all_acked.set()
        if self._to_drop:
            self._sync_soon()

    def _sync_soon(self) -> None:
        """Bring the state folder up to date in the background (connected or not)."""
        if self._syncing is None or self._syncing.done():
            self._syncing = asyncio.create_task(self._sync_until_current())

    async def _sync_until_current(self) -> None:
        while self._to_write or self._to_drop:
            await self._sync_state()

    async def _sync_state(self) -> None:
        """Write the held results not on disk yet, and forget the acknowledged ones, in a thread
        (thousands of small files a second must not stall the event loop). Writing happens before
        the results are sent, so one that any core may have heard of is on disk."""
        state = self.state
        if state is None:
            return
        async with self._state_lock:  # what another call took is written when it lets go
            if self._to_write or self._to_drop:
                await self._write_state(state)

    async def _write_state(self, state: AgentStateDir) -> None:
        write = [self._unacked[k][0] for k in self._to_write if k in self._unacked]
        drop, self._to_write, self._to_drop = self._to_drop, [], []

        def sync() -> None:
            try:
                state.keep_results(write)
            except OSError as exc:
                log.warning("cannot keep %d results in %s (%s): they are held in memory only",
                            len(write), state.path, exc)  # fmt: skip
            for key in drop:
                state.drop_result(*key)

        await asyncio.to_thread(sync)

    def _resend_unanswered(self) -> None:
        """Results sent a while ago and never answered (the core could not write them): again."""
        cutoff = time.monotonic() - RESEND_SECONDS
        for key, at in list(self._sent_at.items()):
            if at < cutoff and key in self._unacked and key not in self._to_send:
                self._to_send[key] = None

    # ------------------------------------------------------------ messages to the core

    async def _send_results(self, channel: Channel) -> None:
        # Natural batching: whatever finished while the last batch was being sent goes in the next.
        # Sent results stay held until acknowledged; the next connection sends them again.
        while True:
            # Not wait_for: on Python 3.11 it returns instead of raising when the event is set just as
            # the task is cancelled (the connection's end), and this loop then outlived its connection.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RESEND_SECONDS / 2):
                    await self._results_ready.wait()
            self._results_ready.clear()
            self._resend_unanswered()
            await self._sync_state()
            while self._to_send:
                keys = list(self._to_send)
                batch = _first_batch([self._unacked[k] for k in keys])
                sent = keys[: len(batch)]
                for k in sent:
                    del self._to_send[k]
                await self._sync_state()  # those that finished meanwhile
                try:
                    await self._flush_output(channel)  # a job's last lines go before its result
                    await channel.send({"type": "result", "results": [r for r, _ in batch]})
                except BaseException:  # closed, or cancelled mid-send: first in line for the next link
                    self._to_send = {**dict.fromkeys(k for k in sent if k in self._unacked), **self._to_send}
                    raise
                now = time.monotonic()
                for k in sent:
                    self._sent_at[k] = now

    async def _heartbeat(self, channel: Channel) -> None:
        while True:
            await asyncio.sleep(self._beat)
            with contextlib.suppress(ChannelClosed, ConnectionError, OSError):
                await channel.send(
                    {"type": "heartbeat", "running": self.running_pairs(), "finished": self.finished_pairs()}
                )
                self._last_contact = time.monotonic()  # the core extends our leases on each beat

    async def _send_output(self, channel: Channel) -> None:
        """Stream what running jobs print, a few times a second, in one message; while no job runs
        (and all was sent) it waits for one to start instead of waking to find nothing."""
        while True:
            await asyncio.sleep(OUTPUT_FLUSH_SECONDS)
            with contextlib.suppress(ChannelClosed, ConnectionError, OSError):
                await self._flush_output(channel)
            if not self.tasks and not self._output:
                self._job_started.clear()
                await self._job_started.wait()

    async def _flush_output(self, channel: Channel) -> None:
        if not self._output:
            return
        pending, self._output = self._output, {}
        chunks = [[j, a, b"".join(parts).decode("utf-8", "replace")] for (j, a), parts in pending.items()]
        await channel.send({"type": "output", "chunks": chunks})

    # ------------------------------------------------------------ stopping

    def hurry(self) -> None:
        """Stop waiting for running jobs during a shutdown (a second Ctrl-C)."""
        self._hurry.set()

    async def shutdown(self, grace: float) -> None:
        """Stop taking work, let running jobs finish for up to `grace` seconds, then stop the
        rest (reported as failed attempts, so they are retried) and send every result."""
        self._stopping = True
        channel = self._channel
        if channel is not None:
            with contextlib.suppress(ChannelClosed, ConnectionError, OSError):
                await channel.send({"type": "draining"})
            await self._hand_back_waiting(channel, self._waiting)
        running = [t for _, t in self.tasks.values()]
        if running:
            log.warning(
                "stopping: %d running jobs get up to %.0f s to finish (interrupt again to stop them now)",
                len(running), grace,
            )  # fmt: skip
            all_done = asyncio.ensure_future(asyncio.wait(running))  # cancelling it leaves the jobs alone
            hurry = asyncio.ensure_future(self._hurry.wait())
            await asyncio.wait([all_done, hurry], timeout=grace, return_when=asyncio.FIRST_COMPLETED)
            all_done.cancel()
            hurry.cancel()
            late = [t for t in running if not t.done()]
            for t in late:
                t.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        await self.workers.close()
        if self._unacked and self._channel is not None:
            self._results_ready.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._all_acked.wait(), 5.0)
        if self._unacked:
            where = f"kept in {self.state.path} for the next start" if self.state else "lost with this process"
            log.warning("%d results were not acknowledged by a core: %s", len(self._unacked), where)
        if self._channel is not None:
            with contextlib.suppress(ChannelClosed, ConnectionError, OSError):
                await self._channel.close()
        if self.state is not None:
            await self._sync_state()
            self.state.release()
