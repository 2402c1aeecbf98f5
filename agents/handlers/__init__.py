"""Handlers: how an agent runs one kind of task. Each is `async def run(task, ctx) -> Outcome`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agents.handlers.base import Outcome, RunContext
from agents.handlers.http import run_http
from agents.handlers.python import run_python
from agents.handlers.shell import run_shell

Handler = Callable[[dict[str, Any], RunContext], Awaitable[Outcome]]

HANDLERS: dict[str, Handler] = {"shell": run_shell, "http": run_http, "python": run_python}

__all__ = ["HANDLERS", "Handler", "Outcome", "RunContext"]
