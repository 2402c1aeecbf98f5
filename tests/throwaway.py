"""Throw-away PostgreSQL and Redis servers on free ports, for tests that stop, restart or break
a service. The machine's shared servers are never touched: other work on this machine uses them.

    with ThrowawayPostgres() as pg:        # initdb into a temp folder, started on a free port
        url = pg.url                       # postgresql://postgres@127.0.0.1:PORT/postgres
        pg.restart()                       # or pg.stop() / pg.start(); pg.kill() is a crash
    with ThrowawayRedis() as r:
        r.stop(); r.start()                # the same port and the same (empty) data each time
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _wait(check: object, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {seconds} s waiting for {what}")


def postgres_bin() -> Path | None:
    """The folder of the newest installed PostgreSQL server binaries (initdb, pg_ctl), if any."""
    roots = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0
    )
    for root in reversed(roots):
        if (root / "initdb").exists() and (root / "pg_ctl").exists():
            return root
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def throwaway_problem() -> str | None:
    """None if throw-away servers can be made here, else why not (the tests skip with it)."""
    if postgres_bin() is None:
        return "PostgreSQL server binaries (initdb, pg_ctl) are not installed: apt-get install -y postgresql"
    if shutil.which("redis-server") is None:
        return "redis-server is not installed: apt-get install -y redis-server"
    return None


class ThrowawayPostgres:
    """A PostgreSQL cluster of its own in a temp folder, on a free port, trust auth, fsync off."""

    def __init__(self, port: int | None = None) -> None:
        bin_dir = postgres_bin()
        if bin_dir is None:
            raise RuntimeError(throwaway_problem() or "no PostgreSQL binaries")
        self.bin = bin_dir
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="jobdeck-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        # initdb and the server refuse to run as root: run them as the postgres user when we are root.
        self._as: list[str] = []
        if os.geteuid() == 0:
            self._as = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.dir, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [*self._as, str(self.bin / tool), *args]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr.strip()[-500:]}")

    def start(self) -> None:
        """Start the server and wait until it takes connections."""
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")  # fmt: skip
        self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.log), "-w", "-t", "30", "start")
        _wait(lambda: _port_open(self.port), 30, f"PostgreSQL on port {self.port}")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (`fast`: roll back and disconnect everyone; `immediate`: like a crash)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop")

    def restart(self, mode: str = "fast") -> None:
        """Stop and start again on the same port, with the same data."""
        self.stop(mode)
        self.start()

    def kill(self) -> None:
        """SIGKILL the postmaster, as a crash would (start() recovers)."""
        pid_file = self.data / "postmaster.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text().split()[0])
            os.kill(pid, signal.SIGKILL)
            _wait(lambda: not _port_open(self.port), 10, "PostgreSQL to die")

    def close(self) -> None:
        """Stop the server if it runs and delete its folder."""
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError):
                self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ThrowawayPostgres:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ThrowawayRedis:
    """A redis-server of its own on a free port, keeping nothing on disk."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="jobdeck-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait until it answers."""
        cmd = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
               "--dir", str(self.dir)]  # fmt: skip
        log = open(self.dir / "redis.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        _wait(lambda: _port_open(self.port), 10, f"Redis on port {self.port}")

    def stop(self) -> None:
        """Kill the server (its data goes with it: it keeps nothing on disk)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ThrowawayRedis:
        self.start()
        return self

    def __exit__(self, *exc: TracebackType | object) -> None:
        self.close()
