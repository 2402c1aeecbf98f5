"""Small built-in Python tasks, handy for trying JobDeck and for benchmarks."""

from __future__ import annotations

import asyncio
from typing import Any


async def noop() -> None:
    """Do nothing (measures the scheduler, not the work)."""


async def sleep(seconds: float) -> float:
    """Sleep without holding a thread."""
    await asyncio.sleep(seconds)
    return seconds


def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Return the arguments (a sync task: runs in a worker process of the agent)."""
    return {"args": list(args), "kwargs": kwargs}


async def fail(message: str = "failed on purpose") -> None:
    """Raise, so the job fails (for trying retries and the dead-letter set)."""
    raise RuntimeError(message)
