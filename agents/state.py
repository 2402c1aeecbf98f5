"""An agent's state folder: who it is across restarts, and the results no core has acknowledged.

One folder, one agent process: the folder is locked (flock) while the agent runs, so a second
process started with the same folder stops with a clear message instead of taking over the
first one's identity. The folder holds:

- `instance`: the agent's identity. A restarted agent keeps it, so a core that still holds the
  dead process's connection lets the new one take that name at once (it is the same agent).
- `results/<job>-<attempt>.json`: the finished attempts whose results no core acknowledged yet, a
  file per batch written together (named after its first), a JSON list of reports. Written before
  the results are sent, deleted once the core acknowledged every result in it; an agent that is
  killed and started again sends the file's results again (one the core already recorded is
  refused as stale, and forgotten). The writes are not fsynced: they survive the agent process
  dying (SIGKILL, OOM), not the machine losing power. A file per batch, not per result: 32 files
  written, renamed and deleted for 32 results cost the agent more than running them.
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
        self._file_of: dict[tuple[int, int], Path] = {}  # each kept result's file
        self._left: dict[Path, int] = {}  # each file's results not acknowledged yet

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

    def keep_results(self, reports: list[dict[str, Any]]) -> None:
        """Write finished attempts' reports to one file (atomically: a half-written file is never read back)."""
        if not reports:
            return
        path = self._file(int(reports[0]["job_id"]), int(reports[0]["attempt"]))
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(reports))
        tmp.replace(path)
        self._track(path, reports)

    def _track(self, path: Path, reports: list[dict[str, Any]]) -> None:
        for r in reports:
            self._file_of[(int(r["job_id"]), int(r["attempt"]))] = path
        self._left[path] = self._left.get(path, 0) + len(reports)

    def drop_result(self, job_id: int, attempt: int) -> None:
        """The core acknowledged it (recorded, or refused for good): forget it, and its file once
        every result in that file is acknowledged."""
        path = self._file_of.pop((job_id, attempt), None)
        if path is None:
            return
        self._left[path] -= 1
        if self._left[path] <= 0:
            del self._left[path]
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def kept_results(self) -> list[dict[str, Any]]:
        """The reports of an earlier run of this agent that no core acknowledged, oldest first."""
        out = []
        for path in sorted(self.results.glob("*.json"), key=lambda p: p.stat().st_mtime):
            try:
                found = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError) as exc:
                log.warning("cannot read the kept result %s (%s): skipping it", path, exc)
                continue
            # A list: a batch file; a dict: one report, as agents before batch files wrote them.
            reports = [r for r in (found if isinstance(found, list) else [found])
                       if isinstance(r, dict) and "job_id" in r and "attempt" in r]  # fmt: skip
            self._track(path, reports)
            out += reports
        for tmp in self.results.glob("*.tmp"):
            tmp.unlink(missing_ok=True)
        return out
