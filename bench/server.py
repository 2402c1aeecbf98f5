"""JobDeck processes started by a benchmark: a server (`jobdeck up` / `jobdeck server`) or a remote
agent (`jobdeck agent`). Start, wait until ready, account CPU and memory, stop, scan the log."""

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
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

import httpx

from bench.profile import Profiler

ROOT = Path(__file__).resolve().parent.parent
READY_LINE = re.compile(r"JobDeck is up: API (http://\S+)")
# What in a log is worth a reader's attention after a benchmark.
LOG_ISSUE = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b|Traceback|Exception")
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0
_TICK = os.sysconf("SC_CLK_TCK")
T = TypeVar("T")


class BenchError(Exception):
    """A benchmark could not produce its figures (the message says why and how to look)."""


@dataclass
class ProcessReport:
    """What is left of a process after it stopped: where its files are, and what its log says."""

    name: str
    data_dir: Path
    log_path: Path
    kind: str = "server"  # or "agent"
    exit_code: int | None = None
    issues: list[str] = field(default_factory=list)
    profile: str = ""
    kept: bool = False


@dataclass(frozen=True)
class Memory:
    """A process's resident memory now and at its peak (VmRSS, VmHWM), in MB (10^6 bytes)."""

    rss: float
    peak: float


@dataclass
class Process:
    """A running JobDeck process."""

    name: str
    process: subprocess.Popen[bytes]
    report: ProcessReport

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu(self) -> tuple[float, float]:
        """CPU seconds used so far by (the event-loop thread, every other thread) of the process.

        The main thread runs the event loop (a server's HTTP, engine and local agent; an agent's
        jobs); the others are a server's SQLite writer and reader pool, an agent's thread pool
        for sync tasks. Splitting them shows which one saturates.
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

    def memory(self) -> Memory:
        """Resident memory now and the high-water mark since the process started (/proc/PID/status)."""
        kb: dict[str, int] = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                kb[key] = int(value.split()[0])  # "kB" in the file, which means KiB
        return Memory(kb["VmRSS"] * 1024 / 1e6, kb["VmHWM"] * 1024 / 1e6)


@dataclass
class Server(Process):
    """A running server and the URL of its API."""

    url: str
    database: str = ""  # JOBDECK_DATABASE_URL if set: the store is a PostgreSQL server (its CPU is metered too)


@dataclass
class CpuUsage:
    """CPU used during one measured interval, as a share of one core."""

    wall: float
    server_main: float
    server_threads: float
    client: float
    agent_main: float | None = None  # None: no remote agent was measured
    agent_threads: float = 0.0
    servers: int = 1  # several: the server figures are their sum
    database: float | None = None  # every `postgres` process on this machine; None: not metered

    def note(self) -> str:
        def pct(cpu: float) -> str:
            return f"{100 * cpu / self.wall:.0f}%" if self.wall > 0 else "?"

        agent = (
            ""
            if self.agent_main is None
            else f", agent loop {pct(self.agent_main)} + threads {pct(self.agent_threads)}"
        )
        who = "server" if self.servers == 1 else f"{self.servers} servers' sum:"
        db = "" if self.database is None else f", postgres {pct(self.database)}"
        return (
            f"cpu: {who} loop {pct(self.server_main)} + threads {pct(self.server_threads)}{agent}{db}, "
            f"client {pct(self.client)}"
        )


class CpuMeter:
    """Measures wall time and the CPU of the server (the sum over the nodes, if several), of a remote
    agent if given, and of this (client) process over an interval."""

    def __init__(self, server: Server | Sequence[Server], agent: Process | None = None) -> None:
        self._servers = [server] if isinstance(server, Server) else list(server)
        self._agent = agent
        self._database = any(s.database for s in self._servers)
        self._start = self._sample()

    def _sample(self) -> tuple[float, ...]:
        agent = self._agent.cpu() if self._agent is not None else (0.0, 0.0)
        loops, threads = zip(*(s.cpu() for s in self._servers), strict=True)
        db = postgres_cpu() if self._database else 0.0
        return (time.perf_counter(), sum(loops), sum(threads), time.process_time(), *agent, db)

    def stop(self) -> CpuUsage:
        wall, main, other, client, agent_main, agent_other, db = (
            b - a for a, b in zip(self._start, self._sample(), strict=True)
        )
        agent = agent_main if self._agent is not None else None
        return CpuUsage(
            wall, main, other, client, agent, agent_other, len(self._servers), db if self._database else None
        )


def postgres_cpu() -> float:
    """CPU seconds used so far by every live `postgres` process on this machine (the server of a
    local database: its backends, WAL writer, checkpointer...). A backend that exited between two
    samples takes its seconds with it, so this is a floor; others' sessions would count too."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm, rest = text.split(" (", 1)[1].rsplit(")", 1)
        if comm == "postgres":
            fields = rest.split()
            total += int(fields[11]) + int(fields[12])
    return total / _TICK


