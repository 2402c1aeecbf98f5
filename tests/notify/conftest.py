"""Fixtures of the notification tests: a real HTTP receiver that checks Standard Webhooks signatures
with the reference library (standardwebhooks), a real SMTP server (aiosmtpd), nodes on both stores."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tests.conftest import free_port, node_settings, start_node, stop_node


@dataclass
class Received:
    """One request as the receiver saw it."""

    at: float
    headers: dict[str, str]
    body: bytes
    verified: bool
    payload: Any


@dataclass
class Receiver:
    """A webhook receiver on a loopback port: answers 200 (mode "ok"), 503 ("fail") or after
    `delay` seconds ("slow"); `stop()` takes it off the network, `start()` brings it back on the same port."""

    secret: str = ""
    mode: str = "ok"
    delay: float = 0.0
    port: int = field(default_factory=free_port)
    got: list[Received] = field(default_factory=list)
    _server: uvicorn.Server | None = None
    _task: asyncio.Task[None] | None = None
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _hook(self, request: Request) -> PlainTextResponse:
        body = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            Webhook(self.secret).verify(body, headers)
            verified = True
        except WebhookVerificationError:
            verified = False
        if self.mode == "slow":
            await asyncio.sleep(self.delay)
        self.got.append(Received(time.time(), headers, body, verified, orjson.loads(body)))
        self._arrived.set()
        if self.mode == "fail":
            return PlainTextResponse("receiver says no", status_code=503)
        return PlainTextResponse("thanks")

    async def start(self) -> None:
        app = Starlette(routes=[Route("/hook", self._hook, methods=["POST"])])
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                     lifespan="off"))  # fmt: skip
        self._task = asyncio.create_task(self._server.serve())
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline, "the receiver did not start"
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await asyncio.wait_for(self._task, 10)
            self._server = self._task = None

    async def wait_for(
        self, n: int, timeout: float = 30.0, what: Callable[[Received], bool] = lambda r: True
    ) -> list[Received]:
        """The requests matching `what` once there are `n` of them (fails after `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            hits = [r for r in self.got if what(r)]
            if len(hits) >= n:
                return hits
            if time.monotonic() > deadline:
                raise AssertionError(f"expected {n} requests, got {len(hits)}: {[r.payload for r in hits]}")
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), 0.2)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.start()
    try:
        yield r
    finally:
        await r.stop()


@dataclass
class Deck:
    """A running node and an HTTP client to its API."""

    node: Any
    url: str
    http: httpx.AsyncClient
    task: Any
    settings: Any

    async def call(self, method: str, path: str, body: Any = None, status: int | None = None) -> Any:
        r = await self.http.request(method, path, json=body)
        if status is not None:
            assert r.status_code == status, f"{method} {path}: expected {status}, got {r.status_code}: {r.text}"
        return r.json() if r.content else None

    async def stop(self) -> None:
        await self.http.aclose()
        await stop_node(self.node, self.task)


async def open_deck(settings: Any) -> Deck:
    node, url, task = await start_node(settings, local_agent=True)
    return Deck(node, url, httpx.AsyncClient(base_url=url, timeout=30), task, settings)


@pytest.fixture(params=["sqlite", "postgres"])
def deck_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Settings of a node on SQLite or on PostgreSQL."""
    if request.param == "sqlite":
        return node_settings(tmp_path)
    return node_settings(tmp_path, database_url=request.getfixturevalue("pg_url"))


@pytest.fixture
async def deck(deck_settings: Any) -> AsyncIterator[Deck]:
    d = await open_deck(deck_settings)
    try:
        yield d
    finally:
        await d.stop()


async def wait_until(check: Callable[[], Any], timeout: float = 30.0, what: str = "the condition") -> Any:
    """Poll an async check until it returns something true."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")
