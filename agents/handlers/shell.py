"""The shell handler: a command string (via /bin/sh) or an argv list, with env and cwd."""

from __future__ import annotations

import asyncio
import os
import tempfile
from typing import Any

import orjson

from agents.handlers.base import Outcome, RunContext
from agents.process import describe_exit, die_with_parent, stop_group
from agents.secrets import SecretNotFound, task_environ


async def run_shell(task: dict[str, Any], ctx: RunContext) -> Outcome:
    """Run the command; exit code 0 is success. Output (stdout and stderr together) goes to the tail."""
    try:
        env = {**task_environ(), **ctx.resolve_env(task.get("env"))}
    except SecretNotFound as exc:
        return Outcome(False, str(exc), retryable=False)
    env["JOBDECK_JOB_ID"] = str(ctx.job_id)
    env["JOBDECK_ATTEMPT"] = str(ctx.attempt)
    if ctx.traceparent:  # W3C trace context: an instrumented task's spans join the job's trace
        env["TRACEPARENT"] = ctx.traceparent
    if task.get("parent_results"):
        results_file = await asyncio.to_thread(_write_results, ctx.parent_results)
        env["JOBDECK_PARENT_RESULTS_FILE"] = results_file
        text = orjson.dumps(ctx.parent_results).decode()
        if len(text) <= RESULTS_ENV_MAX:
            env["JOBDECK_PARENT_RESULTS"] = text
        try:
            return await _run(task, ctx, env)
        finally:
            await asyncio.to_thread(os.unlink, results_file)
    return await _run(task, ctx, env)


RESULTS_ENV_MAX = 32 * 1024  # bigger parents' results are in the file only (the environment has limits)


def _write_results(results: dict[str, Any]) -> str:
    fd, path = tempfile.mkstemp(prefix="jobdeck-parent-results-", suffix=".json")
    with os.fdopen(fd, "wb") as f:
        f.write(orjson.dumps(results))
    return path


async def _run(task: dict[str, Any], ctx: RunContext, env: dict[str, str]) -> Outcome:
    common: dict[str, Any] = dict(
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
        cwd=task.get("cwd") or None,
        start_new_session=True,
        preexec_fn=die_with_parent,
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
        await asyncio.shield(stop_group(proc, ctx.kill_grace))
        raise
    if code == 0:
        return Outcome(True, exit_code=0)
    error = describe_exit(code)
    last = ctx.last_line()
    return Outcome(False, f"{error}: {last}" if last else error, exit_code=code)
