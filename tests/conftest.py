"""Shared fixtures: a real node (SQLite file, HTTP server on a loopback port, local agent)."""

from __future__ import annotations

import asyncio
import inspect
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from core.cli import attach_local_agent
from core.client import JobDeckClient
from core.config import Settings, load_settings
from core.node import Node
from tests.services import create_database, execute, postgres_problem, run_sync, with_database

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def _agent_state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Agents started by a test keep their state (agents/state.py) under a temp folder, never in
    the user's ~/.local/state, where another test run's agent of the same name would hold it."""
    old = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("xdg-state"))
    yield
    if old is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = old


@dataclass
class RunningNode:
    """A node serving on a real socket in this test's event loop."""

    node: Node
    url: str
    client: JobDeckClient

    @property
    def engine(self):  # type: ignore[no-untyped-def]
        return self.node.engine

    @property
    def store(self):  # type: ignore[no-untyped-def]
        return self.node.store


def node_settings(tmp_path: Path, **overrides: object) -> Settings:
    """Settings for a throw-away node: its own data dir, an OS-chosen port, short leases."""
    base: dict[str, object] = dict(data_dir=tmp_path, port=0, lease_seconds=5.0, heartbeat_seconds=1.0,
                                   kill_grace_seconds=1.0, reap_interval_seconds=0.2)  # fmt: skip
    base.update(overrides)
    return load_settings(environ={}, **base)


async def start_node(settings: Settings, *, local_agent: bool = True) -> tuple[Node, str, asyncio.Task[None]]:
    node = Node(settings)
    await node.start()
    if local_agent:
        attach_local_agent(node, name="test-agent")
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(node.serve(on_ready=ready.set_result))
    url = await asyncio.wait_for(ready, 10)
    if local_agent:
        deadline = time.monotonic() + 5
        while not node.engine.hub.sessions and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    return node, url, task


async def stop_node(node: Node, task: asyncio.Task[None]) -> None:
    assert node.server is not None
    node.server.should_exit = True
    await asyncio.wait_for(task, 15)


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[RunningNode]:
    """A node with a local agent (32 slots) on a fresh SQLite file."""
    node, url, task = await start_node(node_settings(tmp_path))
    client = JobDeckClient(url)
    try:
        yield RunningNode(node, url, client)
    finally:
        await client.close()
        await stop_node(node, task)


def stop_process(proc: subprocess.Popen[Any], seconds: float = 15) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `seconds`."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServerProcess:
    """A `jobdeck` process started as a user would."""

    proc: subprocess.Popen[str]
    url: str
    data_dir: Path
    log: Path

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM, as a user's Ctrl-C would, and SIGKILL if it has not exited within 15 s."""
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()

    def output(self) -> str:
        return self.log.read_text()


def spawn_jobdeck(
    data_dir: Path, *args: str, port: int | None = None, env: dict[str, str] | None = None
) -> ServerProcess:
    """Start `jobdeck up` (or other args) as a subprocess and wait until it answers /healthz."""
    import httpx

    port = port or free_port()
    log = data_dir.parent / f"jobdeck-{port}.log"
    cmd = [sys.executable, "-m", "core.cli", *(args or ("up",)), "--data-dir", str(data_dir), "--port", str(port)]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with open(log, "a") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=full_env, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jobdeck exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return ServerProcess(proc, url, data_dir, log)
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"jobdeck did not answer within 30 s:\n{log.read_text()}")


def spawn_agent(server: str, name: str, log_dir: Path, *args: str) -> subprocess.Popen[str]:
    """Start `jobdeck agent --server SERVER --name NAME ARGS...`; its output goes to log_dir/agent-NAME.log,
    its state (unless ARGS say --state-dir) to log_dir/agent-NAME-state: a restart with the same name is
    the same agent."""
    log = open(log_dir / f"agent-{name}.log", "a")  # noqa: SIM115 - closed with the process
    if "--state-dir" not in args:
        args = ("--state-dir", str(log_dir / f"agent-{name}-state"), *args)
    cmd = [sys.executable, "-m", "core.cli", "agent", "--server", server, "--name", name, *args]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip


@pytest.fixture
def jobdeck_process(tmp_path: Path) -> Iterator[ServerProcess]:
    """`jobdeck up` as a subprocess on a free port."""
    sp = spawn_jobdeck(tmp_path / "data")
    try:
        yield sp
    finally:
        if sp.proc.poll() is None:
            sp.stop()


async def take(events: Any, n: int) -> Any:
    """The first `n` items of an async iterator (a feed), then stop."""
    count = 0
    async for e in events:
        yield e
        count += 1
        if count >= n:
            return


