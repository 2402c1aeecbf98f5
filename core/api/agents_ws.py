"""`/v1/agents`: remote agents connect here over a WebSocket and speak the agent protocol."""

from __future__ import annotations

import contextlib
from typing import NoReturn

import orjson
from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from core.api.access import authenticate, may_take
from core.api.ws_messages import agent_message_problem
from core.engine import Engine
from core.errors import JobDeckError
from core.protocol import ChannelClosed, Message

router = APIRouter(tags=["agents"])


class WebSocketChannel:
    """The core's end of an agent's WebSocket, as a protocol Channel (JSON messages)."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws

    async def send(self, msg: Message) -> None:
        try:
            await self.ws.send_bytes(orjson.dumps(msg))
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:
            raise ChannelClosed(str(exc)) from None

    async def recv(self) -> Message:
        try:
            frame = await self.ws.receive()
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:
            raise ChannelClosed(str(exc)) from None
        if frame["type"] == "websocket.disconnect":
            raise ChannelClosed("the agent disconnected")
        data = frame.get("bytes") or frame.get("text") or b""
        try:
            msg = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            await self._refuse(f"a message is not JSON ({exc})")
        problem = agent_message_problem(msg)
        if problem is not None:
            await self._refuse(problem)
        assert isinstance(msg, dict)
        return msg

    async def _refuse(self, problem: str) -> NoReturn:
        """A malformed message: say why, close with 1007 (invalid data) and end the session."""
        with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
            await self.ws.send_bytes(orjson.dumps({"type": "error", "message": problem}))
            await self.ws.close(code=1007, reason=problem[:120])
        raise ChannelClosed(problem)

    async def close(self) -> None:
        with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
            await self.ws.close()


@router.websocket("/v1/agents")
async def agents_ws(ws: WebSocket) -> None:
    """An agent registers with its name, queues, slots and labels, then takes work (see core/protocol.py)."""
    engine: Engine = ws.app.state.engine
    await ws.accept()
    channel = WebSocketChannel(ws)
    try:
        p = await authenticate(ws)
    except JobDeckError as exc:  # the agent reads its register answer: it stops and says why
        with contextlib.suppress(ChannelClosed):
            await channel.recv()
            await channel.send({"type": "error", "message": f"sign-in refused: {exc.message}"})
            await channel.close()
        return
    with contextlib.suppress(ChannelClosed):  # a malformed message ends the session (the agent was told why)
        await engine.attach_agent(channel, None if p.via == "none" else lambda queues: may_take(p, queues))
