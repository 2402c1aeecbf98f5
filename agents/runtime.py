"""The agent runtime: takes assignments over a channel, runs them in slots, reports results.

The same runtime serves `jobdeck up` (an in-process channel) and remote agents (a WebSocket).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from agents.handlers import HANDLERS, RunContext
from core.protocol import PROTOCOL_VERSION, Channel, ChannelClosed, Message

log = logging.getLogger("jobdeck.agent")

VERSION = "0.1.0"


@dataclass
class AgentConfig:
    """Who the agent is and how much it takes on."""

    name: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    queues: tuple[str, ...] = ("*",)
    slots: int = 32
    labels: dict[str, str] = field(default_factory=dict)
    heartbeat_seconds: float = 5.0
    kill_grace_seconds: float = 5.0
    output_tail_bytes: int = 64 * 1024


def _jsonable(value: Any) -> Any:
    try:
        orjson.dumps(value)
        return value
    except TypeError:
        return repr(value)


class AgentRuntime:
    """Runs the jobs a core node assigns, each in a slot, and reports them in batches."""

    def __init__(self, channel: Channel, config: AgentConfig) -> None:
        self.channel = channel
        self.config = config
        self.tasks: dict[int, tuple[int, asyncio.Task[None]]] = {}  # job id -> (attempt, task)
        self._cancelled: set[tuple[int, int]] = set()
        self._results: list[Message] = []
        self._results_ready = asyncio.Event()
        self._stopping = False
        self._flushed = asyncio.Event()

    async def run(self) -> None:
        """Register, then serve assignments until the channel closes."""
        c = self.config
        await self.channel.send(
            {
                "type": "register",
                "protocol": PROTOCOL_VERSION,
                "name": c.name,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "version": VERSION,
                "queues": list(c.queues),
                "slots": c.slots,
                "labels": c.labels,
                "running": [[j, a] for j, (a, _) in self.tasks.items()],
            }
        )
        helpers = [asyncio.create_task(self._send_results()), asyncio.create_task(self._heartbeat())]
        try:
            while True:
                msg = await self.channel.recv()
                kind = msg.get("type")
                if kind == "assign":
                    if self._stopping:  # raced with our "draining": give them back unstarted
                        await self.channel.send(
                            {"type": "hand_back", "jobs": [[a["job_id"], a["attempt"]] for a in msg["jobs"]]}
                        )
                        continue
                    for a in msg["jobs"]:
                        self._start(a)
                elif kind == "cancel":
                    self._cancel(int(msg["job_id"]), int(msg["attempt"]))
                elif kind == "welcome":
                    pass
                elif kind == "error":
                    log.error("the core refused this agent: %s", msg.get("message"))
                    return
        except ChannelClosed:
            pass
        finally:
            for t in helpers:
                t.cancel()

    def _start(self, a: Message) -> None:
        job_id, attempt = int(a["job_id"]), int(a["attempt"])
        task = asyncio.create_task(self._run_one(a), name=f"job-{job_id}")
        self.tasks[job_id] = (attempt, task)

    def _cancel(self, job_id: int, attempt: int) -> None:
        entry = self.tasks.get(job_id)
        if entry is not None and entry[0] == attempt:
            self._cancelled.add((job_id, attempt))
            entry[1].cancel()

    async def _run_one(self, a: Message) -> None:
        job_id, attempt = int(a["job_id"]), int(a["attempt"])
        task: dict[str, Any] = a["task"]
        ctx = RunContext(job_id, attempt, self.config.output_tail_bytes, self.config.kill_grace_seconds)
        started = time.time()
        report: Message = {"job_id": job_id, "attempt": attempt, "started_at": started}
        handler = HANDLERS.get(task.get("kind", ""))
        try:
            if handler is None:
                report.update(outcome="failed", error=f"this agent has no handler for task kind {task.get('kind')!r}")
            else:
                timeout = a.get("timeout")
                async with asyncio.timeout(timeout):
                    outcome = await handler(task, ctx)
                report.update(
                    outcome="succeeded" if outcome.ok else "failed",
                    error=outcome.error,
                    exit_code=outcome.exit_code,
                    result=_jsonable(outcome.result),
                )
        except TimeoutError:
            report.update(outcome="timeout", error=f"timed out after {a.get('timeout')} s")
        except asyncio.CancelledError:
            if (job_id, attempt) in self._cancelled:
                report.update(outcome="cancelled", error="cancelled by request")
            elif self._stopping:
                report.update(outcome="failed", error="the agent shut down during the run")
            else:
                raise
        except Exception as exc:
            log.exception("handler crashed on job %s", job_id)
            report.update(outcome="failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            self._cancelled.discard((job_id, attempt))
            if self.tasks.get(job_id, (None,))[0] == attempt:
                del self.tasks[job_id]
        report["output"] = ctx.output
        report["finished_at"] = time.time()
        self._results.append(report)
        self._results_ready.set()

    async def _send_results(self) -> None:
        # Natural batching: whatever finished while the last batch was being sent goes in the next.
        while True:
            await self._results_ready.wait()
            self._results_ready.clear()
            batch, self._results = self._results, []
            if batch:
                await self.channel.send({"type": "result", "results": batch})
            if not self._results:
                self._flushed.set()

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_seconds)
            with contextlib.suppress(ChannelClosed):
                await self.channel.send({"type": "heartbeat", "running": [[j, a] for j, (a, _) in self.tasks.items()]})

    async def shutdown(self, grace: float) -> None:
        """Stop taking work, let running jobs finish for up to `grace` seconds, then stop the
        rest (reported as failed attempts, so they are retried) and send every result."""
        self._stopping = True
        with contextlib.suppress(ChannelClosed):
            await self.channel.send({"type": "draining"})
        running = [t for _, t in self.tasks.values()]
        if running:
            _, late = await asyncio.wait(running, timeout=grace)
            for t in late:
                t.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        if self._results:
            self._flushed.clear()
            self._results_ready.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._flushed.wait(), 5.0)
        with contextlib.suppress(ChannelClosed):
            await self.channel.close()
