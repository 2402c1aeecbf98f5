"""JobDeck's own span export: OTLP/HTTP protobuf bytes written straight from a span's fields, batched
off the event loop. The SDK path (a Span per step, then `encode_spans` building a protobuf object per
span, attribute and value) cost about 55 us a span, most of a job's tracing cost; this is a few.

A span is a `Record` tuple. `SpanBatcher.add` only appends it to a deque (no lock, no wake per span);
its thread wakes when a batch is full (OTEL_BSP_MAX_EXPORT_BATCH_SIZE, 512) or every
OTEL_BSP_SCHEDULE_DELAY ms (5000), encodes the batch and posts it with the SDK's OTLP/HTTP client, so
the endpoint, headers, timeout, compression, certificates and retries are the standard OTEL_* ones.
Beyond OTEL_BSP_MAX_QUEUE_SIZE (2048) waiting spans, new ones are dropped (and counted), as the SDK does.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import struct
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

log = logging.getLogger("jobdeck.tracing")

# (name, trace_id, span_id, parent span_id (0: a root), start ns, end ns, attributes,
#  events ((name, time ns), ...), error (None: status unset; else its message, status ERROR))
Record = tuple[str, int, int, int, int, int, Mapping[str, Any], Sequence[tuple[str, int]], str | None]

_fixed64 = struct.Struct("<Q").pack
_double = struct.Struct("<d").pack


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: int, body: bytes) -> bytes:
    """A length-delimited field (wire type 2) whose tag byte is `tag`."""
    n = len(body)
    return bytes((tag, n)) + body if n < 0x80 else bytes((tag,)) + _varint(n) + body


@functools.lru_cache(maxsize=1024)
def _text(tag: int, s: str) -> bytes:
    """A string field; names, keys and queue names repeat, so each is encoded once."""
    return _field(tag, s.encode())


def _any_value(v: Any) -> bytes:
    """An AnyValue message (string 1, bool 2, int64 3, double 4, array 5)."""
    if isinstance(v, bool):
        return b"\x10\x01" if v else b"\x10\x00"
    if isinstance(v, int):
        return b"\x18" + _varint(v & 0xFFFFFFFFFFFFFFFF)
    if isinstance(v, float):
        return b"\x21" + _double(v)
    if isinstance(v, str):
        return _field(0x0A, v.encode())
    if isinstance(v, (list, tuple)):
        return _field(0x2A, b"".join(_field(0x0A, _any_value(x)) for x in v))  # ArrayValue.values = 1
    return _field(0x0A, str(v).encode())


@functools.lru_cache(maxsize=8192)
def _key_value(tag: int, key: str, value: Any) -> bytes:
    """A KeyValue (key 1, value 2) as field `tag`: attempts, queues, agents, outcomes repeat, so a
    (key, value) pair is encoded once."""
    return _field(tag, _text(0x0A, key) + _field(0x12, _any_value(value)))


def _attributes(tag: int, attrs: Mapping[str, Any]) -> bytes:
    """Repeated KeyValue as field `tag` of the enclosing message."""
    parts = []
    for k, v in attrs.items():
        if type(v) is int and v >= 0:  # ids: never the same twice, so not worth a cache entry
            value = b"\x18" + _varint(v)
            body = _text(0x0A, k) + bytes((0x12, len(value))) + value
            parts.append(_field(tag, body))
        elif type(v) is str and len(v) > 64:
            parts.append(_field(tag, _text(0x0A, k) + _field(0x12, _any_value(v))))
        else:
            try:
                parts.append(_key_value(tag, k, v))
            except TypeError:  # unhashable (a list)
                parts.append(_field(tag, _text(0x0A, k) + _field(0x12, _any_value(v))))
    return b"".join(parts)


def _span(r: Record) -> bytes:
    name, trace_id, span_id, parent_id, start, end, attrs, events, error = r
    parts = [b"\x0a\x10", trace_id.to_bytes(16, "big"), b"\x12\x08", span_id.to_bytes(8, "big")]
    if parent_id:
        parts += (b"\x22\x08", parent_id.to_bytes(8, "big"))
    parts += (_text(0x2A, name), b"\x30\x01\x39", _fixed64(start), b"\x41", _fixed64(end), _attributes(0x4A, attrs))
    for event, at in events:  # Event: time_unix_nano 1 (fixed64), name 2
        parts.append(_field(0x5A, b"\x09" + _fixed64(at) + _text(0x12, event)))
    if error is not None:  # Status: message 2, code 3 (ERROR = 2)
        parts.append(_field(0x7A, _field(0x12, error.encode()) + b"\x18\x02"))
    return _field(0x12, b"".join(parts))  # ScopeSpans.spans = 2


def encode(records: Iterable[Record], resource: Mapping[str, Any], scope: str = "jobdeck") -> bytes:
    """An ExportTraceServiceRequest holding `records`, all of one resource and instrumentation scope."""
    scope_spans = _field(0x0A, _text(0x0A, scope)) + b"".join(_span(r) for r in records)
    resource_spans = _field(0x0A, _attributes(0x0A, resource)) + _field(0x12, scope_spans)
    return _field(0x0A, resource_spans)


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name) or default)
    except ValueError:
        return default


class SpanBatcher:
    """Records waiting for export, and the thread that exports them over OTLP/HTTP."""

    def __init__(self, resource: Mapping[str, Any], client: Any = None) -> None:
        if client is None:  # the SDK exporter reads OTEL_EXPORTER_OTLP_(TRACES_)* itself; its client posts bytes
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            self._exporter: Any = OTLPSpanExporter()
            client = self._exporter._client
        self._client = client
        self._resource = dict(resource)
        self._queue: collections.deque[Record] = collections.deque()
        self.max_queue = _env_int("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        self.batch = max(1, min(_env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512), self.max_queue))
        self.delay = _env_int("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self.dropped = 0
        self.exported = 0
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="jobdeck-span-export", daemon=True)
        self._thread.start()

    def add(self, r: Record) -> None:
        """Queue one span (the event loop's whole share of its export)."""
        q = self._queue
        if len(q) >= self.max_queue:
            if not self.dropped:
                log.warning("span export queue full (OTEL_BSP_MAX_QUEUE_SIZE=%d): dropping spans", self.max_queue)
            self.dropped += 1
            return
        q.append(r)
        if len(q) == self.batch:
            self._wake.set()

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.delay)
            self._wake.clear()
            self._idle.clear()
            try:
                self._drain()
            finally:
                self._idle.set()
            if self._stopping:
                return

    def _drain(self) -> None:
        q = self._queue
        while q:
            batch = [q.popleft() for _ in range(min(len(q), self.batch))]
            try:
                result = self._client.export(encode(batch, self._resource))
                if getattr(result, "success", True):
                    self.exported += len(batch)
                else:
                    log.warning("span export failed: %s", getattr(result, "error", result))
            except Exception as e:  # an exporter's failure never reaches the node
                log.warning("span export failed: %s", e)

    def flush(self, timeout: float = 30.0) -> bool:
        """Export what is queued now; True once it is out (or failed) within `timeout` s."""
        deadline = time.monotonic() + timeout
        while self._queue or not self._idle.is_set():  # idle is cleared before a batch leaves the queue
            if time.monotonic() > deadline:
                return False
            self._wake.set()
            self._idle.wait(0.01)
            time.sleep(0.001)
        return True

    def shutdown(self) -> None:
        """Export what is left, then stop the thread."""
        self._stopping = True
        self._wake.set()
        self._thread.join(30)
        if hasattr(self, "_exporter"):
            self._exporter.shutdown()