async def until(predicate: Any, timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll `predicate` (sync or async) until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; last value {value!r}")
        await asyncio.sleep(0.02)


# A shell job that notes when each run starts and ends, to check that no job ever runs twice at once.
RECORDER = """
import os, sys, time
log = sys.argv[1]
job, attempt = os.environ["JOBDECK_JOB_ID"], os.environ["JOBDECK_ATTEMPT"]
def note(what):
    with open(log, "a") as f:
        f.write(f"{what} {job} {attempt} {time.time():.6f}\\n")
note("start")
print("working", flush=True)
time.sleep(float(sys.argv[2]))
note("end")
"""


def recorder_task(tmp_path: Path, seconds: float) -> dict[str, Any]:
    """A shell task that runs `seconds` and notes its start and end in tmp_path/runs.log."""
    script = tmp_path / "recorder.py"
    script.write_text(RECORDER)
    return {"kind": "shell", "argv": [sys.executable, str(script), str(tmp_path / "runs.log"), str(seconds)]}


def recorded_runs(tmp_path: Path) -> list[tuple[str, int, int, float]]:
    """(start|end, job id, attempt, time) for every note the recorder wrote."""
    path = tmp_path / "runs.log"
    if not path.exists():
        return []
    rows = (line.split() for line in path.read_text().splitlines())
    return [(w, int(j), int(a), float(t)) for w, j, a, t in rows]


def run_spans(tmp_path: Path, cut_off_at: float) -> dict[int, list[tuple[float, float]]]:
    """Each job's runs as (start, end) from the recorder's notes; a run that never wrote its end
    (cut off by a kill) ends at `cut_off_at`."""
    spans: dict[int, list[tuple[float, float]]] = {}
    starts: dict[tuple[int, int], float] = {}
    for what, job, attempt, t in recorded_runs(tmp_path):
        if what == "start":
            starts[(job, attempt)] = t
        else:
            spans.setdefault(job, []).append((starts.pop((job, attempt)), t))
    for (job, _), t in starts.items():
        spans.setdefault(job, []).append((t, cut_off_at))
    return spans


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A throw-away PostgreSQL database for this test session (tests use a fresh schema in it)."""
    problem = postgres_problem()
    if problem:
        pytest.skip(problem)
    url, drop = run_sync(create_database())
    try:
        yield url
    finally:
        run_sync(drop())


@pytest.fixture
def pg_url(pg_database: str) -> Iterator[str]:
    """A URL whose connections work in a fresh, empty schema of the session's database."""
    schema = f"s_{uuid.uuid4().hex[:12]}"
    run_sync(execute(pg_database, f"CREATE SCHEMA {schema}"))
    yield with_database(pg_database, pg_database.rsplit("/", 1)[-1], search_path=schema)
    run_sync(execute(pg_database, f"DROP SCHEMA {schema} CASCADE"))


async def fire_times(client: JobDeckClient, schedule_id: int) -> list[float]:
    """The fire time of every job the schedule made (Unix seconds), paging through the job list."""
    from datetime import datetime

    out: list[float] = []
    cursor: Any = None
    while True:
        page = await client.list_jobs(schedule_id=schedule_id, limit=1000, cursor=cursor)
        out += [datetime.fromisoformat(j["fire_time"]).timestamp() for j in page["jobs"] if j["fire_time"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return out


@dataclass
class Mailbox:
    """What the SMTP server received."""

    messages: list[Any] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # aiosmtpd's handler hook
        self.messages.append(envelope)
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp_server() -> Iterator[tuple[str, int, Mailbox]]:
    """A real SMTP server (aiosmtpd, its own thread) on a loopback port."""
    from aiosmtpd.controller import Controller

    box = Mailbox()
    port = free_port()
    ctl = Controller(box, hostname="127.0.0.1", port=port)
    ctl.start()
    try:
        yield "127.0.0.1", port, box
    finally:
        ctl.stop()


# With pytest-xdist (`./dev test -n 2`): which tests share a worker. A test module stays whole on one
# worker (its module-scoped nodes start once); the browser tests share one worker (one dashboard, one
# Playwright at a time on the shared Reflex project); and the long runs whose load or timing matters
# (the chaos run, the fuzz, the retention load, the faketime DST nights, 10,000 sleepers) run one after
# another on one worker, never two of them at once.
XDIST_GROUPS = {
    "browser": ("tests/web_ui/", "tests/e2e/test_wheel.py"),
    "long runs": (
        "tests/chaos/test_chaos.py",
        "tests/api/test_fuzz.py",
        "tests/obs/test_retention_load.py",
        "tests/e2e/test_schedule_dst_night.py",
        "tests/agents/test_remote_agents.py",
    ),
}


def xdist_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its group's name, or else its module."""
    for group, prefixes in XDIST_GROUPS.items():
        if nodeid.startswith(prefixes):
            return group
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's default scheduling (`-n N`, which hands out single tests) by unit of work instead."""
    if config.getoption("dist") not in ("load", "loadscope"):
        return None  # an explicit --dist of another kind is the caller's choice
    from xdist.scheduler import LoadScopeScheduling

    # Units in the order of collection, not the largest first: the long runs (first met in tests/agents/)
    # then start early on one worker while the other works through the rest, instead of last of all.
    config.option.loadscopereorder = False

    class ByUnit(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return xdist_unit(nodeid)

    return ByUnit(config, log)
