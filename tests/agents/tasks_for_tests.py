"""Small task functions the python handler tests call by dotted path."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from agents.sdk import current_job, task

NOT_CALLABLE = 42


def add(a: int, b: int) -> int:
    """A plain sync task."""
    return a + b


async def greet(name: str, *, punctuation: str = "!") -> dict[str, str]:
    """An async task with a keyword argument."""
    await asyncio.sleep(0)
    return {"greeting": f"hello {name}{punctuation}"}


def fail(message: str) -> None:
    """A sync task that raises."""
    raise ValueError(message)


async def fail_async(message: str) -> None:
    """An async task that raises."""
    await asyncio.sleep(0)
    raise RuntimeError(message)


def wait_for_release(started: str, release: str, timeout: float) -> bool:
    """Create the file `started`, then wait until the file `release` exists (True) or `timeout` passes."""
    import os
    import time

    open(started, "w").close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(release):
            return True
        time.sleep(0.01)
    return False


class Namespace:
    """Holds a task one attribute deeper than the module."""

    @staticmethod
    def nested(x: int) -> int:
        return x * 2


async def big_result(size: int, wait: float = 0.5) -> str:
    """Return `size` bytes after a pause (many finishing together make a large result batch)."""
    await asyncio.sleep(wait)
    return "x" * size


async def record_run(path: str, token: int, seconds: float) -> int:
    """Note the start and end of this run of `token` in `path` (to check runs never overlap)."""
    import time

    with open(path, "a") as f:
        f.write(f"start {token} {time.time():.6f}\n")
    await asyncio.sleep(seconds)
    with open(path, "a") as f:
        f.write(f"end {token} {time.time():.6f}\n")
    return token


TICK_SECONDS = 0.05


def _note(path: str, what: str, case: str, run: str) -> None:
    import os
    import time

    with open(path, "a") as f:
        f.write(f"{what} {case} {run} {os.getpid()} {time.time():.6f}\n")


def record_ticks(path: str, case: str, seconds: float) -> str:
    """A sync task that notes its start, a tick every 50 ms while it runs and its end in `path`, so a
    test can tell whether two runs of one job overlapped and whether a stopped run really stopped."""
    import os
    import time

    run = f"{os.getpid()}.{threading.get_ident()}.{time.monotonic_ns()}"
    _note(path, "start", case, run)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(TICK_SECONDS)
        _note(path, "tick", case, run)
    _note(path, "end", case, run)
    return run


async def record_ticks_async(path: str, case: str, seconds: float) -> str:
    """record_ticks as a coroutine (it runs in the agent's event loop)."""
    import os
    import time

    run = f"{os.getpid()}.async.{time.monotonic_ns()}"
    _note(path, "start", case, run)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        await asyncio.sleep(TICK_SECONDS)
        _note(path, "tick", case, run)
    _note(path, "end", case, run)
    return run


def crash(how: str) -> None:
    """Die the hard way: `exit` (os._exit(3)) or `segv` (SIGSEGV), as a broken native library would."""
    import os
    import signal

    if how == "exit":
        os._exit(3)
    os.kill(os.getpid(), signal.SIGSEGV)


def identity(env_name: str = "GREETING") -> dict[str, Any]:
    """Which process runs this call, and which job it says it runs for (env and current_job())."""
    import os

    job = current_job()
    return {"pid": os.getpid(), "env": [os.environ.get("JOBDECK_JOB_ID"), os.environ.get("JOBDECK_ATTEMPT")],
            "current": [job.id, job.attempt], "value": os.environ.get(env_name),
            "job_env": job.env.get(env_name)}  # fmt: skip


async def identity_async(env_name: str = "GREETING") -> dict[str, Any]:
    """identity() as a coroutine: it runs in the agent's process."""
    import os

    job = current_job()
    return {"pid": os.getpid(), "current": [job.id, job.attempt], "job_env": job.env.get(env_name)}


def talk(lines: int) -> str:
    """Print `lines` lines on stdout and one on stderr."""
    import sys

    for i in range(lines):
        print(f"line {i}")
    print("on stderr", file=sys.stderr)
    return "done"


def stubborn(seconds: float) -> None:
    """Ignore SIGTERM, start a child process, say both pids and 'ready', then sleep."""
    import os
    import signal
    import subprocess
    import time

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen(["sleep", "30"])
    print(f"pid={os.getpid()} child={child.pid} ready", flush=True)
    time.sleep(seconds)


def spans(path: str, seconds: float) -> None:
    """Note this call's pid, start and end in `path` (to count calls running at once)."""
    import os
    import time

    start = time.time()
    time.sleep(seconds)
    with open(path, "a") as f:
        f.write(f"{os.getpid()} {start:.6f} {time.time():.6f}\n")


def leak(env_name: str) -> str:
    """Print the secret in env `env_name`, then fail with it in the message."""
    import os

    value = os.environ[env_name]
    print(f"the password is {value}!", flush=True)
    raise RuntimeError(f"could not log in with {value}")


async def leak_async(env_name: str) -> dict[str, str]:
    """Return the secret (current_job().env) inside the result."""
    return {"secret": current_job().env[env_name]}


@task(max_attempts=2)
def tagged_sync(x: int) -> dict[str, Any]:
    """A @task: its registered name resolves in the agent and in its worker processes."""
    import os

    return {"double": x * 2, "pid": os.getpid(), "job": current_job().id}


@task
async def tagged_async(x: int) -> dict[str, Any]:
    """An async @task."""
    import os

    return {"double": x * 2, "pid": os.getpid()}


alias_of_tagged_async = tagged_async  # a @task reached by another name than the one it registered


def trace_context() -> dict[str, Any]:
    """The OpenTelemetry context this sync call runs in (a worker process), and its TRACEPARENT."""
    from opentelemetry import trace

    c = trace.get_current_span().get_span_context()
    import os

    return {"trace_id": f"{c.trace_id:032x}", "span_id": f"{c.span_id:016x}", "env": os.environ.get("TRACEPARENT")}


async def trace_context_async() -> dict[str, Any]:
    """The OpenTelemetry context this async call runs in (in the agent's own process), and a child
    span it starts there with a tracer of its own."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    c = trace.get_current_span().get_span_context()
    with TracerProvider().get_tracer("task").start_as_current_span("task.own") as own:
        parent = own.parent
    return {"trace_id": f"{c.trace_id:032x}", "span_id": f"{c.span_id:016x}",
            "child_parent": f"{parent.span_id:016x}" if parent is not None else None}  # fmt: skip


# Runs in the test's own event loop (a local agent): the test opens each gate and reads the counts.
GATES: dict[str, asyncio.Event] = {}
STARTED: list[str] = []
AT_ONCE = {"now": 0, "most": 0}


async def gated(name: str) -> str:
    """Note that `name` started, then wait until the test opens GATES[name]."""
    STARTED.append(name)
    await GATES.setdefault(name, asyncio.Event()).wait()
    return name


async def counted() -> int:
    """Count the runs of this task going at once (AT_ONCE), yielding to the loop once in between."""
    AT_ONCE["now"] += 1
    AT_ONCE["most"] = max(AT_ONCE["most"], AT_ONCE["now"])
    await asyncio.sleep(0)
    AT_ONCE["now"] -= 1
    return AT_ONCE["most"]
