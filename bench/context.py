"""The scale of a run and what every benchmark shares: how to start a server, the client to use."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace

from bench.server import CpuMeter, Process, Server, ServerOptions, jobdeck_agent, jobdeck_server
from bench.store import SQLITE, Backend
from bench.workload import BenchClient


@dataclass(frozen=True)
class Scale:
    """How much work each benchmark does. The defaults keep a whole run under ~3 minutes."""

    batch_size: int = 10_000  # jobs per POST /v1/jobs/batch (the API's maximum)
    batches: int = 5  # timed batch calls, after one untimed warm-up call
    single_seconds: float = 4.0  # per single-submit / healthz measurement
    concurrency: int = 16  # concurrent clients of the second single-submit measurement
    e2e_jobs: int = 50_000  # also the jobs of the remote agent's no-op run
    e2e_slots: int = 512  # also the slots of that remote agent
    pickup_rate: float = 200.0  # jobs per second
    pickup_seconds: float = 15.0
    pickup_lead: float = 0.3  # run_at this far in the future, in the second pick-up run
    pickup_slots: int = 64
    flow_turns: int = 6  # turns of the flow benchmark: each drains every limited variant once between unlimited drains
    obs_rounds: int = 3  # ABBA pairs of the obs benchmark per mode: the median pair stands one turn hit by a burst
    obs_parts: tuple[str, ...] = ("metrics", "tracing", "retention")  # what the obs benchmark measures
    scale_jobs: int = 0  # jobs stored in the scale scenario's big store besides its backlog (0: its default)
    scale_parts: tuple[str, ...] = ("drain", "reads", "follow", "maintenance", "sleepers")  # what it measures
    sleepers: int = 10_000  # sleeping jobs running at once in one remote agent
    sleep_seconds: float = 15.0  # how long each sleeps: well beyond the time to start them all
    console_rate: float = 1000.0  # events per second into the console
    console_seconds: float = 10.0
    console_store_jobs: int = 100_000  # jobs in the store under the console
    python_calls: int = 2_000  # sync python calls per measurement of the python benchmark
    python_jobs: int = 2_000  # jobs per run of its end-to-end half
    kafka_events: int = 100_000  # the backlog the Kafka relay drains (its throughput)
    io_jobs: int = 10_000  # jobs of each run of the io benchmark (one Redis PING each)
    io_slots: int = 32  # local agent slots in it: `jobdeck up`'s default
    io_runs: int = 3  # its runs (the spread between them is a figure)
    schedules: int = 10_000  # schedules firing every minute in the schedules benchmark
    poll_seconds: float = 0.5  # how often completion is polled
    stall_seconds: float = 30.0  # no progress for this long: the jobs are reported stuck

    def postgres(self) -> Scale:
        """The defaults of a PostgreSQL column, smaller where a case would run long: each column
        costs as much again, and a `--store both` run has three."""
        return replace(self, e2e_jobs=min(self.e2e_jobs, 20_000), pickup_seconds=min(self.pickup_seconds, 10.0))

    def quick(self) -> Scale:
        """A smoke run: every benchmark, a few seconds each."""
        return replace(
            self,
            batches=2,
            single_seconds=1.0,
            e2e_jobs=5_000,
            io_jobs=3_000,
            io_runs=2,
            pickup_seconds=3.0,
            sleepers=2_000,
            sleep_seconds=5.0,
            console_seconds=3.0,
            console_store_jobs=20_000,
            python_calls=300,
            python_jobs=500,
            kafka_events=20_000,
            schedules=1_000,
            flow_turns=2,
        )


@dataclass
class Nodes:
    """The nodes of one case, all on the same store, and a client of each."""

    servers: list[Server]
    clients: list[BenchClient]

    @property
    def client(self) -> BenchClient:
        """Any node answers for the whole store: the first, for reads and queue actions."""
        return self.clients[0]

    def meter(self) -> CpuMeter:
        return CpuMeter(self.servers)


@dataclass
class RunContext:
    """One run: its scale, and how its servers are started (their reports are kept for the end)."""

    scale: Scale
    servers: ServerOptions
    log_progress: bool = True
    backend: Backend = SQLITE

    def progress(self, message: str) -> None:
        """A progress line on stderr (the figures go to stdout)."""
        if self.log_progress:
            print(f"  {message}", file=sys.stderr, flush=True)

    @contextlib.asynccontextmanager
    async def server(
        self, name: str, slots: int, env: Mapping[str, str] | None = None
    ) -> AsyncIterator[tuple[Server, BenchClient]]:
        """A fresh server with `slots` local agent slots (and `env` added to its environment), and
        a client connected to it."""
        async with (
            self.backend.fresh(name) as store_env,
            jobdeck_server(name, slots, self.servers, env={**store_env, **(env or {})}) as srv,
            BenchClient(srv.url) as client,
        ):
            self.progress(f"server {name!r} up at {srv.url} (pid {srv.pid}, {slots} slots, {self.backend.label})")
            yield srv, client

    @contextlib.asynccontextmanager
    async def nodes(self, name: str, slots: int, env: Mapping[str, str] | None = None) -> AsyncIterator[Nodes]:
        """`backend.nodes` fresh `jobdeck up` nodes sharing one fresh store, each with `slots` local
        agent slots (and `env` added to their environment), and a client connected to each. (On
        SQLite: one node.)"""
        async with self.backend.fresh(name) as store_env, contextlib.AsyncExitStack() as stack:
            env = {**store_env, **(env or {})}
            nodes = Nodes([], [])
            for i in range(self.backend.nodes):
                node = name if self.backend.nodes == 1 else f"{name}-{i + 1}"
                srv = await stack.enter_async_context(jobdeck_server(node, slots, self.servers, env=env))
                nodes.servers.append(srv)
                nodes.clients.append(await stack.enter_async_context(BenchClient(srv.url)))
                self.progress(f"server {node!r} up at {srv.url} (pid {srv.pid}, {slots} slots, {self.backend.label})")
            yield nodes

    @contextlib.asynccontextmanager
    async def remote(self, name: str, slots: int) -> AsyncIterator[tuple[Server, Process, BenchClient]]:
        """A fresh `jobdeck server` (no local agent), one `jobdeck agent` process with `slots` slots
        registered with it, and a client connected to the server."""
        async with (
            self.backend.fresh(name) as env,
            jobdeck_server(name, 0, self.servers, command="server", env=env) as srv,
            BenchClient(srv.url) as client,
            jobdeck_agent(name, srv.url, slots, self.servers) as agent,
        ):
            self.progress(
                f"server {name!r} up at {srv.url} (pid {srv.pid}), agent registered (pid {agent.pid}, {slots} slots)"
            )
            yield srv, agent, client
