"""JobDeck's own span export: OTLP/HTTP protobuf bytes written straight from a span's fields, posted
off the event loop. The SDK path (a Span per step, then `encode_spans` building a protobuf object per
span, attribute and value) cost about 55 us a span, most of a job's tracing cost; this is a few.

A span is a `Record` tuple. `SpanBatcher.add` encodes it and appends the bytes to a deque (no lock, no
wake per span); its thread wakes when a batch is full (OTEL_BSP_MAX_EXPORT_BATCH_SIZE, 512) or every
OTEL_BSP_SCHEDULE_DELAY ms (5000), joins the batch and posts it over one kept-alive connection
(core/obs/otlp_http.py: the endpoint, headers, timeout, compression and certificates are the
standard OTEL_EXPORTER_OTLP_* ones).
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

from core.obs.otlp_http import OtlpHttpPoster

log = logging.getLogger("jobdeck.tracing")

# (name, trace_id, span_id, parent span_id (0: a root), start ns, end ns, attributes,
#  events ((name, time ns), ...), error (None: status unset; else its message, status ERROR)).
# The attributes: a mapping, or (id, Shared): the id (a job's) first, then attributes other spans share.
Record = tuple[str, int, int, int, int, int, "Mapping[str, Any] | tuple[int, Shared]", Sequence[tuple[str, int]],
               str | None]  # fmt: skip

_fixed64 = struct.Struct("<Q").pack
_double = struct.Struct("<d").pack
# a span's ids (trace_id 1, span_id 2, parent_span_id 4: big-endian bytes) and its kind and times
# (kind 6 = INTERNAL, start 7 and end 8: fixed64), each packed in one call
_ids = struct.Struct(">HQQHQ").pack
_ids_parent = struct.Struct(">HQQHQHQ").pack
_times = struct.Struct("<3sQBQ").pack
_HIGH, _LOW = 0x0A10, 0x1208  # the tag and length bytes of trace_id (16 bytes) and span_id (8)
_PARENT = 0x2208
_KIND_START = b"\x30\x01\x39"
_MASK64 = 0xFFFFFFFFFFFFFFFF
_BYTE = tuple(bytes((b,)) for b in range(256))
_CACHED = 8192  # encoded strings and (key, value) attributes kept: names, keys, queues, agents, attempts


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
        return b"\x18" + _varint(v & _MASK64)
    if isinstance(v, float):
        return b"\x21" + _double(v)
    if isinstance(v, str):
        return _field(0x0A, v.encode())
    if isinstance(v, (list, tuple)):
        return _field(0x2A, b"".join(_field(0x0A, _any_value(x)) for x in v))  # ArrayValue.values = 1
    return _field(0x0A, str(v).encode())


def _key_value(tag: int, key: str, value: Any) -> bytes:
    """A KeyValue (key 1, value 2) as field `tag`."""
    return _field(tag, _text(0x0A, key) + _field(0x12, _any_value(value)))


_span_keys: dict[str, bytes] = {}  # an attribute key as KeyValue.key (field 1)
_span_pairs: dict[tuple[str, type, Any], bytes] = {}  # a (key, type, value) attribute as Span.attributes (field 9)


def _span_attributes(attrs: Mapping[str, Any]) -> bytes:
    """A span's attributes (Span.attributes = 9, repeated KeyValue). Ids (non-negative ints past one
    byte) are never the same twice: written at once; the rest (attempts, queues, agents, outcomes)
    repeat, so each (key, value) is encoded once."""
    parts = []
    pairs = _span_pairs
    for k, v in attrs.items():
        if type(v) is int and v >= 0x80:
            key = _span_keys.get(k)
            if key is None:
                key = _span_keys[k] = _text(0x0A, k) if len(_span_keys) < _CACHED else _field(0x0A, k.encode())
            value = _varint(v)  # AnyValue.int_value = 3: [0x18, varint]
            n = len(key) + len(value) + 3
            parts.append(bytes((0x4A, n)) + key + bytes((0x12, len(value) + 1, 0x18)) + value if n < 0x80
                         else _key_value(0x4A, k, v))  # fmt: skip
            continue
        try:
            kv = pairs.get((k, type(v), v))  # the type too: True == 1 == 1.0
        except TypeError:  # unhashable (a list)
            parts.append(_key_value(0x4A, k, v))
            continue
        if kv is None:
            kv = _key_value(0x4A, k, v)
            if len(pairs) < _CACHED and not (type(v) is str and len(v) > 64):
                pairs[(k, type(v), v)] = kv
        parts.append(kv)
    return b"".join(parts)


def _attributes(tag: int, attrs: Mapping[str, Any]) -> bytes:
    """Repeated KeyValue as field `tag` of the enclosing message (the resource's: once a batch)."""
    return b"".join(_key_value(tag, k, v) for k, v in attrs.items())


class Shared:
    """Attributes that many spans carry alike (a job step's attempt, queue and agent, its outcome), encoded
    once; each span adds its own `key` (an id) in front."""

    __slots__ = ("_head", "_heads", "_hi", "_tail", "encoded", "items", "key")

    def __init__(self, key: str, items: Mapping[str, Any]) -> None:
        self.key, self.items = key, dict(items)
        self.encoded = _span_attributes(self.items)
        # Span.attributes (9) KeyValue{key 1, value 2: AnyValue{int_value 3}} up to the id's varint, by its length
        k = _text(0x0A, key)
        self._heads = [b""] + [bytes((0x4A, len(k) + 3 + n)) + k + bytes((0x12, n + 1, 0x18)) for n in range(1, 11)]
        self._hi, self._head, self._tail = -1, b"", b""

    def with_id(self, n: int) -> bytes:
        """These attributes after `key` = n (a non-negative int)."""
        # n's varint is its low 7 bits (with 0x80 if more follow), then the varint of n >> 7. The jobs of a
        # claim or a result batch are mostly neighbours, so what follows the first byte is kept for the next
        hi = n >> 7
        if hi != self._hi:
            rest = _varint(hi) if hi else b""
            self._hi, self._head, self._tail = hi, self._heads[1 + len(rest)], rest + self.encoded
        return self._head + _BYTE[n & 0x7F | 0x80 if hi else n] + self._tail


def attributes_of(attrs: Mapping[str, Any] | tuple[int, Shared]) -> dict[str, Any]:
    """A record's attributes as one dict."""
    if type(attrs) is tuple:
        n, shared = attrs
        return {shared.key: n, **shared.items}
    return dict(attrs)  # type: ignore[arg-type]


_names: dict[str, bytes] = {}  # a span name as Span.name (field 5)
_events: dict[str, tuple[bytes, bytes]] = {}  # an event's bytes around its time (Span.events = 11)


def _event(name: str) -> tuple[bytes, bytes]:
    """Event (time_unix_nano 1: fixed64, name 2) as Span.events: the bytes before and after its time."""
    text = _text(0x12, name) if len(_events) < _CACHED else _field(0x12, name.encode())
    around = bytes((0x5A, 9 + len(text), 0x09)) if len(text) < 0x77 else b"\x5a" + _varint(9 + len(text)) + b"\x09"
    if len(_events) < _CACHED:
        _events[name] = (around, text)
    return around, text


def _span(r: Record) -> bytes:
    name, trace_id, span_id, parent_id, start, end, attrs, events, error = r
    named = _names.get(name)
    if named is None:
        named = _names[name] = _text(0x2A, name) if len(_names) < _CACHED else _field(0x2A, name.encode())
    parts = [
        _ids_parent(_HIGH, trace_id >> 64, trace_id & _MASK64, _LOW, span_id, _PARENT, parent_id) if parent_id
        else _ids(_HIGH, trace_id >> 64, trace_id & _MASK64, _LOW, span_id),
        named,
        _times(_KIND_START, start, 0x41, end),
        attrs[1].with_id(attrs[0]) if type(attrs) is tuple else _span_attributes(attrs),  # type: ignore[arg-type]
    ]  # fmt: skip
    for event, at in events:
        before, text = _events.get(event) or _event(event)
        parts += (before, _fixed64(at), text)
    if error is not None:  # Status: message 2, code 3 (ERROR = 2)
        parts.append(_field(0x7A, _field(0x12, error.encode()) + b"\x18\x02"))
    body = b"".join(parts)
    n = len(body)  # ScopeSpans.spans = 2
    return (bytes((0x12, n)) if n < 0x80 else bytes((0x12, (n & 0x7F) | 0x80, n >> 7)) if n < 0x4000
            else b"\x12" + _varint(n)) + body  # fmt: skip


def _request(spans: Iterable[bytes], resource: bytes, scope: bytes) -> bytes:
    """An ExportTraceServiceRequest of encoded spans (`_span`), with the resource's attributes and the
    scope encoded (`_resource`, `_scope`)."""
    return _field(0x0A, resource + _field(0x12, scope + b"".join(spans)))


def _resource(attrs: Mapping[str, Any]) -> bytes:
    """ResourceSpans.resource (field 1): a Resource of these attributes."""
    return _field(0x0A, _attributes(0x0A, attrs))


def _scope(name: str) -> bytes:
    """ScopeSpans.scope (field 1): an InstrumentationScope of this name."""
    return _field(0x0A, _text(0x0A, name))


def encode(records: Iterable[Record], resource: Mapping[str, Any], scope: str = "jobdeck") -> bytes:
    """An ExportTraceServiceRequest holding `records`, all of one resource and instrumentation scope."""
    return _request([_span(r) for r in records], _resource(resource), _scope(scope))


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name) or default)
    except ValueError:
        return default


