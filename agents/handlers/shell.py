"""The shell handler: a command string (via /bin/sh) or an argv list, with env and cwd."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
from typing import Any

from agents.handlers.base import Outcome, RunContext

_PR_SET_PDEATHSIG = 1
try:
    _libc: ctypes.CDLL | None = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:  # not Linux
    _libc = None


def _die_with_parent() -> None:
    # If the agent is killed outright, its commands die with it instead of running on unowned.
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


async def _stop(proc: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM the command's process group, then SIGKILL after `grace` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            await asyncio.wait_for(proc.wait(), wait)
            return
        except TimeoutError:
            continue


async def run_shell(task: dict[str, Any], ctx: RunContext) -> Outcome:
    """Run the command; exit code 0 is success. Output (stdout and stderr together) goes to the tail."""
    env = {**os.environ, **{str(k): str(v) for k, v in (task.get("env") or {}).items()}}
    env["JOBDECK_JOB_ID"] = str(ctx.job_id)
    env["JOBDECK_ATTEMPT"] = str(ctx.attempt)
    common: dict[str, Any] = dict(
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
        cwd=task.get("cwd") or None,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )
    try:
        if task.get("argv"):
            proc = await asyncio.create_subprocess_exec(*task["argv"], **common)
        else:
            proc = await asyncio.create_subprocess_shell(task["command"], **common)
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        # The job's definition is wrong (another attempt cannot help): say what and where.
        cwd = task.get("cwd") or os.getcwd()
        if task.get("cwd") and not os.path.isdir(task["cwd"]):
            return Outcome(False, f"working directory not found: {task['cwd']}", retryable=False)
        program = str((task.get("argv") or [exc.filename])[0])
        problem = "permission denied (is it executable?)" if isinstance(exc, PermissionError) else "command not found"
        hint = f" (relative to the agent's directory {cwd})" if not os.path.isabs(program) and "/" in program else ""
        return Outcome(False, f"{problem}: {program}{hint}", retryable=False)
    assert proc.stdout is not None
    try:
        while chunk := await proc.stdout.read(65536):
            ctx.write(chunk)
        code = await proc.wait()
    except asyncio.CancelledError:
        await asyncio.shield(_stop(proc, ctx.kill_grace))
        raise
    if code == 0:
        return Outcome(True, exit_code=0)
    error = f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    last = ctx.last_line()
    return Outcome(False, f"{error}: {last}" if last else error, exit_code=code)
