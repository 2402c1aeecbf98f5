"""OpenTelemetry traces: one trace per job, from the submit to its result.

The submit request's span (a child of the caller's W3C `traceparent`, if it sent one; for a Kafka
submission, the message's `traceparent` header; for a schedule's job, `jobdeck.schedule.fire`) is the job's
parent: its context is stored on the job (`jobs.traceparent`) and every later step hangs under it,
whichever node or agent does it: `jobdeck.wait` (due -> claimed, with the claim as its event) on the
node that claimed it, `jobdeck.run` on the agent (its context reaches the task: TRACEPARENT in a shell
task's environment, the current span in an async Python task, and in a sync one, which runs in a worker
process, TRACEPARENT and the current context there), `jobdeck.result` on the node that
recorded it. Steps whose times are known afterwards (the wait) are recorded with those times.

Off by default (JOBDECK_TRACING=off): no SDK is imported and every hook returns at once. The caller's
traceparent is still stored, so the job can be found in the caller's trace. `otlp` exports over
OTLP/HTTP, configured by the standard OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT, _HEADERS,
OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, OTEL_BSP_*...); `console` prints spans (for a look on one machine).

The spans are not made with the SDK's `start_span`: each step's times, ids and attributes are known
when it ends, so it is one tuple, encoded by core/obs/otlp.py and posted off the event loop (or handed to an SDK
provider's processors, as the tests' in-memory exporter is). The SDK supplies the sampler, the
resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES); core/obs/otlp_http.py posts the batches.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from core.errors import InvalidInput
from core.obs import logs
from core.obs.otlp import Record, Shared, attributes_of

if TYPE_CHECKING:
    from core.model import Job
    from core.obs.run_span import RunSpan

MODES = ("off", "otlp", "console")


PARENTS_KEPT = 4096  # parsed traceparents: a batch's jobs share their submit's
SHARED_KEPT = 1024  # job steps' shared span attributes (by attempt, queue, agent, outcome)
_parents: dict[str, tuple[int, int, bool] | None] = {}
_rand = random.getrandbits


def _parsed(traceparent: str | None) -> tuple[int, int, bool] | None:
    """(trace id, span id, sampled) of a stored traceparent, or None if it is not a valid one: each
    is parsed once (a node's own submits are known without a parse, see `_known`)."""
    if not traceparent:
        return None
    try:
        return _parents[traceparent]
    except KeyError:
        pass
    if logs.trace_id_of(traceparent) is None:
        parent = None
    else:
        _, tid, sid, flags = traceparent.strip().split("-", 3)
        parent = int(tid, 16), int(sid, 16), bool(int(flags[:2], 16) & 1)
    if len(_parents) >= PARENTS_KEPT:
        _parents.clear()
    _parents[traceparent] = parent
    return parent


def _known(trace_id: int, span_id: int) -> str:
    """The traceparent of a span this process made that its jobs will carry (a submit's, a firing's),
    remembered as parsed."""
    tp = traceparent(trace_id, span_id)
    if len(_parents) >= PARENTS_KEPT:
        _parents.clear()
    _parents[tp] = (trace_id, span_id, True)
    return tp


def traceparent(trace_id: int, span_id: int) -> str:
    """The sampled W3C traceparent of a span."""
    # bytes.hex, not f"{trace_id:032x}": formatting a 128-bit int as hex took ~1 us of the run hook's ~4
    return f"00-{trace_id.to_bytes(16, 'big').hex()}-{span_id.to_bytes(8, 'big').hex()}-01"


def _new_id(bits: int) -> int:
    while not (n := _rand(bits)):
        pass
    return n


class _Untraced:
    """The context of a step that is not traced: yields what it was given, records nothing."""

    __slots__ = ("value",)

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def __enter__(self) -> Any:
        return self.value

    def __exit__(self, *exc: object) -> None:
        return None


_NONE = _Untraced()


class _Submit:
    """Around a submit (Tracing.submit): its span is recorded when it ends."""

    __slots__ = ("jobs", "parent", "sid", "sink", "started", "tid")

    def __init__(self, sink: Any, jobs: int, tid: int, parent: int) -> None:
        self.sink, self.jobs, self.tid, self.parent = sink, jobs, tid, parent
        self.sid = _new_id(64)
        self.started = time.time_ns()

    def __enter__(self) -> str:
        return _known(self.tid, self.sid)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        error = None if kind is None else f"{kind.__name__}: {exc}"
        self.sink.add(("jobdeck.submit", self.tid, self.sid, self.parent, self.started, time.time_ns(),
                       {"jobdeck.jobs": self.jobs}, (), error))  # fmt: skip


class _SdkSink:
    """Spans handed to an SDK TracerProvider's span processors as finished spans (the in-memory
    exporter of the tests, the console exporter): the same spans the OTLP path encodes."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self._processor = provider._active_span_processor  # the processors add_span_processor registered
        self._resource = provider.resource
        self._scope = InstrumentationScope("jobdeck")

    def add(self, r: Record) -> None:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.trace.status import Status, StatusCode

        name, tid, sid, pid, start, end, attrs, events, error = r
        sampled = trace.TraceFlags(trace.TraceFlags.SAMPLED)
        span = ReadableSpan(
            name,
            context=trace.SpanContext(tid, sid, is_remote=False, trace_flags=sampled),
            parent=trace.SpanContext(tid, pid, is_remote=True, trace_flags=sampled) if pid else None,
            resource=self._resource,
            attributes=attributes_of(attrs),
            events=tuple(Event(e, timestamp=at) for e, at in events),
            status=Status(StatusCode.ERROR, error) if error is not None else Status(StatusCode.UNSET),
            start_time=start,
            end_time=end,
            instrumentation_scope=self._scope,
        )
        self._processor.on_end(span)

    def flush(self, timeout: float = 30.0) -> bool:
        return bool(self._processor.force_flush(int(timeout * 1000)))

    def shutdown(self) -> None:
        self._processor.shutdown()


class Tracing:
    """The node's (or agent's) tracer, or none: every hook is a no-op then.

    A step's span is a tuple handed to the sink (JobDeck's OTLP encoder, core/obs/otlp.py, or an SDK
    provider's processors): the SDK's per-span machinery (a Span object, attribute cleaning, a
    protobuf object per attribute) cost more than the rest of a job. The provider's sampler decides;
    with a parent-based one (the default) a job's spans follow its stored traceparent's sampled bit,
    and a root's decision by trace id ratio (or always on / off) is made here without a call into it."""

    def __init__(self, provider: Any = None, sink: Any = None) -> None:
        self.provider = provider
        self.sink: Any = None
        self.sampler: Any = None
        self._follows_parent = False
        self._root_bound: int | None = None  # a root is kept when (trace id & 2**64 - 1) < this; None: ask
        self._shut = False
        self._shared: dict[tuple[Any, ...], Shared] = {}
        if provider is not None:
            from opentelemetry.sdk.trace.sampling import ParentBased, StaticSampler, TraceIdRatioBased

            from core.obs.run_span import RunSpan

            self.sink = sink if sink is not None else _SdkSink(provider)
            self.sampler = provider.sampler
            self._follows_parent = isinstance(self.sampler, ParentBased)
            root = getattr(self.sampler, "_root", None) if self._follows_parent else self.sampler
            if type(root) is TraceIdRatioBased:
                self._root_bound = root.bound
            elif type(root) is StaticSampler:
                self._root_bound = (1 << 64) if root._decision.is_sampled() else 0  # type: ignore[no-untyped-call]
            self._RunSpan = RunSpan  # an OpenTelemetry API class: imported only with tracing on

    @property
    def enabled(self) -> bool:
        return self.sink is not None

    def _job_step(self, key: tuple[Any, ...], items: dict[str, Any]) -> Shared:
        """The attributes a job step's span shares with the others of its kind, `key` (kind first) naming
        them, made (and encoded) on the first span that has them; the hooks look them up in `_shared`."""
        if len(self._shared) >= SHARED_KEPT:
            self._shared.clear()
        shared = self._shared[key] = Shared("jobdeck.job_id", items)
        return shared

    def _keeps(self, parent: tuple[int, int, bool] | None, trace_id: int, name: str) -> bool:
        """Whether a span (of `trace_id`, under `parent` if any) is recorded: the sampler's decision."""
        if parent is not None and self._follows_parent:
            return parent[2]
        if parent is None and self._root_bound is not None:
            return trace_id & 0xFFFFFFFFFFFFFFFF < self._root_bound
        from opentelemetry import trace

        ctx = None
        if parent is not None:
            flags = trace.TraceFlags(trace.TraceFlags.SAMPLED if parent[2] else 0)
            remote = trace.SpanContext(parent[0], parent[1], is_remote=True, trace_flags=flags)
            ctx = trace.set_span_in_context(trace.NonRecordingSpan(remote))
        return bool(self.sampler.should_sample(ctx, trace_id, name).decision.is_sampled())

    def _child(self, traceparent: str | None, name: str) -> tuple[int, int, bool] | None:
        """(trace id, parent span id, _) for a step of a job with this stored traceparent, or None: the
        job has no trace, or its spans are not recorded."""
        parent = _parsed(traceparent)
        if parent is None or not (parent[2] if self._follows_parent else self._keeps(parent, parent[0], name)):
            return None
        return parent

    def submit(self, jobs: int) -> contextlib.AbstractContextManager[str | None]:
        """Around a submit: yields the traceparent to store on the new jobs (None: no trace)."""
        incoming = logs.traceparent.get()
        if self.sink is None:
            return _Untraced(incoming) if incoming is not None else _NONE
        parent = _parsed(incoming)
        tid = parent[0] if parent is not None else _new_id(128)
        if not self._keeps(parent, tid, "jobdeck.submit"):
            # a trace the sampler dropped is none: no id that leads nowhere, no spans for its jobs
            return _Untraced(incoming) if parent is not None else _NONE
        return _Submit(self.sink, jobs, tid, parent[1] if parent is not None else 0)

    def fired(self, schedule_id: int, fire_times: int) -> str | None:
        """A schedule's firing (one span, at the moment it fires): the traceparent to store on the jobs
        it makes, or None (no trace). Each firing starts a trace of its own, as a submit without a
        caller's context does."""
        if self.sink is None:
            return None
        tid = _new_id(128)
        if not self._keeps(None, tid, "jobdeck.schedule.fire"):
            return None
        sid, now = _new_id(64), time.time_ns()
        attrs = {"jobdeck.schedule_id": schedule_id, "jobdeck.fire_times": fire_times}
        self.sink.add(("jobdeck.schedule.fire", tid, sid, 0, now, now, attrs, (), None))
        return _known(tid, sid)

    def claimed(self, jobs: Iterable[Job], began: float, agent: str) -> None:
        """Each traced job's wait, from when it was due to its claim, with the claim in it: one
        transaction claims a batch of jobs, so it is an event (claim began, committed) of each
        job's wait span, with the agent, rather than a span repeated for every job of the batch."""
        if self.sink is None:
            return
        ended = time.time()
        add, child, shared = self.sink.add, self._child, self._shared
        for j in jobs:
            if not j.traceparent or (step := child(j.traceparent, "jobdeck.wait")) is None:
                continue
            due = max(j.run_at, j.created_at)
            key = ("jobdeck.wait", j.attempt, j.queue, agent)
            attrs = shared.get(key) or self._job_step(key, {"jobdeck.attempt": j.attempt, "jobdeck.queue": j.queue,
                                                            "jobdeck.agent": agent})  # fmt: skip
            # the claim: this event to the end
            add(("jobdeck.wait", step[0], _new_id(64), step[1], int(due * 1e9), int(max(due, ended) * 1e9),
                 (j.id, attrs), (("jobdeck.claim", int(max(due, began) * 1e9)),), None))  # fmt: skip

    def result(self, job: Job, outcome: str, attempt: int, began: float) -> None:
        """The recording of an attempt's result."""
        if self.sink is None or not job.traceparent or (step := self._child(job.traceparent, "jobdeck.result")) is None:
            return
        key = ("jobdeck.result", attempt, outcome, job.state)
        attrs = self._shared.get(key) or self._job_step(key, {"jobdeck.attempt": attempt, "jobdeck.outcome": outcome,
                                                              "jobdeck.state": job.state})  # fmt: skip
        self.sink.add(("jobdeck.result", step[0], _new_id(64), step[1], int(began * 1e9), time.time_ns(),
                       (job.id, attrs), (), None))  # fmt: skip

    def run(self, traceparent: str | None, job_id: int, attempt: int,
            queue: str) -> contextlib.AbstractContextManager[RunSpan | None]:  # fmt: skip
        """Around a run on an agent: yields the span (None when not traced); it is the current span
        inside (for an async Python task's own spans), and `span.traceparent` is what the task gets."""
        if self.sink is None or not traceparent or (step := self._child(traceparent, "jobdeck.run")) is None:
            return _NONE
        key = ("jobdeck.run", attempt, queue)
        attrs = self._shared.get(key) or self._job_step(key, {"jobdeck.attempt": attempt, "jobdeck.queue": queue})
        return self._RunSpan(self.sink, step[0], _new_id(64), step[1], (job_id, attrs))

    def flush(self, timeout: float = 30.0) -> bool:
        """Export what is buffered now (True once it is out)."""
        return self.sink is None or bool(self.sink.flush(timeout))

    def shutdown(self) -> None:
        """Export what is buffered (a stopping node or agent); once."""
        if self.sink is not None and not self._shut:
            self._shut = True
            self.sink.shutdown()


