"""The python handler: a sync or async callable named by a dotted path, with JSON args and kwargs.

An async function runs in the agent's event loop (cancelling it stops it at its next await).
A sync function runs in a worker process of the agent's pool (agents/pool.py), which is
terminated on timeout or cancel, so a run that was stopped never goes on beside its retry.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from agents.handlers.base import Outcome, RunContext
from agents.pool import WorkerPool
from agents.sdk import CurrentJob, enter_job, leave_job
from agents.secrets import SecretNotFound
from agents.tasknames import TaskNotFound, resolve

__all__ = ["TaskNotFound", "resolve", "run_python"]


async def run_python(task: dict[str, Any], ctx: RunContext) -> Outcome:
    """Call the function; its JSON-able return value becomes the job's result."""
    try:
        fn = resolve(task["function"])
        env = ctx.resolve_env(task.get("env"))
    except (TaskNotFound, SecretNotFound) as exc:
        return Outcome(False, str(exc), retryable=False)
    args, kwargs = task.get("args") or [], task.get("kwargs") or {}
    if task.get("parent_results"):
        kwargs = {**kwargs, "parent_results": ctx.parent_results}
    if not inspect.iscoroutinefunction(fn):
        return await _run_in_worker(task["function"], args, kwargs, env, ctx)
    token = enter_job(CurrentJob(ctx.job_id, ctx.attempt, env))
    try:
        value = await fn(*args, **kwargs)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return Outcome(False, ctx.redact(f"{type(exc).__name__}: {exc}"))
    finally:
        leave_job(token)
    return Outcome(True, result=ctx.redact_value(value))


async def _run_in_worker(
    function: str, args: list[Any], kwargs: dict[str, Any], env: dict[str, str], ctx: RunContext
) -> Outcome:
    request = {"function": function, "args": args, "kwargs": kwargs, "env": env,
               "job_id": ctx.job_id, "attempt": ctx.attempt, "traceparent": ctx.traceparent}  # fmt: skip
    if ctx.workers is not None:
        reply = await ctx.workers.call(request, ctx.write, ctx.kill_grace)
    else:  # no agent around (a handler called on its own): a worker process for this one call
        pool = WorkerPool(1)
        try:
            reply = await pool.call(request, ctx.write, ctx.kill_grace)
        finally:
            await asyncio.shield(pool.close())
    if reply.ok:
        return Outcome(True, result=ctx.redact_value(reply.result))
    return Outcome(False, ctx.redact(reply.error or "failed"), retryable=reply.retryable)
