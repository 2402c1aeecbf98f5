"""JobDeck's own OTLP span export (core/obs/otlp.py): what it posts is read back with the official
OTLP protobuf classes (opentelemetry-proto), field by field; and a node and a remote agent with
JOBDECK_TRACING=otlp, at the default sampling, post every job's trace to an OTLP/HTTP endpoint."""

from __future__ import annotations

import contextlib
import gzip
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from core.obs import otlp
from core.obs.otlp_http import OtlpHttpPoster
from core.obs.tracing import tracing_for
from tests.conftest import until
from tests.obs.test_tracing import CALLER_SPAN, CALLER_TRACE, TRACEPARENT, _run, _serve


def _attrs(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        which = kv.value.WhichOneof("value")
        v = getattr(kv.value, which)
        out[kv.key] = [getattr(x, x.WhichOneof("value")) for x in v.values] if which == "array_value" else v
    return out


def test_the_encoded_request_reads_back_with_the_official_otlp_classes() -> None:
    long_text = "x" * 300 + "é"
    records: list[otlp.Record] = [
        ("jobdeck.wait", 2**127 + 5, 2**63 + 7, 0xB7AD6B7169203331, 1_700_000_000_000_000_001, 1_700_000_000_500_000_000,
         {"jobdeck.job_id": 123456789012, "neg": -3, "ok": True, "no": False, "ms": 2.5, "jobdeck.queue": "tq",
          "long": long_text, "list": ["a", 1]},
         (("jobdeck.claim", 1_700_000_000_400_000_000),), None),
        ("jobdeck.submit", 1, 2, 0, 10, 20, {}, (), "ValueError: bad"),
        # values equal to the first span's (True == 1, False == 0.0) but of other types: each its own
        ("jobdeck.result", 1, 3, 2, 10, 20, {"ok": 1, "no": 0.0, "jobdeck.queue": "tq"}, (), None),
    ]  # fmt: skip
    req = ExportTraceServiceRequest.FromString(otlp.encode(records, {"service.name": "jobdeck", "pid": 42}))
    (rs,) = req.resource_spans
    assert _attrs(rs.resource.attributes) == {"service.name": "jobdeck", "pid": 42}
    (ss,) = rs.scope_spans
    assert ss.scope.name == "jobdeck"
    wait, submit, result = ss.spans
    assert wait.name == "jobdeck.wait" and wait.kind == 1  # SPAN_KIND_INTERNAL
    assert wait.trace_id == (2**127 + 5).to_bytes(16, "big") and wait.span_id == (2**63 + 7).to_bytes(8, "big")
    assert wait.parent_span_id.hex() == "b7ad6b7169203331"
    assert (wait.start_time_unix_nano, wait.end_time_unix_nano) == (
        1_700_000_000_000_000_001,
        1_700_000_000_500_000_000,
    )
    assert _attrs(wait.attributes) == {"jobdeck.job_id": 123456789012, "neg": -3, "ok": True, "no": False, "ms": 2.5,
                                       "jobdeck.queue": "tq", "long": long_text, "list": ["a", 1]}  # fmt: skip
    assert [(e.name, e.time_unix_nano) for e in wait.events] == [("jobdeck.claim", 1_700_000_000_400_000_000)]
    assert wait.status.code == 0, "unset"
    assert submit.parent_span_id == b"", "a root"
    assert (submit.status.code, submit.status.message) == (2, "ValueError: bad"), "ERROR with its message"
    assert _attrs(result.attributes) == {"ok": 1, "no": 0.0, "jobdeck.queue": "tq"}
    assert [kv.value.WhichOneof("value") for kv in result.attributes] == ["int_value", "double_value", "string_value"]


def test_a_job_step_s_id_and_shared_attributes_read_back_for_ids_of_every_length() -> None:
    """A job step's attributes are (job id, Shared): the id written in front of the shared attributes'
    bytes, which are encoded once. Ids of 1 to 10 varint bytes, as the official classes read them; neighbours
    (the varint's bytes past the first are kept for the next id) and ids going back to an earlier one's."""
    shared = otlp.Shared("jobdeck.job_id", {"jobdeck.attempt": 2, "jobdeck.queue": "q" * 200, "jobdeck.agent": "a1"})
    ids = [0, 1, 127, 128, 129, 255, 256, 16_383, 16_384, 16_385, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**35,
           2**63 - 1, 2**63 - 2, 130, 5, 300]  # fmt: skip
    records: list[otlp.Record] = [
        ("jobdeck.run", 7, i + 1, 3, 10, 20, (n, shared), (), None) for i, n in enumerate(ids)
    ]
    (rs,) = ExportTraceServiceRequest.FromString(otlp.encode(records, {})).resource_spans
    got = [_attrs(s.attributes) for s in rs.scope_spans[0].spans]
    assert got == [{"jobdeck.job_id": n, **shared.items} for n in ids], got
    assert otlp.attributes_of((5, shared)) == {"jobdeck.job_id": 5, **shared.items}, "what an SDK processor gets"


class _Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint, as a collector is: HTTP/1.1, connections kept open. Each POST to
    /v1/traces is read with the official classes (gunzipped if it says gzip); `posts` keeps each one's
    connection (its client port) and headers; `answers`, if any, are the statuses of the next POSTs."""

    protocol_version = "HTTP/1.1"
    spans: ClassVar[list[tuple[dict[str, Any], Any]]] = []
    posts: ClassVar[list[tuple[int, dict[str, str]]]] = []
    answers: ClassVar[list[int]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        _Receiver.posts.append((self.client_address[1], {k.lower(): v for k, v in self.headers.items()}))
        if _Receiver.answers:
            self.send_response(_Receiver.answers.pop(0))
            self.send_header("retry-after", "0")
            self.send_header("content-length", "0")
            self.end_headers()
            return
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path == "/v1/traces" and self.headers.get("content-type") == "application/x-protobuf":
            for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
                for ss in rs.scope_spans:
                    _Receiver.spans.extend((_attrs(rs.resource.attributes), s) for s in ss.spans)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


@contextlib.contextmanager
def _endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


async def test_a_node_and_its_agent_post_every_job_s_trace_over_otlp_http(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    _Receiver.spans = []
    steps = {"jobdeck.submit", "jobdeck.wait", "jobdeck.run", "jobdeck.result"}

    def trace(tid: str) -> dict[str, Any]:
        return {s.name: s for _, s in _Receiver.spans if s.trace_id.hex() == tid}

    with _endpoint() as url:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
        monkeypatch.setenv("OTEL_SERVICE_NAME", "jobdeck-test")
        monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
        tracing = tracing_for("otlp")  # the default sampling: every job
        async for node_url, _ in _serve(tmp_path, tracing):
            called, _ = await _run(node_url, {"traceparent": TRACEPARENT})
            own, output = await _run(node_url, {})
            assert own["trace_id"] is not None, "a job without a caller's context is traced too (the default)"
            await until(lambda tid=own["trace_id"]: steps <= set(trace(CALLER_TRACE)) and steps <= set(trace(tid)),
                        timeout=30, what="both jobs' four spans at the endpoint")  # fmt: skip
        tracing.shutdown()
    spans = trace(CALLER_TRACE)
    assert spans["jobdeck.submit"].parent_span_id.hex() == CALLER_SPAN, "the caller's traceparent honoured"
    for step in ("jobdeck.wait", "jobdeck.run", "jobdeck.result"):
        assert spans[step].parent_span_id == spans["jobdeck.submit"].span_id, f"{step} under the submit"
    job_step = {"jobdeck.job_id": called["id"], "jobdeck.attempt": 1}
    assert _attrs(spans["jobdeck.wait"].attributes) == {**job_step, "jobdeck.queue": "tq", "jobdeck.agent": "remote-1"}
    assert _attrs(spans["jobdeck.run"].attributes) == {**job_step, "jobdeck.queue": "tq"}
    assert _attrs(spans["jobdeck.result"].attributes) == {**job_step, "jobdeck.outcome": "succeeded",
                                                          "jobdeck.state": "succeeded"}  # fmt: skip
    assert [e.name for e in spans["jobdeck.wait"].events] == ["jobdeck.claim"]
    mine = trace(own["trace_id"])
    assert mine["jobdeck.submit"].parent_span_id == b"", "the submit starts the trace"
    assert f"tp=00-{own['trace_id']}-{mine['jobdeck.run'].span_id.hex()}-01" in output, output
    assert {r["service.name"] for r, _ in _Receiver.spans} == {"jobdeck-test"}, "OTEL_SERVICE_NAME"


def test_a_full_export_queue_drops_new_spans_and_says_so(monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    """Nothing listens at the endpoint: the queue holds OTEL_BSP_MAX_QUEUE_SIZE spans, the rest are
    dropped (counted, one warning) rather than growing the node's memory."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "10")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    batcher = otlp.SpanBatcher({"service.name": "x"})
    try:
        for i in range(25):
            batcher.add(("s", 1, i + 1, 0, 1, 2, {}, (), None))
        assert batcher.dropped == 15 and len(batcher._queue) <= 10, (batcher.dropped, len(batcher._queue))
        assert sum("queue full" in r.message for r in caplog.records) == 1, caplog.text
    finally:
        batcher.shutdown()


def test_a_span_that_cannot_be_encoded_is_left_out_alone(monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    """A task's error text with a lone surrogate (no UTF-8 holds it) costs that span only: the others of
    its batch arrive, and the caller never sees the error (the old export thread dropped the batch)."""
    _Receiver.spans, _Receiver.posts, _Receiver.answers = [], [], []
    with _endpoint() as url:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
        batcher = otlp.SpanBatcher({"service.name": "x"})
        try:
            spans = _spans(5)
            spans[2] = (*spans[2][:8], "OSError: \udcff")  # type: ignore[assignment]
            for r in spans:
                batcher.add(r)
            assert batcher.flush(10), "exported in time"
        finally:
            batcher.shutdown()
    assert sorted(s.span_id for _, s in _Receiver.spans) == [(i + 1).to_bytes(8, "big") for i in (0, 1, 3, 4)]
    assert sum("not exported" in r.message for r in caplog.records) == 1, caplog.text


def _spans(n: int) -> list[otlp.Record]:
    return [("s", 1, i + 1, 0, 1, 2, {"jobdeck.job_id": i}, (), None) for i in range(n)]


def test_spans_go_over_one_kept_alive_connection_with_the_configured_headers_and_gzip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several exports reach a real HTTP/1.1 collector over one connection, with
    OTEL_EXPORTER_OTLP_HEADERS as given and gzipped as OTEL_EXPORTER_OTLP_COMPRESSION asks. A ~/.netrc
    entry for the collector's host is not sent: the SDK's client (requests) read it on every POST and
    its credentials replaced the configured authorization header."""
    _Receiver.spans, _Receiver.posts, _Receiver.answers = [], [], []
    netrc = tmp_path / ".netrc"
    netrc.write_text("machine 127.0.0.1 login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20t0ken,x-tenant=team-a")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100")
    with _endpoint() as url:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
        batcher = otlp.SpanBatcher({"service.name": "x"})
        try:
            for r in _spans(450):
                batcher.add(r)
            assert batcher.flush(10), "exported in time"
        finally:
            batcher.shutdown()
    assert sorted(s.span_id for _, s in _Receiver.spans) == [(i + 1).to_bytes(8, "big") for i in range(450)]
    assert len(_Receiver.posts) == 5, f"5 exports of at most 100 spans, got {len(_Receiver.posts)}"
    assert len({port for port, _ in _Receiver.posts}) == 1, f"one connection, got ports {_Receiver.posts}"
    for _, headers in _Receiver.posts:
        assert (headers.get("authorization"), headers.get("x-tenant")) == ("Bearer t0ken", "team-a"), headers
        assert headers.get("content-encoding") == "gzip", headers


def test_spans_leave_in_full_batches_and_the_rest_when_a_flush_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spans keep coming while a batch is posted: the export thread posts full batches
    (OTEL_BSP_MAX_EXPORT_BATCH_SIZE) and leaves the rest for the next one, until the schedule delay
    passes or a flush asks for it (it posted every remainder at once: 3-4 posts of each batch's spans)."""
    _Receiver.spans, _Receiver.posts, _Receiver.answers = [], [], []
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    with _endpoint() as url:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
        batcher = otlp.SpanBatcher({"service.name": "x"})
        try:
            for r in _spans(250):
                batcher.add(r)
            deadline = time.monotonic() + 30
            while batcher.exported < 200 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert (batcher.exported, len(batcher._queue)) == (200, 50), "two full batches out, 50 waiting"
            assert batcher.flush(10), "the rest exported in time"
        finally:
            batcher.shutdown()
    assert (len(_Receiver.posts), len(_Receiver.spans)) == (3, 250), (len(_Receiver.posts), len(_Receiver.spans))


def test_a_busy_collector_s_export_is_retried_and_a_refused_one_is_dropped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """503 (Retry-After: 0) then 200: the batch arrives, posted twice. 400: dropped, said once, not retried."""
    _Receiver.spans, _Receiver.posts, _Receiver.answers = [], [], [503]
    with _endpoint() as url:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{url}/v1/traces")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # the traces one wins
        poster = OtlpHttpPoster()
        assert poster.post(otlp.encode(_spans(3), {})), "taken after one retry"
        assert (len(_Receiver.posts), len(_Receiver.spans)) == (2, 3)
        _Receiver.answers = [400]
        assert not poster.post(otlp.encode(_spans(3), {})), "a refused batch is not exported"
        assert (len(_Receiver.posts), len(_Receiver.spans)) == (3, 3), "not retried"
        poster.close()
    assert sum("400" in r.message for r in caplog.records) == 1, caplog.text
