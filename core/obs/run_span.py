"""The run's span on an agent (Tracing.run): the task's current OpenTelemetry span while it runs, and
JobDeck's record of the run, handed to the tracer's sink when the run ends.

Imported only when tracing is on (it is an OpenTelemetry API class). Most tasks never look at their
context, so what only a look needs is made at the look: the SpanContext (its validation alone cost
~1.3 us, a third of the run hook) when something calls `get_span_context`, the W3C traceparent when a
handler reads it (a shell task's TRACEPARENT, a sync Python task's). One object stands for the span,
its context and the `with` around the run.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry import context, trace

from core.obs.otlp import Shared, attributes_of
from core.obs.tracing import traceparent

_SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)


class RunSpan(trace.NonRecordingSpan):
    """The run's span: inside `with`, the current span (a task's own spans are its children; what a task
    sets on it is not kept, as on any non-recording span); `note` adds to JobDeck's record of it."""

    __slots__ = ("_context", "_token", "attributes", "parent", "sink", "span_id", "started", "trace_id")

    def __init__(self, sink: Any, trace_id: int, span_id: int, parent: int, attributes: tuple[int, Shared]) -> None:
        # NonRecordingSpan.__init__ is not called: its SpanContext is made when asked for
        self._context: trace.SpanContext | None = None  # type: ignore[assignment]
        self.sink, self.trace_id, self.span_id, self.parent = sink, trace_id, span_id, parent
        self.attributes: tuple[int, Shared] | dict[str, Any] = attributes

    def get_span_context(self) -> trace.SpanContext:
        c = self._context
        if c is None:
            c = self._context = trace.SpanContext(self.trace_id, self.span_id, False, _SAMPLED)
        return c

    @property
    def traceparent(self) -> str:
        """The context the task continues (TRACEPARENT)."""
        return traceparent(self.trace_id, self.span_id)

    def note(self, key: str, value: Any) -> None:
        """An attribute of JobDeck's record of the run (the task's own `set_attribute` is not kept)."""
        if type(self.attributes) is tuple:
            self.attributes = attributes_of(self.attributes)
        self.attributes[key] = value  # type: ignore[index]

    def __enter__(self) -> RunSpan:
        self.started = time.time_ns()
        self._token = context.attach(trace.set_span_in_context(self))
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        context.detach(self._token)
        error = None if kind is None else f"{kind.__name__}: {exc}"
        self.sink.add(("jobdeck.run", self.trace_id, self.span_id, self.parent, self.started, time.time_ns(),
                       self.attributes, (), error))  # fmt: skip

    def __repr__(self) -> str:
        return f"RunSpan(trace_id=0x{self.trace_id:032x}, span_id=0x{self.span_id:016x})"
