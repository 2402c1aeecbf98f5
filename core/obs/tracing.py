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
OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER...); `console` prints spans (for a look on one machine).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from core.errors import InvalidInput
from core.obs import logs

if TYPE_CHECKING:
    from core.model import Job

MODES = ("off", "otlp", "console")


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def traceparent_of(span: Any) -> str:
    """The W3C traceparent of a span's context."""
    c = span.get_span_context()
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{c.trace_flags:02x}"


PARENTS_KEPT = 4096  # parent contexts by traceparent: a batch's jobs share their submit's


@functools.lru_cache(maxsize=PARENTS_KEPT)
def _context_of(traceparent: str | None) -> tuple[Any, bool]:
    """(the context of a stored traceparent (an empty one if it is not valid), whether it is sampled).
    Built directly, and once per traceparent: the propagator's parse cost more than the span it parents."""
    from opentelemetry import trace
    from opentelemetry.context import Context

    if not traceparent or logs.trace_id_of(traceparent) is None:
        return Context(), True
    _, tid, sid, flags = traceparent.strip().split("-", 3)
    bits = int(flags[:2], 16)
    span = trace.NonRecordingSpan(trace.SpanContext(int(tid, 16), int(sid, 16), is_remote=True,
                                                    trace_flags=trace.TraceFlags(bits)))  # fmt: skip
    return trace.set_span_in_context(span), bool(bits & 1)


class Tracing:
    """The node's (or agent's) tracer, or none: every hook is a no-op then."""

    def __init__(self, provider: Any = None) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("jobdeck") if provider is not None else None
        # With a parent-based sampler (the default) a child of an unsampled parent is never recorded:
        # such jobs skip the SDK's span machinery altogether (OTEL_TRACES_SAMPLER=parentbased_traceidratio).
        self._follows_parent = False
        if provider is not None:
            from opentelemetry.sdk.trace.sampling import ParentBased

            self._follows_parent = isinstance(getattr(provider, "sampler", None), ParentBased)

    @property
    def enabled(self) -> bool:
        return self.tracer is not None

    def _parent(self, traceparent: str | None) -> Any:
        """The context of a stored (valid) traceparent; an empty one without."""
        return _context_of(traceparent)[0]

    def _skipped(self, traceparent: str | None) -> bool:
        """True if the job's spans would not be recorded anyway (its trace is not sampled)."""
        return self._follows_parent and not _context_of(traceparent)[1]

    @contextlib.contextmanager
    def submit(self, jobs: int) -> Iterator[str | None]:
        """Around a submit: yields the traceparent to store on the new jobs (None: no trace)."""
        incoming = logs.traceparent.get()
        if self.tracer is None:
            yield incoming
            return
        with self.tracer.start_as_current_span("jobdeck.submit", context=self._parent(incoming),
                                               attributes={"jobdeck.jobs": jobs}) as span:  # fmt: skip
            # a trace the sampler dropped is none: no id that leads nowhere, no spans for its jobs
            yield traceparent_of(span) if span.is_recording() or incoming else None

    def fired(self, schedule_id: int, fire_times: int) -> str | None:
        """A schedule's firing (one span, at the moment it fires): the traceparent to store on the jobs
        it makes, or None (no trace). Each firing starts a trace of its own, as a submit without a
        caller's context does."""
        if self.tracer is None:
            return None
        from opentelemetry.context import Context

        attrs = {"jobdeck.schedule_id": schedule_id, "jobdeck.fire_times": fire_times}
        span = self.tracer.start_span("jobdeck.schedule.fire", context=Context(), attributes=attrs)
        span.end()
        return traceparent_of(span) if span.get_span_context().trace_flags.sampled else None

    def claimed(self, jobs: Iterable[Job], began: float, agent: str) -> None:
        """Each traced job's wait, from when it was due to its claim, with the claim in it: one
        transaction claims a batch of jobs, so it is an event (claim began, committed) of each
        job's wait span, with the agent, rather than a span repeated for every job of the batch."""
        if self.tracer is None:
            return
        ended = time.time()
        for j in jobs:
            if not j.traceparent or self._skipped(j.traceparent):
                continue
            due = max(j.run_at, j.created_at)
            attrs = {"jobdeck.job_id": j.id, "jobdeck.attempt": j.attempt, "jobdeck.queue": j.queue,
                     "jobdeck.agent": agent}  # fmt: skip
            wait = self.tracer.start_span("jobdeck.wait", context=self._parent(j.traceparent), start_time=_ns(due),
                                          attributes=attrs)  # fmt: skip
            wait.add_event("jobdeck.claim", timestamp=_ns(max(due, began)))  # the claim: this event to the end
            wait.end(end_time=_ns(max(due, ended)))

    def result(self, job: Job, outcome: str, attempt: int, began: float) -> None:
        """The recording of an attempt's result."""
        if self.tracer is None or not job.traceparent or self._skipped(job.traceparent):
            return
        span = self.tracer.start_span("jobdeck.result", context=self._parent(job.traceparent), start_time=_ns(began),
                                      attributes={"jobdeck.job_id": job.id, "jobdeck.attempt": attempt,
                                                  "jobdeck.outcome": outcome, "jobdeck.state": job.state})  # fmt: skip
        span.end()

    @contextlib.contextmanager
    def run(self, traceparent: str | None, job_id: int, attempt: int, queue: str) -> Iterator[Any]:
        """Around a run on an agent: yields the span (None when not traced); it is the current span
        inside, and `traceparent_of(span)` is what the task gets."""
        if self.tracer is None or not traceparent or self._skipped(traceparent):
            yield None
            return
        attrs = {"jobdeck.job_id": job_id, "jobdeck.attempt": attempt, "jobdeck.queue": queue}
        with self.tracer.start_as_current_span("jobdeck.run", context=self._parent(traceparent),
                                               attributes=attrs) as span:  # fmt: skip
            yield span

    def shutdown(self) -> None:
        """Export what is buffered (a stopping node or agent)."""
        if self.provider is not None and hasattr(self.provider, "shutdown"):
            self.provider.shutdown()


DEFAULT_SAMPLE_RATIO = 0.1  # of the traces a node starts itself; see docs/observability.md "Sampling"


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
    provider = TracerProvider(resource=Resource.create({"service.name": service}), sampler=sampler)
    if mode == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    return Tracing(provider)
