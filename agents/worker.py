"""A worker process of the agent's pool (agents/pool.py): runs sync python tasks, one call at a time.

Started as `python -m agents.worker AGENT_PID`. Requests come one JSON line each on stdin and each
gets one JSON line back on the control pipe (the process's original stdout). What a task prints,
on stdout or stderr, goes to the output pipe (fd 2), which the agent streams as the job's output.
Stopping a call is the agent's business: it terminates this whole process (and its group).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import traceback
from collections.abc import Iterator
from typing import IO, Any

import orjson

from agents.process import die_with_parent
from agents.sdk import CurrentJob, enter_job, leave_job
from agents.tasknames import TaskNotFound, resolve

MAX_RESULT_BYTES = 1024 * 1024  # the agent keeps 256 KiB of a result: more is not worth sending
MAX_ERROR_CHARS = 16 * 1024


def _import_all(modules: list[str]) -> list[str]:
    problems = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the agent imported it; say why this process could not
            problems.append(f"cannot import {name!r} in the worker: {type(exc).__name__}: {exc}")
    return problems


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]


def _result(value: Any) -> bytes:
    """The reply of a call that returned `value`: JSON, else its repr(), as the agent would keep it."""
    try:
        reply = orjson.dumps({"ok": True, "result": value})
    except TypeError:
        reply = orjson.dumps({"ok": True, "result": repr(value)[:MAX_RESULT_BYTES]})
    if len(reply) > MAX_RESULT_BYTES:
        note = f"[result of {len(reply)} bytes not kept: store big data elsewhere]"
        reply = orjson.dumps({"ok": True, "result": note})
    return reply


@contextlib.contextmanager
def _trace_context(traceparent: str | None) -> Iterator[None]:
    """The run's trace context as the current OpenTelemetry context during the call (when the task's
    process has the OpenTelemetry API), so the task's own spans join the job's trace, as in an async
    task, which runs inside the agent's run span."""
    if not traceparent:
        yield
        return
    try:
        from opentelemetry import context, trace
    except ImportError:
        yield
        return
    try:
        _, tid, sid, flags = traceparent.strip().split("-", 3)
        parent = trace.SpanContext(int(tid, 16), int(sid, 16), is_remote=True,
                                   trace_flags=trace.TraceFlags(int(flags[:2], 16)))  # fmt: skip
    except ValueError:
        yield
        return
    token = context.attach(trace.set_span_in_context(trace.NonRecordingSpan(parent)))
    try:
        yield
    finally:
        context.detach(token)


def call(request: dict[str, Any]) -> bytes:
    """Run one call: its env (and JOBDECK_JOB_ID / JOBDECK_ATTEMPT, TRACEPARENT when traced) and its
    trace context set for the call only."""
    env: dict[str, str] = request.get("env") or {}
    job = CurrentJob(int(request["job_id"]), int(request["attempt"]), env)
    call_env = {**env, "JOBDECK_JOB_ID": str(job.id), "JOBDECK_ATTEMPT": str(job.attempt)}
    traceparent = request.get("traceparent")
    if traceparent:
        call_env["TRACEPARENT"] = traceparent
    saved = {k: os.environ.get(k) for k in call_env}
    os.environ.update(call_env)
    token = enter_job(job)
    try:
        fn = resolve(request["function"])
        with _trace_context(traceparent):
            value = fn(*request.get("args") or [], **request.get("kwargs") or {})
    except TaskNotFound as exc:
        return orjson.dumps({"ok": False, "error": f"{exc} (in the agent's worker process)", "retryable": False})
    except BaseException as exc:  # SystemExit and KeyboardInterrupt too: a failed call, the worker lives on
        return orjson.dumps({"ok": False, "error": _error(exc)})
    finally:
        leave_job(token)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return _result(value)


def serve(requests: IO[bytes], control: IO[bytes]) -> None:
    """Answer requests until the agent closes stdin."""
    first = orjson.loads(requests.readline() or b"{}")
    sys.path[:] = first.get("sys_path") or sys.path  # names resolve here as in the agent
    problems = _import_all(first.get("modules") or [])
    control.write(orjson.dumps({"type": "ready", "pid": os.getpid(), "problems": problems}) + b"\n")
    for line in requests:
        reply = call(orjson.loads(line))
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # the call's output is in the pipe before its reply
        control.write(reply + b"\n")


def main(argv: list[str]) -> int:
    """Set up the pipes and serve; a worker whose agent is already gone exits at once."""
    die_with_parent()
    if len(argv) > 1 and os.getppid() != int(argv[1]):
        return 0  # the agent died before we asked to die with it
    requests = os.fdopen(os.dup(0), "rb")
    control = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # a task reading stdin reads nothing, not our requests
    os.close(devnull)
    os.dup2(2, 1)  # print() in a task goes where its stderr goes: the job's output
    try:
        serve(requests, control)
    except BrokenPipeError:
        return 0
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
