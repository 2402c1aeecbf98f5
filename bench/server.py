"""One real `jobdeck up` server as a subprocess: start, wait until healthy, account CPU, stop, scan the log."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.profile import Profiler

ROOT = Path(__file__).resolve().parent.parent
READY_LINE = re.compile(r"JobDeck is up: API (http://\S+)")
# What in a server log is worth a reader's attention after a benchmark.
LOG_ISSUE = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b|Traceback|Exception")
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0
_TICK = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    """A benchmark could not produce its figures (the message says why and how to look)."""


@dataclass
class ServerReport:
    """What is left of a server after it stopped: where its files are, and what its log says."""

    name: str
    data_dir: Path
    log_path: Path
    exit_code: int | None = None
    issues: list[str] = field(default_factory=list)
    profile: str = ""
    kept: bool = False


@dataclass
class Server:
    """A running server."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    report: ServerReport

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu(self) -> tuple[float, float]:
        """CPU seconds used so far by (the event-loop thread, every other thread) of the server.

        The main thread runs the event loop (HTTP, engine, local agent); the others are the
        SQLite writer and the reader pool. Splitting them shows which one saturates.
        """
        main = other = 0.0
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue  # a thread that just ended
            fields = stat.rsplit(")", 1)[1].split()
            seconds = (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime
            if int(task.name) == self.pid:
                main += seconds
            else:
                other += seconds
        return main, other


@dataclass
class CpuUsage:
    """CPU used during one measured interval, as a share of one core."""

    wall: float
    server_main: float
    server_threads: float
    client: float

    def note(self) -> str:
        def pct(cpu: float) -> str:
            return f"{100 * cpu / self.wall:.0f}%" if self.wall > 0 else "?"

        return (
            f"cpu: server loop {pct(self.server_main)} + threads {pct(self.server_threads)}, client {pct(self.client)}"
        )


class CpuMeter:
    """Measures wall time and the CPU of the server and of this (client) process over an interval."""

    def __init__(self, server: Server) -> None:
        self._server = server
        self._start = (time.perf_counter(), *server.cpu(), time.process_time())

    def stop(self) -> CpuUsage:
        end = (time.perf_counter(), *self._server.cpu(), time.process_time())
        wall, main, other, client = (b - a for a, b in zip(self._start, end, strict=True))
        return CpuUsage(wall, main, other, client)


@dataclass
class ServerOptions:
    """How every server of a run is started and kept."""

    tmp_root: Path
    keep: bool = False
    profile_dir: Path | None = None
    reports: list[ServerReport] = field(default_factory=list)


@contextlib.asynccontextmanager
async def jobdeck_server(name: str, slots: int, opts: ServerOptions) -> AsyncIterator[Server]:
    """Run `jobdeck up` with `slots` local agent slots on a fresh data dir for the life of the block.

    The port is chosen by the OS (`--port 0`) and read back from the ready line in the log, so
    two runs on a shared machine never race for a port. The server is stopped with SIGINT (a
    graceful shutdown) and killed if it does not stop in time. Its log is scanned afterwards.
    """
    data_dir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=opts.tmp_root))
    log_path = data_dir / "server.log"
    report = ServerReport(name, data_dir, log_path)
    opts.reports.append(report)
    cmd = [sys.executable, "-m", "core.cli", "up", "--data-dir", str(data_dir), "--port", "0", "--slots", str(slots)]
    with log_path.open("wb") as log:
        # A session of its own: a Ctrl-C in the terminal reaches only the benchmark, which then
        # stops the server in order (and never leaves it running).
        process = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    profiler: Profiler | None = None
    failed = False
    try:
        url = await _wait_ready(process, log_path)
        if opts.profile_dir is not None:
            profiler = Profiler.start(process.pid, opts.profile_dir / f"{name}.txt")
        yield Server(name, url, process, report)
    except Exception:  # not on Ctrl-C (a cancellation): nothing went wrong then
        failed = True  # keep the data dir: the store shows what state the jobs were left in
        raise
    finally:
        if profiler is not None:
            report.profile = await profiler.stop()
        report.exit_code = await _stop(process)
        report.issues = [line for line in log_path.read_text(errors="replace").splitlines() if LOG_ISSUE.search(line)]
        report.kept = failed or opts.keep or bool(report.issues) or report.exit_code not in (0, None)
        if not report.kept:
            shutil.rmtree(data_dir, ignore_errors=True)


async def _wait_ready(process: subprocess.Popen[bytes], log_path: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT
    url: str | None = None
    async with httpx.AsyncClient(timeout=2.0) as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise BenchError(f"the server exited with {process.returncode} at start; see {log_path}")
            if url is None:
                m = READY_LINE.search(log_path.read_text(errors="replace"))
                url = m.group(1) if m else None
            if url is not None:
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{url}/healthz")).status_code == 200:
                        return url
            await asyncio.sleep(0.05)
    raise BenchError(f"the server did not become healthy within {START_TIMEOUT:.0f} s; see {log_path}")


async def _stop(process: subprocess.Popen[bytes]) -> int | None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            await asyncio.to_thread(process.wait, STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            await asyncio.to_thread(process.wait)
    return process.returncode
