"""What every handler gets (a context with an output tail) and gives back (an outcome)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents.secrets import SecretStore, is_reference

if TYPE_CHECKING:
    from agents.pool import WorkerPool
    from core.obs.run_span import RunSpan


@dataclass(slots=True)
class Outcome:
    """How one run ended, as far as the handler can tell."""

    ok: bool
    error: str | None = None
    exit_code: int | None = None
    result: Any = None
    retryable: bool = True  # False: another attempt cannot help (no such task): straight to dead
    breaker_ok: bool | None = None  # an http request was sent: did the host answer well (its circuit breaker)


class RunContext:
    """Per-run facilities: the output tail (the last `tail_bytes` bytes are kept), settings, the
    agent's python worker pool and secrets, and the redaction of those secrets from what the run shows."""

    def __init__(
        self,
        job_id: int,
        attempt: int,
        tail_bytes: int = 64 * 1024,
        kill_grace: float = 5.0,
        stream: Callable[[bytes], None] | None = None,
        workers: WorkerPool | None = None,
        secrets: SecretStore | None = None,
    ) -> None:
        self.job_id = job_id
        self._stream = stream
        self.attempt = attempt
        self.tail_bytes = tail_bytes
        self.kill_grace = kill_grace
        self.workers = workers
        self.secrets = secrets
        self.trace: RunSpan | str | None = None  # the run's span, or the job's traceparent when the run is not traced
        self.parent_results: dict[str, Any] = {}  # the results of the jobs it depends on (task.parent_results)
        self._buf = bytearray()
        self.truncated = 0  # bytes dropped from the front
        self._hidden: dict[str, str] = {}  # secret value (or one line of it) -> its name
        self._pattern: re.Pattern[bytes] | None = None
        self._text_pattern: re.Pattern[str] | None = None
        self._hold = 0  # bytes held back from the stream: a secret may be split across two writes
        self._pending = b""

    @property
    def traceparent(self) -> str | None:
        """The job's trace context for the task (TRACEPARENT): the run's span's, made when read (most
        tasks never read it), else the job's own (tracing off: the caller's)."""
        t = self.trace
        return t if t is None or isinstance(t, str) else t.traceparent

    # ------------------------------------------------------------ env and secrets

    def resolve_env(self, env: Mapping[str, Any] | None) -> dict[str, str]:
        """The task's env with each `{"secret": name}` replaced by its value (SecretNotFound if the agent
        has no such secret); from then on those values are redacted from this run's output and errors."""
        if not env:
            return {}
        out: dict[str, str] = {}
        for key, value in env.items():
            if is_reference(value):
                name = value["secret"]
                out[str(key)] = secret = (self.secrets or SecretStore()).get(name)
                self.hide(name, secret)
            else:
                out[str(key)] = str(value)
        return out

    def hide(self, name: str, value: str) -> None:
        """Redact `value` (and each longer line of a multi-line value) from now on."""
        pieces = [value, *(line.strip() for line in value.splitlines() if len(line.strip()) >= 4)]
        for piece in pieces:
            if piece:
                self._hidden[piece] = name
        alternatives = sorted(self._hidden, key=len, reverse=True)  # the longest first
        self._text_pattern = re.compile("|".join(map(re.escape, alternatives)))
        self._pattern = re.compile(b"|".join(re.escape(a.encode()) for a in alternatives))
        self._hold = max(len(a.encode()) for a in alternatives)

    def redact(self, text: str) -> str:
        """`text` with every secret of this run replaced by `[secret NAME]`."""
        if self._text_pattern is None:
            return text
        return self._text_pattern.sub(lambda m: f"[secret {self._hidden[m.group()]}]", text)

    def redact_value(self, value: Any) -> Any:
        """A JSON-like value (a task's result) with secrets redacted from every string in it."""
        if self._text_pattern is None:
            return value
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, list | tuple):
            return [self.redact_value(v) for v in value]
        if isinstance(value, dict):
            return {self.redact(k) if isinstance(k, str) else k: self.redact_value(v) for k, v in value.items()}
        return value

    def _redact_bytes(self, data: bytes, final: bool) -> bytes:
        """Redact what can be told now; keep back a tail that may be the start of a secret."""
        assert self._pattern is not None
        buf = self._pending + data
        cut = len(buf) if final else len(buf) - (self._hold - 1)
        out: list[bytes] = []
        pos = 0
        for m in self._pattern.finditer(buf):
            if m.start() >= cut:
                break
            out += (buf[pos : m.start()], f"[secret {self._hidden[m.group().decode()]}]".encode())
            pos = m.end()
        cut = max(cut, pos)
        out.append(buf[pos:cut])
        self._pending = buf[cut:]
        return b"".join(out)

    # ------------------------------------------------------------ output

    def write(self, data: bytes) -> None:
        """Append output, keeping only the tail (and stream it live, if someone listens)."""
        if self._pattern is not None:
            data = self._redact_bytes(data, final=False)
        if data:
            self._emit(data)

    def _emit(self, data: bytes) -> None:
        if self._stream is not None:
            self._stream(data)
        self._buf += data
        extra = len(self._buf) - self.tail_bytes
        if extra > 0:
            del self._buf[:extra]
            self.truncated += extra

    def _release(self) -> None:
        """Let out what was held back for redaction (the run has ended, or someone reads the output)."""
        if self._pending and self._pattern is not None:
            self._emit(self._redact_bytes(b"", final=True))

    @property
    def output(self) -> str:
        self._release()
        text = self._buf.decode("utf-8", errors="replace")
        if self.truncated:
            return f"[... {self.truncated} earlier bytes dropped: the last {self.tail_bytes} bytes are kept]\n" + text
        return text

    def last_line(self) -> str:
        self._release()
        lines = self._buf.decode("utf-8", errors="replace").strip().splitlines()
        return lines[-1][:300] if lines else ""
