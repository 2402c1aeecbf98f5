"""A minimal keep-alive HTTP/1.1 client for the request-rate loops.

Why not httpx here: with 16 concurrent requests from one process, httpx (and so
JobDeckClient) spends a whole core of its own at ~800 requests/s, so the figure would be the
client's limit, not the server's. Pre-built request bytes on a plain socket cost the client
a few percent of a core at the same rate. It speaks only what JobDeck's server answers with:
a status line, headers, and a Content-Length body.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from bench.server import BenchError


def build_request(method: str, path: str, body: bytes | None = None, token: str | None = None) -> bytes:
    """The bytes of one request, sent as they are on every call (with a bearer token, if given)."""
    head = f"{method} {path} HTTP/1.1\r\nHost: bench\r\n"
    if token:
        head += f"Authorization: Bearer {token}\r\n"
    if body is None:
        return (head + "\r\n").encode()
    return (head + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


class Connection:
    """One keep-alive connection; one request at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, url: str) -> Connection:
        parts = urlsplit(url)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
        return cls(reader, writer)

    async def request(self, data: bytes) -> tuple[int, bytes]:
        """Send a request built by `build_request`; return (status, body)."""
        self._writer.write(data)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = None
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length is None:
            raise BenchError(f"a response without Content-Length: {head[:200]!r}")
        return status, await self._reader.readexactly(length)

    async def close(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()


@dataclass
class Rate:
    """Requests completed in a time-boxed loop."""

    count: int
    seconds: float
    latencies: list[float]  # seconds, one per request

    @property
    def per_second(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0


async def request_rate(url: str, request: bytes, concurrency: int, seconds: float) -> Rate:
    """Send `request` back to back on `concurrency` connections for about `seconds`.

    Each connection sends its next request as soon as the last was answered (a closed loop),
    so this measures what the server sustains, not what a pacer asked for. Any status >= 400
    stops the run: a rate of errors is not a rate.
    """
    connections = [await Connection.open(url) for _ in range(concurrency)]
    latencies: list[float] = []
    start = time.perf_counter()
    deadline = start + seconds

    async def loop(conn: Connection) -> None:
        while (t := time.perf_counter()) < deadline:
            status, body = await conn.request(request)
            if status >= 400:
                raise BenchError(f"HTTP {status}: {body[:300].decode(errors='replace')}")
            latencies.append(time.perf_counter() - t)

    try:
        await asyncio.gather(*(loop(c) for c in connections))
    finally:
        for c in connections:
            await c.close()
    return Rate(len(latencies), time.perf_counter() - start, latencies)


class ConnectionPool:
    """Keep-alive connections to one server, opened as they are needed: each request takes an
    idle one (a paced run's overlapping requests get one each) and gives it back."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._idle: list[Connection] = []
        self._open: list[Connection] = []

    async def request(self, data: bytes) -> tuple[int, bytes]:
        """As `Connection.request`, on an idle connection (a new one if none is idle)."""
        conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = await Connection.open(self._url)
            self._open.append(conn)
        try:
            answer = await conn.request(data)
        except BaseException:
            self._open.remove(conn)
            await conn.close()
            raise
        self._idle.append(conn)
        return answer

    async def close(self) -> None:
        for conn in self._open:
            await conn.close()
        self._open, self._idle = [], []
