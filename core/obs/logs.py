"""Log set-up: one JSON object per line (or text for a terminal), with the ids of what was being done.

The ids come from context variables set where they are known: the API's request middleware sets
the request id (and the trace id of a `traceparent` header), an agent's run sets the job id,
attempt and queue (`job_context`). asyncio copies the context into each task it starts, so a
line logged anywhere under a request or a run carries its ids without passing them around.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
import sys
import time
from collections.abc import Iterator
from typing import Any, TextIO

import orjson

from core.errors import InvalidInput

FORMATS = ("auto", "json", "text")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("jobdeck_request_id", default=None)
trace_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("jobdeck_trace_id", default=None)
#: the request's W3C traceparent header, when it is a valid one
traceparent: contextvars.ContextVar[str | None] = contextvars.ContextVar("jobdeck_traceparent", default=None)
#: (job id, attempt, queue) of the run in progress
job: contextvars.ContextVar[tuple[int, int, str] | None] = contextvars.ContextVar("jobdeck_job", default=None)


@contextlib.contextmanager
def job_context(job_id: int, attempt: int, queue: str, trace: str | None = None) -> Iterator[None]:
    """Lines logged inside carry this job's ids (and trace id)."""
    token = job.set((job_id, attempt, queue))
    ttoken = trace_id.set(trace) if trace else None
    try:
        yield
    finally:
        job.reset(token)
        if ttoken is not None:
            trace_id.reset(ttoken)


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id of a W3C traceparent (`00-<32 hex>-<16 hex>-<2 hex>`), or None if it is not a valid one."""
    if not traceparent or _TRACEPARENT.match(traceparent.strip()) is None:
        return None
    version, tid, sid, _ = traceparent.strip().split("-", 3)
    if version == "ff" or tid == "0" * 32 or sid == "0" * 16:
        return None
    return tid


_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


class JSONFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "message", ...ids, "error"}`: ids only where known."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        current = job.get()
        if current is not None:
            out["job_id"], out["attempt"], out["queue"] = current
        for key in ("job_id", "attempt", "queue"):  # a line may name its job explicitly: extra={"job_id": 7}
            value = record.__dict__.get(key)
            if value is not None:
                out[key] = value
        tid = trace_id.get()
        if tid is not None:
            out["trace_id"] = tid
        rid = request_id.get()
        if rid is not None:
            out["request_id"] = rid
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def resolve_format(fmt: str | None, stream: TextIO | None = None) -> str:
    """json or text: `auto` is text on a terminal, JSON otherwise (services, containers, files)."""
    fmt = (fmt or "auto").strip().lower()
    if fmt not in FORMATS:
        raise InvalidInput(f"log format {fmt!r} is not one of json, text, auto", field="log_format")
    if fmt == "auto":
        s = stream if stream is not None else sys.stderr
        return "text" if hasattr(s, "isatty") and s.isatty() else "json"
    return fmt


def setup_logging(fmt: str | None, level: str = "info", stream: TextIO | None = None) -> str:
    """Configure the root logger once for this process; returns the format chosen."""
    chosen = resolve_format(fmt, stream)
    name = (level or "info").upper()
    if name not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise InvalidInput(f"log level {level!r} is not one of debug, info, warning, error", field="log_level")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JSONFormatter() if chosen == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(name)
    return chosen
