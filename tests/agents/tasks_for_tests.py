"""Small task functions the python handler tests call by dotted path."""

from __future__ import annotations

import asyncio
import threading

NOT_CALLABLE = 42

started = threading.Event()
release = threading.Event()


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


def wait_for_release(timeout: float) -> bool:
    """Block until the test sets `release` (True) or `timeout` passes (False)."""
    started.set()
    return release.wait(timeout)


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