DEFAULT_SAMPLE_RATIO = 1.0  # of the traces a node starts itself: every job; see docs/observability.md "Sampling"


def tracing_for(mode: str, service: str = "jobdeck", sample_ratio: float = DEFAULT_SAMPLE_RATIO) -> Tracing:
    """Tracing as the settings ask: off (no SDK loaded), otlp or console. The traces a node starts
    (a submit without a sampled caller's context, a schedule's firing) are kept at `sample_ratio`,
    unless OTEL_TRACES_SAMPLER names a sampler; a caller's sampled context is always followed."""
    if mode not in MODES:
        raise InvalidInput(f"tracing {mode!r} is not one of off, otlp, console", field="tracing")
    if not 0.0 <= sample_ratio <= 1.0:
        raise InvalidInput(f"trace_sample_ratio {sample_ratio} is not between 0 and 1", field="trace_sample_ratio")
    if mode == "off":
        return Tracing()
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio

    # The SDK reads the OTEL_* variables itself; this only asks whether the operator chose a sampler.
    chosen = bool(os.environ.get("OTEL_TRACES_SAMPLER"))
    sampler = None if chosen else ParentBasedTraceIdRatio(sample_ratio)
    resource = Resource.create()  # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, when set, name the service
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": service}))
    provider = TracerProvider(resource=resource, sampler=sampler)
    if mode == "otlp":
        from core.obs.otlp import SpanBatcher

        return Tracing(provider, SpanBatcher(provider.resource.attributes))
    provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    return Tracing(provider)