@dataclass
class ServerOptions:
    """How every process of a run is started and kept."""

    tmp_root: Path
    keep: bool = False
    profile_dir: Path | None = None
    reports: list[ProcessReport] = field(default_factory=list)


@contextlib.asynccontextmanager
async def jobdeck_server(
    name: str,
    slots: int,
    opts: ServerOptions,
    command: Literal["up", "server"] = "up",
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[Server]:
    """Run `jobdeck up` with `slots` local agent slots (or `jobdeck server`: a core node with no
    local agent) on a fresh data dir for the life of the block.

    The port is chosen by the OS (`--port 0`) and read back from the ready line in the log, so
    two runs on a shared machine never race for a port. The server is stopped with SIGINT (a
    graceful shutdown) and killed if it does not stop in time. Its log is scanned afterwards.
    `env`: added to its environment (e.g. JOBDECK_DATABASE_URL: the store is elsewhere).
    """

    def cmd(data_dir: Path) -> list[str]:
        local = ["--slots", str(slots), "--no-web"] if command == "up" else []
        return [sys.executable, "-m", "core.cli", command, "--data-dir", str(data_dir), "--port", "0", *local]

    async with _supervised(name, "server", cmd, opts, _wait_ready, env) as (process, report, url):
        yield Server(name, process, report, url, (env or {}).get("JOBDECK_DATABASE_URL", ""))


@contextlib.asynccontextmanager
async def jobdeck_agent(name: str, server: str, slots: int, opts: ServerOptions) -> AsyncIterator[Process]:
    """Run `jobdeck agent --name NAME --slots SLOTS` against the server at `server` for the life of
    the block; ready once the server lists it among its agents. Stopped as a server is (SIGINT: the
    agent drains, then exits)."""

    def cmd(_: Path) -> list[str]:
        return [sys.executable, "-m", "core.cli", "agent", "--server", server, "--name", name, "--slots", str(slots)]

    async def registered(process: subprocess.Popen[bytes], log_path: Path) -> None:
        await _wait_registered(process, log_path, server, name)

    async with _supervised(name, "agent", cmd, opts, registered) as (process, report, _):
        yield Process(name, process, report)


@contextlib.asynccontextmanager
async def _supervised(
    name: str,
    kind: str,
    cmd: Callable[[Path], list[str]],
    opts: ServerOptions,
    ready: Callable[[subprocess.Popen[bytes], Path], Awaitable[T]],
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[tuple[subprocess.Popen[bytes], ProcessReport, T]]:
    """Start `cmd(dir)` with its log in a fresh dir, wait for `ready`, yield; then stop it and scan its log."""
    data_dir = Path(tempfile.mkdtemp(prefix=f"{name}-{kind}-", dir=opts.tmp_root))
    log_path = data_dir / f"{kind}.log"
    report = ProcessReport(name, data_dir, log_path, kind)
    opts.reports.append(report)
    with log_path.open("wb") as log:
        # A session of its own: a Ctrl-C in the terminal reaches only the benchmark, which then
        # stops the process in order (and never leaves it running).
        process = subprocess.Popen(
            cmd(data_dir),
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=None if env is None else {**os.environ, **env},
        )
    profiler: Profiler | None = None
    failed = False
    try:
        value = await ready(process, log_path)
        if opts.profile_dir is not None:
            suffix = "" if kind == "server" else f".{kind}"
            profiler = Profiler.start(process.pid, opts.profile_dir / f"{name}{suffix}.txt")
        yield process, report, value
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


async def _wait_registered(process: subprocess.Popen[bytes], log_path: Path, server: str, name: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    async with httpx.AsyncClient(timeout=2.0) as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise BenchError(f"the agent exited with {process.returncode} at start; see {log_path}")
            with contextlib.suppress(httpx.HTTPError):
                agents = (await http.get(f"{server}/v1/agents")).json()["agents"]
                if any(a["name"] == name for a in agents):
                    return
            await asyncio.sleep(0.05)
    raise BenchError(f"the agent did not register within {START_TIMEOUT:.0f} s; see {log_path}")


async def _stop(process: subprocess.Popen[bytes]) -> int | None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            await asyncio.to_thread(process.wait, STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            await asyncio.to_thread(process.wait)
    return process.returncode
