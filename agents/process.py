"""Child processes of the agent (shell commands, python workers): they die with the agent, and they
are stopped the same way, SIGTERM to their process group, then SIGKILL after a grace period."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # worker processes import this module at start: asyncio would add 40 ms to it
    import asyncio

_PR_SET_PDEATHSIG = 1
try:
    _libc: ctypes.CDLL | None = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:  # not Linux
    _libc = None


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux; elsewhere nothing).

    If the agent is killed outright, its commands die with it instead of running on unowned."""
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


async def stop_group(proc: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM the process group of `proc` (a session leader), then SIGKILL after `grace` seconds."""
    import asyncio

    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            await asyncio.wait_for(proc.wait(), wait)
            return
        except TimeoutError:
            continue


def describe_exit(code: int) -> str:
    """`exit code 3` or `killed by signal SIGSEGV`, from a return code."""
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
