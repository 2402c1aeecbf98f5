"""The python handler: a sync or async callable named by a dotted path, with JSON args and kwargs."""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Callable
from typing import Any

from agents.handlers.base import Outcome, RunContext
from agents.sdk import registered

_cache: dict[str, Callable[..., Any]] = {}


class TaskNotFound(LookupError):
    """No callable at that dotted path."""


def resolve(path: str) -> Callable[..., Any]:
    """`package.module:function` or `package.module.function` to the callable."""
    cached = _cache.get(path) or registered(path)
    if cached is not None:
        return cached
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise TaskNotFound(f"{path!r} is not a dotted path like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TaskNotFound(f"cannot import {module_name!r} for task {path!r}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise TaskNotFound(f"module {module_name!r} has no {attr!r}")
    if not callable(obj):
        raise TaskNotFound(f"{path!r} is not callable")
    fn: Callable[..., Any] = obj
    _cache[path] = fn
    return fn


async def run_python(task: dict[str, Any], ctx: RunContext) -> Outcome:
    """Call the function; its JSON-able return value becomes the job's result."""
    try:
        fn = resolve(task["function"])
    except TaskNotFound as exc:
        return Outcome(False, str(exc), retryable=False)
    args, kwargs = task.get("args") or [], task.get("kwargs") or {}
    try:
        if inspect.iscoroutinefunction(fn):
            value = await fn(*args, **kwargs)
        else:
            # A sync function runs on a thread; on cancel it is abandoned, not interrupted.
            value = await asyncio.to_thread(fn, *args, **kwargs)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return Outcome(False, f"{type(exc).__name__}: {exc}")
    return Outcome(True, result=value)
