"""The tasks of the python benchmark (bench/python_tasks.py), in a module of their own: worker
processes import it at start, so it imports nothing heavy (as a lean task module would)."""

from __future__ import annotations

import asyncio
import os

BLOCK = b"x" * 4096


def small_io(folder: str, n: int) -> int:
    """A sync task with a little real I/O: write 4 KiB, read it back, delete the file."""
    path = os.path.join(folder, f"io-{os.getpid()}-{n}")
    with open(path, "wb") as f:
        f.write(BLOCK)
    with open(path, "rb") as f:
        size = len(f.read())
    os.unlink(path)
    return size


async def small_io_thread(folder: str, n: int) -> int:
    """small_io on a thread, as the python handler ran every sync task before it had worker processes."""
    return await asyncio.to_thread(small_io, folder, n)


async def small_io_async(folder: str, n: int) -> int:
    """small_io as a coroutine (its file calls are quick enough to make on the event loop)."""
    return small_io(folder, n)
