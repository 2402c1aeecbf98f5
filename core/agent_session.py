"""The core side of one connected agent: its slots, its running jobs, and its messages."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from core.model import Job
from core.protocol import Channel, ChannelClosed, Message

if TYPE_CHECKING:
    from core.agent_hub import AgentHub

log = logging.getLogger("jobdeck.agents")


def assignment(job: Job) -> Message:
    """What an agent needs to run one attempt of a job."""
    return {
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
        self.labels: dict[str, str] = dict(hello.get("labels") or {})
        self.running: dict[int, int] = {}  # job id -> attempt
        self.connected_at = time.time()
        self.last_heartbeat = self.connected_at
        self.draining = False

    @property
    def free(self) -> int:
        return 0 if self.draining else max(0, self.slots - len(self.running))

    def to_dict(self) -> dict[str, Any]:
        """The public view of an agent (the API's JSON)."""
        return {
            "name": self.name,
            "host": self.host,
            "pid": self.pid,
            "version": self.version,
            "queues": sorted(self.queues) if self.queues is not None else ["*"],
            "labels": self.labels,
            "slots": self.slots,
            "slots_used": len(self.running),
            "slots_free": self.free,
            "running": sorted(self.running),
            "draining": self.draining,
            "heartbeat_age": round(time.time() - self.last_heartbeat, 3),
            "connected_at": self.connected_at,
        }

    async def assign(self, jobs: list[Job]) -> None:
        for j in jobs:
            self.running[j.id] = j.attempt
        await self.channel.send({"type": "assign", "jobs": [assignment(j) for j in jobs]})

    async def cancel(self, job_id: int, attempt: int) -> None:
        await self.channel.send({"type": "cancel", "job_id": job_id, "attempt": attempt})

    async def serve(self) -> None:
        """Handle the agent's messages until it disconnects."""
        try:
            while True:
                msg = await self.channel.recv()
                self.last_heartbeat = time.time()  # any message shows the agent is alive
                kind = msg.get("type")
                if kind == "result":
                    self.hub.engine.result_batches += 1
                    self.hub.engine.results += len(msg["results"])
                    await self.hub.finish_attempts(self, msg["results"])
                elif kind == "heartbeat":
                    self.last_heartbeat = time.time()
                    await self.hub.heartbeat(
                        self,
                        [(int(j), int(a)) for j, a in msg.get("running", [])],
                        [(int(j), int(a)) for j, a in msg.get("finished", [])],
                    )
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
