"""The OTLP/HTTP poster of JobDeck's span export: encoded ExportTraceServiceRequest bytes POSTed to
the collector over one connection kept open between exports (http.client).

Configured by the standard variables, the traces-specific one first (as the SDK's exporter reads them):
OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT (the base endpoint gets `/v1/traces`; default
http://localhost:4318), _HEADERS (`k=v,k2=v2`, values URL-encoded), _TIMEOUT (seconds, as the
Python SDK reads it; default 10), _COMPRESSION (gzip, deflate or none) and, for https, _CERTIFICATE,
_CLIENT_CERTIFICATE and _CLIENT_KEY. The SDK's client (requests) read ~/.netrc on every POST and its
stand-in for a collector made it open a connection per POST: most of the export thread's time.
A 429, 502, 503 or 504 (or a failed connection) is retried with exponential backoff (Retry-After
honoured) until the timeout is spent; any other refusal is logged and the batch is dropped.
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import logging
import os
import random
import ssl
import time
import zlib
from collections.abc import Callable, Mapping
from urllib.parse import unquote, urlsplit

log = logging.getLogger("jobdeck.tracing")

DEFAULT_ENDPOINT = "http://localhost:4318"
DEFAULT_TIMEOUT = 10.0  # seconds
RETRYABLE = frozenset({429, 502, 503, 504})
_COMPRESSORS: dict[str, Callable[[bytes], bytes] | None] = {"none": None, "gzip": gzip.compress,
                                                          "deflate": zlib.compress}  # fmt: skip
_FAILED = (OSError, http.client.HTTPException)  # no answer: refused, reset, timed out, garbled


def _setting(env: Mapping[str, str], name: str) -> str:
    """OTEL_EXPORTER_OTLP_TRACES_<name>, else OTEL_EXPORTER_OTLP_<name>, else ''."""
    return (env.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or env.get(f"OTEL_EXPORTER_OTLP_{name}") or "").strip()


def _headers(raw: str) -> dict[str, str]:
    """`k=v,k2=v2` (W3C baggage-like, values URL-encoded) as headers; a malformed pair is skipped."""
    out = {}
    for pair in raw.split(","):
        key, eq, value = pair.partition("=")
        if eq and key.strip():
            out[unquote(key.strip()).lower()] = unquote(value.strip())
        elif pair.strip():
            log.warning("OTEL_EXPORTER_OTLP_HEADERS: %r is not key=value; left out", pair.strip())
    return out


class OtlpHttpPoster:
    """POSTs export requests to the traces endpoint, reusing one connection (the export thread's)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        if not endpoint:
            endpoint = (env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or DEFAULT_ENDPOINT).rstrip(
                "/"
            ) + "/v1/traces"
        self.endpoint = endpoint
        url = urlsplit(endpoint)
        self._https = url.scheme == "https"
        self._host, self._port = url.hostname or "localhost", url.port
        self._path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        try:
            self.timeout = float(_setting(env, "TIMEOUT") or DEFAULT_TIMEOUT)
        except ValueError:
            log.warning("OTEL_EXPORTER_OTLP_TIMEOUT %r is not a number of seconds: %s used",
                        _setting(env, "TIMEOUT"), DEFAULT_TIMEOUT)  # fmt: skip
            self.timeout = DEFAULT_TIMEOUT
        self.compression = _setting(env, "COMPRESSION").lower() or "none"
        if self.compression not in _COMPRESSORS:
            log.warning("OTEL_EXPORTER_OTLP_COMPRESSION %r is not gzip, deflate or none: none used", self.compression)
            self.compression = "none"
        self.headers = {"content-type": "application/x-protobuf", "user-agent": "jobdeck-otlp",
                        **_headers(_setting(env, "HEADERS"))}  # fmt: skip
        if self.compression != "none":
            self.headers["content-encoding"] = self.compression
        self._context: ssl.SSLContext | None = None
        if self._https:
            self._context = ssl.create_default_context(cafile=_setting(env, "CERTIFICATE") or None)
            if cert := _setting(env, "CLIENT_CERTIFICATE"):
                self._context.load_cert_chain(cert, _setting(env, "CLIENT_KEY") or None)
        self._conn: http.client.HTTPConnection | None = None
        self.connections = 0  # connections opened (one, while the collector keeps it open)

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._conn is None:
            self.connections += 1
            if self._https:
                self._conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._context)
            else:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        elif self._conn.sock is not None:
            self._conn.sock.settimeout(timeout)
        return self._conn

    def _post_once(self, body: bytes, timeout: float) -> tuple[int, str, str | None]:
        """(status, reason, Retry-After) of one POST; a kept-alive connection the collector closed
        meanwhile is reopened once."""
        for again in (False, True):
            reused = self._conn is not None
            conn = self._connection(timeout)
            try:
                conn.request("POST", self._path, body, self.headers)
                resp = conn.getresponse()
                resp.read()  # the whole answer, so the connection can carry the next request
                if resp.will_close:
                    self.close()
                return resp.status, resp.reason, resp.getheader("retry-after")
            except _FAILED:
                self.close()
                if again or not reused:
                    raise
        raise AssertionError("unreachable")

    def post(self, data: bytes) -> bool:
        """Export one encoded request; True once the collector took it."""
        compress = _COMPRESSORS[self.compression]
        body = compress(data) if compress is not None else data
        deadline = time.monotonic() + self.timeout
        retry = 0
        while True:
            left = deadline - time.monotonic()
            try:
                status, reason, after = self._post_once(body, max(left, 0.001))
            except _FAILED as e:
                status, reason, after = 0, str(e), None
            if 200 <= status < 300:
                return True
            backoff = 2**retry * random.uniform(0.8, 1.2)
            if after is not None:
                with contextlib.suppress(ValueError):
                    backoff = max(0.0, float(after))
            retryable = status == 0 or status in RETRYABLE
            if not retryable or time.monotonic() + backoff > deadline:
                log.warning("span export to %s failed: %s %s%s", self.endpoint, status or "", reason,
                            "" if not retryable else " (no time left to retry)")  # fmt: skip
                return False
            time.sleep(backoff)
            retry += 1

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
