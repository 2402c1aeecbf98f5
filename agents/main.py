"""`jobdeck agent`: a process that connects to a core node and runs the jobs it is given."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import signal
import sys
import traceback

from agents.runtime import AgentConfig, AgentRefused, AgentRuntime
from agents.sdk import note_imported, registered_names
from agents.state import StateDirBusy, default_state_dir
from core.client import JobDeckClient
from core.errors import TLSUntrusted
from core.obs.logs import setup_logging
from core.obs.tracing import tracing_for
from core.protocol import Channel

log = logging.getLogger("jobdeck.agent")


def import_task_modules(modules: list[str]) -> str | None:
    """Import the modules that declare tasks; the first failure, described, or None."""
    for name in modules:
        try:
            importlib.import_module(name)
            note_imported(name)  # the python worker processes import it too
        except Exception as exc:
            where = traceback.extract_tb(exc.__traceback__)[-1]
            at = "" if where.filename.startswith("<") else f" ({where.filename}:{where.lineno})"
            return f"cannot import {name!r}: {type(exc).__name__}: {exc}{at}"
    return None


async def run_agent(
    server: str, config: AgentConfig, shutdown_grace: float, token: str | None = None, ca_file: str | None = None
) -> int:
    """Serve until SIGTERM / SIGINT (then drain for `shutdown_grace` seconds) or until refused."""
    try:
        runtime = AgentRuntime(config)
    except (StateDirBusy, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    # Several nodes may be given (a,b,c): the agent uses the first that answers and moves to the
    # next when its node goes away; the store is shared, so its running jobs keep their leases.
    clients = [JobDeckClient(url, token=token, ca_file=ca_file) for url in server.split(",") if url.strip()]
    turn = 0
    connected = False

    async def connect() -> Channel:
        nonlocal turn, connected
        client = clients[turn % len(clients)]
        turn += 1
        try:
            channel = await client.agent_channel()
        except TLSUntrusted as exc:
            if not connected:  # a certificate this agent cannot check: a setting to fix, say so and stop
                raise
            raise OSError(exc.message) from None  # it worked before (a certificate being renewed?): retry
        connected = True
        return channel

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    serving = asyncio.create_task(runtime.run_forever(connect))
    stopping = asyncio.create_task(stop.wait())
    print(
        f"agent {config.name}: {config.slots} slots, queues {','.join(config.queues)}"
        + (f", labels {config.labels}" if config.labels else "")
        + f", serving {server}",
        flush=True,
    )
    try:
        done, _ = await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if serving in done:
            serving.result()  # AgentRefused ends the agent
            return 0
        log.info("stopping: %d jobs running get %.0f s to finish", len(runtime.tasks), shutdown_grace)
        await runtime.shutdown(shutdown_grace)
        return 0
    except AgentRefused as exc:
        print(f"error: the core refused this agent: {exc}", file=sys.stderr)
        return 1
    finally:
        for t in (serving, stopping):
            t.cancel()
            with contextlib.suppress(BaseException):
                await t
        for client in clients:
            await client.close()


def main(
    server: str,
    *,
    name: str | None,
    queues: list[str],
    slots: int,
    queue_slots: dict[str, int] | None = None,
    labels: dict[str, str],
    imports: list[str],
    heartbeat_seconds: float,
    kill_grace_seconds: float,
    shutdown_grace_seconds: float,
    log_level: str = "info",
    log_format: str = "auto",
    tracing: str = "off",
    token: str | None = None,
    secrets_dir: str | None = None,
    ca_file: str | None = None,
    state_dir: str | None = None,
) -> int:
    """Entry point of `jobdeck agent` (called by core.cli)."""
    setup_logging(log_format, log_level)
    sys.path.insert(0, ".")  # `--import myproject.tasks` from the project's folder, as python -m would
    problem = import_task_modules(imports)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    if imports:
        print(f"tasks: {', '.join(registered_names()) or '(none declared with @task)'}", flush=True)
    config = AgentConfig(
        queues=tuple(queues) or ("*",),
        slots=slots,
        queue_slots=dict(queue_slots or {}),
        labels=labels,
        heartbeat_seconds=heartbeat_seconds,
        kill_grace_seconds=kill_grace_seconds,
        secrets_dir=secrets_dir or None,
        tracing=tracing_for(tracing, "jobdeck-agent"),
    )
    if name:
        config.name = name
    # An unnamed agent is a new one each start (host-pid): nothing of it is worth keeping.
    if state_dir or name:
        config.state_dir = state_dir or str(default_state_dir(config.name))
    try:
        try:
            import uvloop
        except ImportError:
            return asyncio.run(run_agent(server, config, shutdown_grace_seconds, token, ca_file))
        return uvloop.run(run_agent(server, config, shutdown_grace_seconds, token, ca_file))
    finally:
        config.tracing.shutdown()  # export the last runs' spans
