"""TLS end to end, with a throw-away CA made here: `jobdeck server --tls-cert --tls-key` serves
https:// and wss:// (TLS 1.2 at least, 1.3 preferred); the CLI, an agent, the console and the
web dashboard's client trust it with --ca-file / JOBDECK_CA_FILE, and say how to fix it when not."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from console_tui.app import ConsoleApp, sign_in
from console_tui.screens.jobs import JobsView
from core.client import JobDeckClient
from core.errors import TLSUntrusted
from tests.certs import ThrowawayCA
from tests.conftest import ROOT, free_port, spawn_agent, stop_process, until

pytestmark = pytest.mark.timeout(90)
NOOP = {"task": {"kind": "python", "function": "agents.builtin:noop"}}


@dataclass
class TlsNode:
    url: str
    port: int
    ca: Path
    cert: Path
    key: Path
    log: Path
    proc: subprocess.Popen[str]


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsNode]:
    """`jobdeck server` (no local agent) with a certificate for 127.0.0.1 signed by a test CA."""
    folder = tmp_path_factory.mktemp("tls")
    ca = ThrowawayCA(folder / "ca")
    cert, key = ca.issue("127.0.0.1", "localhost")
    port = free_port()
    proc, url, log = start_tls_jobdeck("server", folder, port, cert, key)
    try:
        yield TlsNode(url, port, ca.cert, cert, key, log, proc)
    finally:
        stop_process(proc)


def start_tls_jobdeck(
    command: str, folder: Path, port: int, cert: Path, key: Path, *args: str
) -> tuple[subprocess.Popen[str], str, Path]:
    """`jobdeck COMMAND --tls-cert --tls-key ARGS` on `port`, once it says it is up: (process, its URL, its log)."""
    log = folder / f"{command}.log"
    cmd = [sys.executable, "-m", "core.cli", command, "--data-dir", str(folder / "data"), "--port", str(port),
           "--tls-cert", str(cert), "--tls-key", str(key), *args]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "JOBDECK_CA_FILE"} | {"PYTHONUNBUFFERED": "1"}
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env, text=True)
    deadline = time.monotonic() + 30
    while not (m := re.search(r"JobDeck is up: API (\S+)", log.read_text())):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc)
            raise AssertionError(f"jobdeck {command} did not start within 30 s:\n{log.read_text()}")
        time.sleep(0.05)
    return proc, m.group(1), log


def jobdeck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "JOBDECK_CA_FILE"}
    return subprocess.run([sys.executable, "-m", "core.cli", *args], cwd=ROOT, env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=30)  # fmt: skip


def handshake(port: int, ctx: ssl.SSLContext) -> str:
    """The TLS version a handshake with 127.0.0.1:port agreed on (ssl.SSLError if it failed)."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        return str(tls.version())


