"""`jobdeck web`: build the dashboard's frontend if needed and serve it with its backend on one
port (Reflex production mode), bound to 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from web_ui import frontend

DEFAULT_PORT = frontend.DEFAULT_PORT


def build_parser() -> argparse.ArgumentParser:
    """The parser of `python -m web_ui.launch` (the `jobdeck web` flags)."""
    p = argparse.ArgumentParser(prog="jobdeck web", description="Serve the JobDeck web dashboard.")
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of `jobdeck web` (core.cli adds them to its subcommand)."""
    p.add_argument("--server", default=os.environ.get("JOBDECK_SERVER", "http://127.0.0.1:8640"))
    p.add_argument("--host", dest="web_host", default=os.environ.get("JOBDECK_WEB_HOST", "127.0.0.1"),
                   help="address to bind (default 127.0.0.1; env JOBDECK_WEB_HOST)")  # fmt: skip
    p.add_argument("--port", dest="web_port", type=int, default=int(os.environ.get("JOBDECK_WEB_PORT") or DEFAULT_PORT),
                   help=f"port of the dashboard (default {DEFAULT_PORT}; env JOBDECK_WEB_PORT)")  # fmt: skip
    p.add_argument("--setup-only", dest="setup_only", action="store_true")
    p.add_argument("--ca-file", dest="ca_file", default=os.environ.get("JOBDECK_CA_FILE") or None,
                   help="trust this CA (PEM) for an https:// core (env JOBDECK_CA_FILE)")  # fmt: skip


def spawn(
    server: str, host: str, port: int, *, log: int | None = None, ca_file: str | None = None
) -> subprocess.Popen[bytes]:
    """Start the Reflex app (production mode, one port) against `server`; returns the process.
    `ca_file`: a CA (PEM) its backend trusts for an https:// core (else JOBDECK_CA_FILE, if set)."""
    frontend.ensure_bun()
    project = frontend.sync_project()
    env = frontend.reflex_env()
    env["JOBDECK_WEB_SERVER"] = server
    if ca_file:
        env["JOBDECK_CA_FILE"] = os.path.abspath(ca_file)  # the app runs in the project folder
    # The build bakes the backend's port into the bundle, so each port gets a build folder of its
    # own (two dashboards on two ports of one checkout must not overwrite each other's build).
    env["REFLEX_WEB_WORKDIR"] = os.environ.get("JOBDECK_WEB_WORKDIR") or str(frontend.web_dir(port))
    cmd = frontend.reflex_command("run", "--env", "prod", "--single-port", "--frontend-port", str(port),
                                  "--backend-port", str(port), "--backend-host", host, "--loglevel", "warning")  # fmt: skip
    return subprocess.Popen(cmd, cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT if log else None,
                            start_new_session=True)  # fmt: skip


def open_log(path: Path) -> BinaryIO:
    """The file Reflex's own output goes to (its progress bars and warnings are not ours to print)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "ab")  # the caller closes it once the process has its own copy


def log_tail(path: Path, lines: int = 25) -> str:
    """The last lines of a log, indented, for a message that says why the dashboard did not start."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


def wait_ready(proc: subprocess.Popen[bytes], url: str, timeout: float = 300.0) -> bool:
    """Wait until the dashboard answers (or the process ends); True when it answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:  # urllib, not httpx: httpx logs every poll at INFO into `jobdeck up`'s output
            with urllib.request.urlopen(url + "/ping", timeout=1.0) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def stop(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """Stop the dashboard's process group (Reflex starts worker processes)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(grace)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def main(args: argparse.Namespace | Sequence[str] | None = None) -> int:
    """Run `jobdeck web` until Ctrl-C; 1 if the app cannot start."""
    if not isinstance(args, argparse.Namespace):
        args = build_parser().parse_args(args)
    server = getattr(args, "server", None) or os.environ.get("JOBDECK_SERVER") or "http://127.0.0.1:8640"
    if getattr(args, "setup_only", False):
        return frontend.main()
    url = f"http://{args.web_host}:{args.web_port}"
    log_path = frontend.PROJECT / f"web-{args.web_port}.log"
    print(f"JobDeck web: building and starting the dashboard for {server} (log: {log_path}) ...", flush=True)
    log = open_log(log_path)
    try:
        proc = spawn(server, args.web_host, args.web_port, log=log.fileno(), ca_file=getattr(args, "ca_file", None))
    except frontend.SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        log.close()  # the child has its own copy

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)  # `kill` of jobdeck web stops the app's processes too
    try:
        if not wait_ready(proc, url):
            print(f"error: the dashboard did not start; the end of {log_path}:\n{log_tail(log_path)}", file=sys.stderr)
            stop(proc)
            return 1
        print(f"JobDeck web is up: {url}  (core {server})", flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        stop(proc)
        return 130
