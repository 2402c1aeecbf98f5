"""Commands that run JobDeck processes: up, server, agent, migrate. The composition root: the
only place in core that starts agents."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.client import DEFAULT_SERVER
from core.config import Settings, load_settings
from core.errors import JobDeckError
from core.flow import parse_bulkheads
from core.obs.logs import setup_logging

if TYPE_CHECKING:
    from core.node import Node


def attach_local_agent(node: Node, name: str | None = None) -> None:
    """Run an agent inside the node over an in-process channel: the same runtime remote agents use."""
    from agents.runtime import AgentConfig, AgentRuntime
    from core.protocol import LocalChannel

    settings = node.settings
    core_end, agent_end = LocalChannel.pair()
    config = AgentConfig(
        name=name or f"local-{os.getpid()}",
        slots=settings.local_slots,
        heartbeat_seconds=settings.heartbeat_seconds,
        kill_grace_seconds=settings.kill_grace_seconds,
        output_tail_bytes=settings.output_tail_bytes,
        secrets_dir=str(settings.secrets_dir) if settings.secrets_dir else None,
        tracing=node.tracing,
    )
    runtime = AgentRuntime(config)
    if getattr(node.store, "single_node", False):
        node.spawn(node.engine.hub.reclaim_orphans("local-", config.name), "reclaim-orphans")
    node.spawn(node.engine.attach_agent(core_end), "local-agent-session")
    node.spawn(runtime.serve(agent_end), "local-agent")
    node.on_stop(lambda: runtime.shutdown(settings.shutdown_grace_seconds), hurry=runtime.hurry)


def node_settings(args: argparse.Namespace) -> Settings:
    """The settings of `jobdeck up` / `server`: the flags over JOBDECK_* and the config file."""
    return load_settings(data_dir=args.data_dir, host=args.host, port=args.port, local_slots=args.slots,
                         log_level=getattr(args, "log_level", None), log_format=getattr(args, "log_format", None),
                         tls_cert_file=args.tls_cert_file,
                         tls_key_file=args.tls_key_file, ca_file=getattr(args, "ca_file", None))  # fmt: skip


def companion_ca(settings: Settings) -> str | None:
    """What a client started beside the node (its console, its dashboard) trusts for its https URL:
    the CA file, else the node's own certificate (a self-signed one, or the leaf itself)."""
    return (settings.ca_file or settings.tls_cert_file) or None


def cmd_up(args: argparse.Namespace, *, local_agent: bool) -> int:
    settings = node_settings(args)
    if local_agent and settings.local_slots <= 0:
        local_agent = False
    setup_logging(settings.log_format, settings.log_level)
    want_web = wants_web(args)

    async def main() -> None:
        from core.node import Node

        node = Node(settings)
        await node.start()
        if local_agent:
            attach_local_agent(node)

        def ready(url: str) -> None:
            agents = f", local agent with {settings.local_slots} slots" if local_agent else ", no local agents"
            sign_in = {"none": "no sign-in (loopback only)", "token": "sign-in by token",
                       "oidc": f"sign-in by {settings.oidc_issuer}"}[settings.auth]  # fmt: skip
            print(f"JobDeck is up: API {url}  (store {settings.store_label}{agents}; {sign_in})", flush=True)
            hint = "" if url == DEFAULT_SERVER else f"   (another port: export JOBDECK_SERVER={url})"
            prog = getattr(args, "prog", "jobdeck")
            first = f"{prog} submit -- echo hello" if settings.auth == "none" else f"{prog} login --server {url}"
            print(f"  try: {first}{hint}   |   API docs: {url}/docs", flush=True)
            if want_web:
                web_port = getattr(args, "web_port", None)
                node.on_stop(start_web(url, settings.host, web_port, settings.data_dir, companion_ca(settings)))
            elif web_left_out_by_default(args):
                print(f"  web dashboard: not started (not run in a terminal; `{prog} up --web` or JOBDECK_WEB=1 "
                      "starts it)", flush=True)  # fmt: skip

        await node.serve(ready)

    run_async(main())
    return 0


def wants_web(args: argparse.Namespace) -> bool:
    """Whether `jobdeck up` starts the web dashboard: --web / --no-web, else JOBDECK_WEB=1/0, else
    when a person runs it in a terminal (scripts, tests and services ask for it explicitly)."""
    if getattr(args, "command", "") != "up":
        return False
    flag = getattr(args, "web", None)
    if flag is not None:
        return bool(flag)
    env = os.environ.get("JOBDECK_WEB")
    if env is not None:
        return env.strip().lower() not in ("0", "false", "no", "off", "")
    return sys.stdout.isatty()


def web_left_out_by_default(args: argparse.Namespace) -> bool:
    """`jobdeck up` run from a script with neither --web/--no-web nor JOBDECK_WEB: it says how to ask."""
    return (getattr(args, "command", "") == "up" and getattr(args, "web", None) is None
            and os.environ.get("JOBDECK_WEB") is None and not sys.stdout.isatty())  # fmt: skip


