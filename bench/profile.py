"""Optional py-spy recording of a server (`--profile DIR`), summarised as its hot spots.

py-spy samples the server from outside (no code change, no restart). It records only
threads that are not idle, so a thread's share of the samples is roughly its CPU use.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RATE = 100  # samples per second: enough for a hot-spot list, cheap for the server
TOP = 12


def py_spy_path() -> str | None:
    """py-spy from this venv if installed there (`pip install py-spy`), else from PATH."""
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


@dataclass
class Profiler:
    """A running `py-spy record` attached to one process."""

    process: subprocess.Popen[bytes]
    output: Path
    started: float

    @classmethod
    def start(cls, pid: int, output: Path) -> Profiler | None:
        exe = py_spy_path()
        if exe is None:
            print("  (py-spy not found: `.venv/bin/pip install py-spy` to profile)", file=sys.stderr)
            return None
        output.parent.mkdir(parents=True, exist_ok=True)
        # --nonblocking: do not pause the server to sample it, so the figures move less.
        cmd = [exe, "record", "--pid", str(pid), "--rate", str(RATE), "--format", "raw", "--output", str(output),
               "--threads", "--nolineno", "--full-filenames", "--nonblocking"]  # fmt: skip
        log = output.with_suffix(".log").open("wb")
        return cls(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), output, time.monotonic())

    async def stop(self) -> str:
        """Stop recording (py-spy writes its file on SIGINT) and return the summary."""
        seconds = time.monotonic() - self.started
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                await asyncio.to_thread(self.process.wait, 10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        if not self.output.exists():
            return f"py-spy wrote nothing; see {self.output.with_suffix('.log')}"
        return summarize(self.output, seconds)


def _frame(raw: str) -> tuple[str, str]:
    """`func (/path/to/file.py)` -> (func, a short path)."""
    func, _, path = raw.rpartition(" (")
    path = path.rstrip(")")
    if "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    elif path.startswith(f"{ROOT}/"):
        path = path.removeprefix(f"{ROOT}/")
    elif "/lib/python" in path:
        path = "stdlib/" + path.split("/lib/python", 1)[1].split("/", 1)[-1]
    return (func or raw), path


def summarize(path: Path, seconds: float) -> str:
    """Thread shares, the top functions by self time, and the top JobDeck functions by inclusive time."""
    threads: Counter[str] = Counter()
    own: Counter[tuple[str, str]] = Counter()
    inclusive: Counter[tuple[str, str]] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        thread_frame, *frames = stack.split(";")
        thread = thread_frame.split(": ", 1)[-1]
        total += count
        threads[thread] += count
        parsed = [_frame(f) for f in frames]
        if parsed:
            own[parsed[-1]] += count
        # Left out: a thread's entry, on every stack of that thread, which says nothing the
        # thread share does not: core/cli.py for the main thread (the composition root the
        # event loop runs under), the first JobDeck frame for others (e.g. Writer._run).
        ours = [f for f in parsed if f[1].startswith(("core/", "agents/")) and f[1] != "core/cli.py"]
        entry = set() if thread == "MainThread" else set(ours[:1])
        for f in set(ours) - entry:
            inclusive[f] += count
    if total == 0:
        return "py-spy recorded no busy samples"
    possible = max(seconds * RATE, 1.0)

    def rows(counter: Counter[tuple[str, str]]) -> list[str]:
        return [f"    {100 * n / total:5.1f}%  {func}  ({where})" for (func, where), n in counter.most_common(TOP)]

    busy = ", ".join(f"{name} {100 * n / possible:.0f}%" for name, n in threads.most_common())
    return "\n".join(
        [
            f"  {seconds:.1f} s at {RATE} Hz, {total} busy samples; thread busy share of wall time: {busy}",
            "  self time (the function on top of the stack), % of busy samples:",
            *rows(own),
            "  inclusive time in JobDeck code (core/, agents/) below each thread's entry, % of busy samples:",
            *rows(inclusive),
        ]
    )
