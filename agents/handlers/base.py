"""What every handler gets (a context with an output tail) and gives back (an outcome)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Outcome:
    """How one run ended, as far as the handler can tell."""

    ok: bool
    error: str | None = None
    exit_code: int | None = None
    result: Any = None
    retryable: bool = True  # False: another attempt cannot help (no such task): straight to dead


class RunContext:
    """Per-run facilities: the output tail (the last `tail_bytes` bytes are kept) and settings."""

    def __init__(
        self,
        job_id: int,
        attempt: int,
        tail_bytes: int = 64 * 1024,
        kill_grace: float = 5.0,
        stream: Callable[[bytes], None] | None = None,
    ) -> None:
        self.job_id = job_id
        self._stream = stream
        self.attempt = attempt
        self.tail_bytes = tail_bytes
        self.kill_grace = kill_grace
        self._buf = bytearray()
        self.truncated = 0  # bytes dropped from the front

    def write(self, data: bytes) -> None:
        """Append output, keeping only the tail (and stream it live, if someone listens)."""
        if self._stream is not None:
            self._stream(data)
        self._buf += data
        extra = len(self._buf) - self.tail_bytes
        if extra > 0:
            del self._buf[:extra]
            self.truncated += extra

    @property
    def output(self) -> str:
        text = self._buf.decode("utf-8", errors="replace")
        if self.truncated:
            return f"[... {self.truncated} earlier bytes dropped: the last {self.tail_bytes} bytes are kept]\n" + text
        return text

    def last_line(self) -> str:
        lines = self._buf.decode("utf-8", errors="replace").strip().splitlines()
        return lines[-1][:300] if lines else ""
