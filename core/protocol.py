"""The agent protocol: a few JSON-able messages over a channel (in-process, or a WebSocket).

agent -> core: register, heartbeat, output, result, hand_back, draining
core -> agent: welcome, assign, cancel, drain, result_ack
Every message is a dict with a "type". Results and assignments travel in batches.

Results are acknowledged: after the store committed a batch (or refused some of it), the core
answers `result_ack` with [job_id, attempt, refusal] per result (refusal None: recorded). The
agent holds every result until then, and lists the held ones as `finished` in its register
and heartbeat messages (their leases are extended as the running ones' are).

The runs an agent reports (`running` in register and heartbeat) are fenced the same way: one
whose attempt is no longer the agent's (its lease ran out and a newer attempt started, or the
attempt was recorded lost) is stopped with a `cancel` that carries the `reason`; the agent logs it.

An agent's register message says how many assignments it takes beyond its slots (`prefetch`;
absent: none). It runs at most `slots` at once; the others wait in the agent, count among its
running pairs, and go back unstarted with `hand_back` if they do not start (agents/runtime.py).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

PROTOCOL_VERSION = 2  # 2: results are acknowledged (result_ack), `finished` pairs

Message = dict[str, Any]


class ChannelClosed(Exception):
    """The other end went away."""


class Channel(Protocol):
    """One end of a bidirectional, ordered message pipe."""

    async def send(self, msg: Message) -> None: ...
    async def recv(self) -> Message: ...
    async def close(self) -> None: ...


class LocalChannel:
    """An in-process channel: messages are passed as they are, not serialised."""

    def __init__(self, inbox: asyncio.Queue[Message | None], outbox: asyncio.Queue[Message | None]) -> None:
        self._inbox = inbox
        self._outbox = outbox
        self._closed = False

    @classmethod
    def pair(cls) -> tuple[LocalChannel, LocalChannel]:
        """Two connected ends: (core side, agent side)."""
        a: asyncio.Queue[Message | None] = asyncio.Queue()
        b: asyncio.Queue[Message | None] = asyncio.Queue()
        return cls(a, b), cls(b, a)

    async def send(self, msg: Message) -> None:
        if self._closed:
            raise ChannelClosed("channel closed")
        self._outbox.put_nowait(msg)

    async def recv(self) -> Message:
        if self._closed:
            raise ChannelClosed("channel closed")
        msg = await self._inbox.get()
        if msg is None:
            self._closed = True
            raise ChannelClosed("channel closed by peer")
        return msg

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._outbox.put_nowait(None)
            self._inbox.put_nowait(None)
