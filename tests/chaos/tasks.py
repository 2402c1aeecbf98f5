"""The task the chaos run submits: it notes each run's start and end, with its attempt and the pid
of the agent process that runs it (an async task runs in the agent's own event loop)."""

from __future__ import annotations

import asyncio
import os
import time

from agents.sdk import current_job


async def noted_run(path: str, token: int, seconds: float) -> int:
    """Append `start TOKEN ATTEMPT TIME PID`, sleep, append `end TOKEN ATTEMPT TIME PID` to `path`."""
    attempt = current_job().attempt
    with open(path, "a") as f:
        f.write(f"start {token} {attempt} {time.time():.6f} {os.getpid()}\n")
    await asyncio.sleep(seconds)
    with open(path, "a") as f:
        f.write(f"end {token} {attempt} {time.time():.6f} {os.getpid()}\n")
    return token
