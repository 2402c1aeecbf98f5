"""How a python task's name (`package.module:function`, `package.module.function` or a `@task` name)
finds its callable. The agent and its worker processes resolve names the same way."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from agents.sdk import Task, registered

_cache: dict[str, Callable[..., Any]] = {}
_modules: list[str] = []  # the modules names were found in, for worker processes to import up front


class TaskNotFound(LookupError):
    """No callable at that dotted path."""


def resolve(path: str) -> Callable[..., Any]:
    """`package.module:function` or `package.module.function` to the callable (a `@task` to its function)."""
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
    obj: Any = registered(path) or module  # importing the module may have registered it
    if obj is module:
        for part in attr.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                raise TaskNotFound(f"module {module_name!r} has no {attr!r}")
    if isinstance(obj, Task):  # a @task reached by another name: its function says whether it is async
        obj = obj.fn
    if not callable(obj):
        raise TaskNotFound(f"{path!r} is not callable")
    fn: Callable[..., Any] = obj
    _cache[path] = fn
    if module_name not in _modules:
        _modules.append(module_name)
    return fn


def resolved_modules() -> list[str]:
    """Every module a name was found in so far."""
    return list(_modules)