class SpanBatcher:
    """Spans waiting for export, encoded, and the thread that posts them over OTLP/HTTP."""

    def __init__(self, resource: Mapping[str, Any], poster: OtlpHttpPoster | None = None) -> None:
        self.poster = poster if poster is not None else OtlpHttpPoster()  # OTEL_EXPORTER_OTLP_(TRACES_)*
        self._resource, self._scope = _resource(resource), _scope("jobdeck")
        self._queue: collections.deque[bytes] = collections.deque()
        self.max_queue = _env_int("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        self.batch = max(1, min(_env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512), self.max_queue))
        self.delay = _env_int("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self.dropped = 0
        self.exported = 0
        self._wake = threading.Event()
        self._everything = threading.Event()  # a flush asks for the spans short of a batch too
        self._idle = threading.Event()
        self._idle.set()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="jobdeck-span-export", daemon=True)
        self._thread.start()

    def add(self, r: Record) -> None:
        """Encode one span and queue it: the caller (the event loop) pays the encoding, a few us, so the
        export thread, which only joins and posts, seldom wants the GIL the loop and the store's writer
        need (an encoding thread took it from them 512 spans at a time)."""
        q = self._queue
        if len(q) >= self.max_queue:
            if not self.dropped:
                log.warning("span export queue full (OTEL_BSP_MAX_QUEUE_SIZE=%d): dropping spans", self.max_queue)
            self.dropped += 1
            return
        try:
            q.append(_span(r))
        except Exception as e:  # e.g. an error message no UTF-8 can hold: that span, never the node's step
            log.warning("span %s not exported: %s", r[0], e)
            return
        if len(q) % self.batch == 0:  # another full batch (the thread may be posting the one before)
            self._wake.set()

    def _loop(self) -> None:
        while True:
            timed_out = not self._wake.wait(self.delay)
            self._wake.clear()
            everything = timed_out or self._stopping or self._everything.is_set()
            self._everything.clear()
            self._idle.clear()
            try:
                self._drain(everything)
            finally:
                self._idle.set()
            if self._stopping:
                return

    def _drain(self, everything: bool) -> None:
        """Post the full batches queued, and what is left too if `everything` (the schedule delay passed, a
        flush, the stop), as the SDK's batch processor does: spans keep coming while a batch is posted,
        and posting that remainder at once made 3-4 posts of every 512 spans in a drain, each ~0.2 ms."""
        q = self._queue
        while len(q) >= self.batch or (everything and q):
            batch = [q.popleft() for _ in range(min(len(q), self.batch))]
            try:
                if self.poster.post(_request(batch, self._resource, self._scope)):  # it logs a refusal itself
                    self.exported += len(batch)
            except Exception as e:  # an exporter's failure never reaches the node
                log.warning("span export failed: %s", e)

    def flush(self, timeout: float = 30.0) -> bool:
        """Export what is queued now; True once it is out (or failed) within `timeout` s."""
        deadline = time.monotonic() + timeout
        while self._queue or not self._idle.is_set():  # idle is cleared before a batch leaves the queue
            if time.monotonic() > deadline:
                return False
            self._everything.set()
            self._wake.set()
            self._idle.wait(0.01)
            time.sleep(0.001)
        return True

    def shutdown(self) -> None:
        """Export what is left, then stop the thread."""
        self._stopping = True
        self._wake.set()
        self._thread.join(30)
        self.poster.close()