def old_client(maximum: ssl.TLSVersion) -> ssl.SSLContext:
    """A client that offers TLS up to `maximum` only (and lets OpenSSL speak the old versions)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLSVersion.TLSv1_1 is deprecated: that is the point
        ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        ctx.maximum_version = maximum
    return ctx


def permissive_server(cert: Path, key: Path) -> tuple[int, threading.Thread]:
    """A one-connection TLS server that accepts anything from TLS 1.0 up: the control for the test
    below (the old client can make a TLS 1.1 handshake; it is the node that refuses it)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            try:
                with ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (ssl.SSLError, OSError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return port, thread


def test_the_node_serves_tls_1_3_and_1_2_and_refuses_1_1(tls_node: TlsNode) -> None:
    assert tls_node.url == f"https://127.0.0.1:{tls_node.port}", tls_node.log.read_text()
    assert "export JOBDECK_SERVER=https://" in tls_node.log.read_text()
    trusting = ssl.create_default_context(cafile=str(tls_node.ca))
    assert handshake(tls_node.port, trusting) == "TLSv1.3", "a modern client gets TLS 1.3"
    assert handshake(tls_node.port, old_client(ssl.TLSVersion.TLSv1_2)) == "TLSv1.2"
    control, thread = permissive_server(tls_node.cert, tls_node.key)
    assert handshake(control, old_client(ssl.TLSVersion.TLSv1_1)) == "TLSv1.1", "the old client works elsewhere"
    thread.join(5)
    with pytest.raises(ssl.SSLError) as refused:
        handshake(tls_node.port, old_client(ssl.TLSVersion.TLSv1_1))
    assert refused.value.reason in ("UNEXPECTED_EOF_WHILE_READING", "TLSV1_ALERT_PROTOCOL_VERSION",
                                    "UNSUPPORTED_PROTOCOL"), refused.value  # fmt: skip


def test_the_cli_needs_the_ca_file_and_says_so_in_one_line(tls_node: TlsNode) -> None:
    bare = jobdeck("--server", tls_node.url, "jobs", "ls")
    assert bare.returncode == 1, bare
    assert "Traceback" not in bare.stderr and bare.stderr.count("\n") == 1, bare.stderr
    assert bare.stderr.startswith(f"error: cannot verify the TLS certificate of {tls_node.url}: "), bare.stderr
    assert "--ca-file" in bare.stderr and "JOBDECK_CA_FILE" in bare.stderr, bare.stderr
    flag = jobdeck("--server", tls_node.url, "--ca-file", str(tls_node.ca), "stats")
    assert flag.returncode == 0, flag.stderr
    env = jobdeck("stats", "--server", tls_node.url, env={"JOBDECK_CA_FILE": str(tls_node.ca)})
    assert env.returncode == 0, env.stderr
    missing = jobdeck("--server", tls_node.url, "--ca-file", str(tls_node.ca) + ".nope", "stats")
    assert missing.returncode == 1 and "cannot read it as PEM" in missing.stderr, missing.stderr
    plain = jobdeck("--server", tls_node.url.replace("https://", "http://"), "stats")
    assert plain.returncode == 1 and "its URL starts with https://" in plain.stderr, plain.stderr


async def test_an_agent_over_wss_runs_a_job_and_one_without_the_ca_says_why(tls_node: TlsNode, tmp_path: Path) -> None:
    lost = spawn_agent(tls_node.url, "no-ca", tmp_path)
    agent = spawn_agent(tls_node.url, "wss-agent", tmp_path, "--ca-file", str(tls_node.ca), "--slots", "2")
    try:
        async with JobDeckClient(tls_node.url, ca_file=str(tls_node.ca)) as client:
            await until(lambda: client.agents(), 20, "the agent to register over wss")
            job = await client.submit(NOOP)
            done = await client.wait_for(job["id"], timeout=20)  # the feed: wss too
            assert (done["state"], done["agent"]) == ("succeeded", "wss-agent"), done
        assert await asyncio.to_thread(lost.wait, 20) == 1
        out = (tmp_path / "agent-no-ca.log").read_text()
        assert "Traceback" not in out and "cannot verify the TLS certificate" in out and "--ca-file" in out, out
    finally:
        for p in (agent, lost):
            if p.poll() is None:
                p.terminate()
                p.wait(15)


async def test_the_client_refuses_a_node_its_ca_does_not_sign(tls_node: TlsNode, tmp_path: Path) -> None:
    other = ThrowawayCA(tmp_path / "other", name="someone else's CA")
    async with JobDeckClient(tls_node.url, ca_file=str(other.cert)) as client:
        with pytest.raises(TLSUntrusted, match="does not sign it"):
            await client.health()
        with pytest.raises(TLSUntrusted):
            await anext(client.events())


async def test_the_console_connects_over_https(tls_node: TlsNode) -> None:
    async with JobDeckClient(tls_node.url, ca_file=str(tls_node.ca)) as client:
        job = await client.submit({**NOOP, "name": "over-tls", "delay": 3600})
    token, identity = await sign_in(tls_node.url, str(tls_node.ca))
    app = ConsoleApp(tls_node.url, token, identity=identity, ca_file=str(tls_node.ca))
    async with app.run_test(size=(150, 42)):
        await until(lambda: app.ready.is_set(), 10, "the console to start")
        view = app.main_screen.query_one("#jobs", JobsView)  # type: ignore[union-attr]
        await until(lambda: view.loaded and job["id"] in view.rows, 10, "the job in the console's table")
        await until(lambda: app.connection.state == "live", 10, "the console's feed (wss) to be live")


def test_jobdeck_console_without_the_ca_file_says_how_to_fix_it(tls_node: TlsNode) -> None:
    out = jobdeck("console", "--server", tls_node.url)
    assert out.returncode == 1, out
    text = out.stdout + out.stderr
    assert "Traceback" not in text and "cannot verify the TLS certificate" in text and "--ca-file" in text, text


async def test_the_web_dashboards_client_trusts_jobdeck_ca_file(
    tls_node: TlsNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    from web_ui import settings

    monkeypatch.setenv("JOBDECK_WEB_SERVER", tls_node.url)
    monkeypatch.setenv("JOBDECK_CA_FILE", str(tls_node.ca))
    monkeypatch.setattr(settings, "_clients", {})
    client = settings.client_for(None)
    try:
        assert (await client.health())["status"] == "ok"
        history = [e["type"] async for e in client.events(since=0, until_caught_up=True)]  # the feed: wss
        assert "job.created" in history, history
    finally:
        await client.close()


async def test_jobdeck_up_serves_https_and_its_local_agent_runs_a_job(tls_node: TlsNode, tmp_path: Path) -> None:
    """`jobdeck up` takes the same --tls-cert / --tls-key: its API is https:// and its jobs run."""
    port = free_port()
    proc, url, log = await asyncio.to_thread(
        start_tls_jobdeck, "up", tmp_path, port, tls_node.cert, tls_node.key, "--no-web", "--slots", "2"
    )
    try:
        assert url == f"https://127.0.0.1:{port}", log.read_text()
        async with JobDeckClient(url, ca_file=str(tls_node.ca)) as client:
            job = await client.submit(NOOP)
            done = await client.wait_for(job["id"], timeout=30)
            assert done["state"] == "succeeded", done
        plain = jobdeck("--server", url, "stats")
        assert plain.returncode == 1 and "cannot verify the TLS certificate" in plain.stderr, plain.stderr
    finally:
        stop_process(proc)