def start_web(
    api_url: str, host: str, port: int | None, data_dir: Path, ca_file: str | None = None
) -> Callable[[], Awaitable[None]]:
    """Start the web dashboard beside `jobdeck up` (its own process, its output in DATA_DIR/web.log);
    returns the hook that stops it. `ca_file`: what it trusts for an https:// core.

    The first start installs bun and copies the Reflex project (seconds of blocking work): all of it
    runs on a thread of its own, so the node answers, runs jobs and keeps its leases meanwhile."""
    import subprocess
    import threading

    from web_ui import launch  # lazy: only `jobdeck up` with the web UI needs it

    port = port or int(os.environ.get("JOBDECK_WEB_PORT") or launch.DEFAULT_PORT)
    web_host = os.environ.get("JOBDECK_WEB_HOST", host)
    url = f"http://{web_host}:{port}"
    log_path = data_dir / "web.log"
    print(f"  web dashboard: building and starting on {url} (about 20 s; log: {log_path})", flush=True)
    started: list[subprocess.Popen[bytes]] = []
    stopping = threading.Event()
    lock = threading.Lock()

    def run() -> None:
        log = launch.open_log(log_path)
        try:
            with lock:
                if stopping.is_set():
                    return
                started.append(launch.spawn(api_url, web_host, port, log=log.fileno(), ca_file=ca_file))
        except Exception as exc:  # the node runs without its dashboard rather than not at all
            print(f"  web dashboard: cannot start: {exc}", flush=True)
            return
        finally:
            log.close()  # the dashboard's process has its own copy
        proc = started[0]
        if launch.wait_ready(proc, url):
            print(f"  web dashboard is up: {url}", flush=True)
        elif proc.poll() is not None and not stopping.is_set():
            print(f"  web dashboard exited ({proc.returncode}); the API runs on. The end of {log_path}:\n"
                  f"{launch.log_tail(log_path)}", flush=True)  # fmt: skip

    threading.Thread(target=run, name="web-start", daemon=True).start()

    def stop_now() -> None:
        stopping.set()
        with lock:  # a set-up under way ends first; no process is started after this
            procs = list(started)
        for proc in procs:
            launch.stop(proc)

    async def stop() -> None:
        await asyncio.to_thread(stop_now)

    return stop


def cmd_up_console(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """`jobdeck up --console`: the node as a child process (its log in the data dir), the console in
    this one; quitting the console stops the node gracefully."""
    import signal
    import subprocess
    import sys
    import time

    import httpx

    from core.client import tls_context

    settings = node_settings(args)
    child_args = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--console"]
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    log_path = settings.data_dir / "node.log"
    url = settings.api_url
    ca_file = companion_ca(settings)
    verify = tls_context(ca_file) if settings.tls else True
    with open(log_path, "a") as log:
        node = subprocess.Popen([sys.executable, "-m", "core.cli", *child_args], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            if node.poll() is not None:
                raise JobDeckError(f"the node exited with {node.returncode}; see {log_path}")
            try:
                if httpx.get(url + "/healthz", timeout=1, verify=verify).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise JobDeckError(f"the node did not answer at {url} within 30 s; see {log_path}")
            time.sleep(0.1)
        from console_tui.app import main as console_main

        return console_main(argparse.Namespace(server=url, ca_file=ca_file))
    finally:
        if node.poll() is None:
            node.send_signal(signal.SIGINT)
            try:
                node.wait(settings.shutdown_grace_seconds + 5)
            except subprocess.TimeoutExpired:
                node.kill()


def cmd_migrate(args: argparse.Namespace) -> int:
    """Bring the store's schema up to date (nodes also do it when they start) and say its version."""
    settings = load_settings(data_dir=args.data_dir)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    async def main() -> int:
        from core.bus import LocalBus
        from core.node import open_store

        store = open_store(settings, LocalBus())
        await store.open()
        try:
            return store.schema_version
        finally:
            await store.close()

    version = run_async(main())
    print(f"schema version {version}: {settings.store_label}")
    return 0


def cmd_agent(args: argparse.Namespace) -> int:
    from agents.main import main as agent_main

    labels = {}
    for pair in args.label:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise JobDeckError(f"--label {pair!r} must look like key=value")
        labels[key] = value
    try:
        queues, reserved = parse_bulkheads(args.queues)
    except ValueError as exc:
        raise JobDeckError(f"--queues: {exc}", field="queues") from None
    shared = [q for q in queues if q not in reserved]
    slots = args.slots if args.slots is not None else sum(reserved.values()) + (32 if shared or not reserved else 0)
    if slots < 1:
        raise JobDeckError("--slots must be at least 1")
    if slots < sum(reserved.values()):
        raise JobDeckError(f"--slots {slots} is fewer than the {sum(reserved.values())} slots --queues keeps "
                           "for its queues", field="slots")  # fmt: skip
    return agent_main(
        args.server,
        ca_file=args.ca_file,
        name=args.name,
        queues=queues,
        slots=slots,
        queue_slots=reserved,
        labels=labels,
        imports=args.imports,
        heartbeat_seconds=args.heartbeat,
        kill_grace_seconds=args.kill_grace,
        shutdown_grace_seconds=args.shutdown_grace,
        token=args.token or None,
        secrets_dir=args.secrets_dir or None,
        log_level=args.log_level or os.environ.get("JOBDECK_LOG_LEVEL") or "info",
        log_format=args.log_format or os.environ.get("JOBDECK_LOG_FORMAT") or "auto",
        state_dir=args.state_dir or None,
        tracing=os.environ.get("JOBDECK_TRACING") or "off",
    )


def run_async(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)
