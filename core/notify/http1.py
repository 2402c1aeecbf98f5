"""A lean HTTP/1.1 client for webhook POSTs: keep-alive connections per channel over asyncio
streams, answers parsed by httptools (the C parser uvicorn already brings).

Why not httpx here: a delivery is one small POST, and httpx + httpcore + anyio cost several
hundred microseconds of CPU per request in their layers (pool bookkeeping, cancellation shields,
stream wrappers). At 1,000 deliveries a second that was the sending node's whole event loop (py-spy:
81 % of the loop's samples in the dispatcher's sends). This client does what a webhook needs and
nothing more: no redirects (a webhook is not followed), no cookies, no HTTP/2. A URL that an
environment proxy setting applies to is sent by httpx instead (see `proxied`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import urllib.request
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import urlsplit

import certifi
import httptools

MAX_ANSWER = 64 * 1024  # bytes of an answer read; a longer one is cut off and its connection closed
MAX_IDLE = 8  # kept-alive connections per client (one per worker of the channel)


class AnswerError(Exception):
    """The receiver's answer was not HTTP/1.x we can read, or the connection closed before it ended."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where a URL's requests go: the origin, the request target, the Host header."""

    https: bool
    host: str
    port: int
    path: str
    host_header: str


@lru_cache(maxsize=1024)
def target_of(url: str) -> Target:
    """The URL split for sending (cached: a channel sends to one URL)."""
    u = urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    https = u.scheme == "https"
    port = u.port or (443 if https else 80)
    path = (u.path or "/") + (f"?{u.query}" if u.query else "")
    host = u.hostname
    shown = f"[{host}]" if ":" in host else host
    default = port == (443 if https else 80)
    return Target(https, host, port, path, shown if default else f"{shown}:{port}")


def proxied(url: str) -> bool:
    """Whether an environment proxy (HTTP(S)_PROXY, not NO_PROXY) applies to the URL."""
    t = target_of(url)
    proxies = urllib.request.getproxies()
    if not proxies.get("https" if t.https else "http") and not proxies.get("all"):
        return False
    return not urllib.request.proxy_bypass(t.host)


@lru_cache(maxsize=1)
def tls_context() -> ssl.SSLContext:
    """The trust httpx gave webhooks: SSL_CERT_FILE / SSL_CERT_DIR if set (read once), else certifi's CAs."""
    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    return ssl.create_default_context(cafile=cafile or (None if capath else certifi.where()), capath=capath)


@dataclass(slots=True)
class _Answer:
    """What the parser has seen of one answer."""

    body: bytearray = field(default_factory=bytearray)
    headers_done: bool = False
    sized: bool = False  # a Content-Length or chunked answer (else it ends with the connection)
    done: bool = False
    keep_alive: bool = False  # read at completion (httptools forgets it once the answer ended)
    cut: bool = False
    parser: httptools.HttpResponseParser | None = None

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.sized = True

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_body(self, chunk: bytes) -> None:
        room = MAX_ANSWER - len(self.body)
        if len(chunk) > room:
            self.cut = True
        self.body += chunk[: max(room, 0)]

    def on_message_complete(self) -> None:
        self.done = True
        self.keep_alive = self.parser is not None and self.parser.should_keep_alive()


@dataclass(slots=True)
class _Conn:
    target: Target
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class Http1Client:
    """Keep-alive HTTP/1.1 POSTs for one channel (its workers share the idle connections)."""

    def __init__(self) -> None:
        self._idle: list[_Conn] = []

    async def post(self, url: str, headers: dict[str, str], body: bytes, timeout: float) -> tuple[int, bytes]:
        """POST `body`; the answer's status and (up to MAX_ANSWER of) its body. Raises TimeoutError,
        OSError or AnswerError. A kept-alive connection the receiver closed meanwhile is retried once
        on a new one (nothing of the answer came: it did not take the request)."""
        t = target_of(url)
        head = [f"POST {t.path} HTTP/1.1", f"Host: {t.host_header}", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in headers.items() if k.lower() not in ("host", "content-length")]
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        async with asyncio.timeout(timeout):
            while True:
                conn, reused = self._take(t), True
                if conn is None:
                    conn, reused = await self._open(t), False
                try:
                    return await self._exchange(conn, request)
                except (ConnectionError, _Unanswered) as exc:
                    conn.close()
                    if reused:
                        continue
                    if isinstance(exc, _Unanswered):
                        raise AnswerError("the connection closed before an answer") from None
                    raise
                except BaseException:
                    conn.close()
                    raise

    def _take(self, t: Target) -> _Conn | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.target == t and not conn.reader.at_eof() and not conn.writer.is_closing():
                return conn
            conn.close()
        return None

    async def _open(self, t: Target) -> _Conn:
        reader, writer = await asyncio.open_connection(
            t.host, t.port, ssl=tls_context() if t.https else None, server_hostname=t.host if t.https else None
        )
        return _Conn(t, reader, writer)

    async def _exchange(self, conn: _Conn, request: bytes) -> tuple[int, bytes]:
        conn.writer.write(request)
        await conn.writer.drain()
        answer = _Answer()
        parser = answer.parser = httptools.HttpResponseParser(answer)
        got = 0
        while not answer.done:
            chunk = await conn.reader.read(65536)
            if not chunk:
                if got == 0:
                    raise _Unanswered
                if not (answer.headers_done and not answer.sized):  # else: it ends with the connection
                    raise AnswerError("the connection closed in the middle of the answer")
                conn.close()
                return parser.get_status_code(), bytes(answer.body)
            got += len(chunk)
            try:
                parser.feed_data(chunk)
            except httptools.HttpParserUpgrade:
                raise AnswerError("the receiver switched protocols") from None
            except httptools.HttpParserError as exc:
                raise AnswerError(f"not an HTTP/1.x answer: {exc}") from None
            if answer.cut:
                conn.close()
                return parser.get_status_code(), bytes(answer.body)
        status = parser.get_status_code()
        if answer.keep_alive and len(self._idle) < MAX_IDLE:
            self._idle.append(conn)
        else:
            conn.close()
        return status, bytes(answer.body)

    async def aclose(self) -> None:
        """Close the idle connections."""
        for conn in self._idle:
            conn.close()
        self._idle.clear()


class _Unanswered(Exception):
    """The connection closed before any byte of the answer."""
