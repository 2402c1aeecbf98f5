"""An agent's state folder: who it is across restarts, and the results no core has acknowledged.

One folder, one agent process: the folder is locked (flock) while the agent runs, so a second
process started with the same folder stops with a clear message instead of taking over the
first one's identity. The folder holds:

- `instance`: the agent's identity. A restarted agent keeps it, so a core that still holds the
  dead process's connection lets the new one take that name at once (it is the same agent).
- `results/<job>-<attempt>.json`: every finished attempt whose result no core acknowledged yet.
  Written before the result is sent, deleted on the core's acknowledgement; an agent that is
  killed and started again sends them again. The writes are not fsynced: they survive the agent
  process dying (SIGKILL, OOM), not the machine losing power.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import uuid
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("jobdeck.agent")


class StateDirBusy(Exception):
    """Another agent process holds this state folder."""


def default_state_dir(name: str) -> Path:
    """Where an agent named `name` keeps its state by default: $XDG_STATE_HOME/jobdeck/agents/NAME."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "jobdeck" / "agents" / name


class AgentStateDir:
    """The locked state folder of one running agent."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.results = self.path / "results"
        self._lock_fd: int | None = None

    def acquire(self) -> None:
        """Create and lock the folder; StateDirBusy if another live process has it."""
        self.results.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StateDirBusy(
                f"another agent process (pid {holder}) uses the state folder {self.path}: "
                "stop it, or give this agent another --name or --state-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    def release(self) -> None:
        """Unlock the folder (the kernel does it too when the process dies)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def instance(self) -> str:
        """This agent's identity, made on first start and kept across restarts."""
        path = self.path / "instance"
        with contextlib.suppress(FileNotFoundError):
            text = path.read_text().strip()
            if text:
                return text
        value = uuid.uuid4().hex
        tmp = path.with_suffix(".tmp")
        tmp.write_text(value)
        tmp.replace(path)
        return value

    def _file(self, job_id: int, attempt: int) -> Path:
        return self.results / f"{job_id}-{attempt}.json"

    def keep_result(self, report: dict[str, Any]) -> None:
        """Write a finished attempt's report (atomically: a half-written file is never read back)."""
        path = self._file(int(report["job_id"]), int(report["attempt"]))
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(report))
        tmp.replace(path)

    def drop_result(self, job_id: int, attempt: int) -> None:
        """The core acknowledged it (recorded, or refused for good): forget it."""
        with contextlib.suppress(FileNotFoundError):
            self._file(job_id, attempt).unlink()

    def kept_results(self) -> list[dict[str, Any]]:
        """The reports of an earlier run of this agent that no core acknowledged, oldest first."""
        out = []
        for path in sorted(self.results.glob("*.json"), key=lambda p: p.stat().st_mtime):
            try:
                report = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError) as exc:
                log.warning("cannot read the kept result %s (%s): skipping it", path, exc)
                continue
            if isinstance(report, dict) and "job_id" in report and "attempt" in report:
                out.append(report)
        for tmp in self.results.glob("*.tmp"):
            tmp.unlink(missing_ok=True)
        return out
