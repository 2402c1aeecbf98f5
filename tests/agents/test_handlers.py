"""The shell, http and python handlers, run directly with a RunContext (no server, no agent)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import agents.handlers.http as http_handler
from agents.handlers import HANDLERS, RunContext
from agents.handlers.http import run_http
from agents.handlers.python import run_python
from agents.handlers.shell import run_shell
from agents.secrets import SecretStore
from tests.conftest import until

TASKS = "tests.agents.tasks_for_tests"


def ctx(**kw: Any) -> RunContext:
    return RunContext(job_id=kw.pop("job_id", 42), attempt=kw.pop("attempt", 2), **kw)


def alive(pid: int) -> bool:
    """True if `pid` runs (a zombie nobody reaped counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_every_task_kind_has_a_handler() -> None:
    assert set(HANDLERS) == {"shell", "http", "python"}


# ---------------------------------------------------------------- shell


async def test_a_command_string_runs_through_the_shell() -> None:
    c = ctx()
    out = await run_shell({"kind": "shell", "command": "echo hello; echo to-stderr >&2; echo $((6 * 7))"}, c)
    assert (out.ok, out.exit_code, out.error) == (True, 0, None)
    assert c.output == "hello\nto-stderr\n42\n"


async def test_argv_runs_without_a_shell() -> None:
    c = ctx()
    out = await run_shell({"kind": "shell", "argv": ["printf", "%s|", "a b", "$HOME", "*"]}, c)
    assert out.ok, out
    assert c.output == "a b|$HOME|*|", "argv items must reach the program verbatim"


async def test_env_and_cwd_are_applied_and_the_job_is_named_in_the_env(tmp_path: Path) -> None:
    c = ctx(job_id=42, attempt=2)
    task = {"kind": "shell", "command": 'echo "$GREETING $JOBDECK_JOB_ID $JOBDECK_ATTEMPT"; pwd',
            "env": {"GREETING": "bonjour"}, "cwd": str(tmp_path)}  # fmt: skip
    out = await run_shell(task, c)
    assert out.ok, out
    assert c.output.splitlines() == ["bonjour 42 2", str(tmp_path)]


async def test_a_non_zero_exit_is_a_failure_with_the_code_and_last_line() -> None:
    c = ctx()
    out = await run_shell({"kind": "shell", "command": "echo starting; echo 'disk full' >&2; exit 3"}, c)
    assert (out.ok, out.exit_code) == (False, 3)
    assert out.error == "exit code 3: disk full"
    assert "starting" in c.output


async def test_a_command_killed_by_a_signal_says_which() -> None:
    out = await run_shell({"kind": "shell", "command": "kill -KILL $$"}, ctx())
    assert not out.ok
    assert out.error is not None and out.error.startswith("killed by signal SIGKILL"), out.error


async def test_only_the_last_64_kib_of_output_is_kept_and_the_drop_is_reported() -> None:
    c = ctx()
    out = await run_shell({"kind": "shell", "command": r"head -c 100000 /dev/zero | tr '\0' a; echo; echo END"}, c)
    assert out.ok, out
    total = 100_000 + 1 + 4
    dropped = total - 64 * 1024
    header, _, kept = c.output.partition("\n")
    assert f"{dropped} earlier bytes dropped" in header, f"expected {dropped} dropped bytes reported, got {header!r}"
    assert len(kept) == 64 * 1024, f"expected the last 65536 bytes kept, got {len(kept)}"
    assert c.output.endswith("a\nEND\n")


async def test_output_under_the_limit_is_kept_whole() -> None:
    c = ctx()
    await run_shell({"kind": "shell", "command": r"head -c 1000 /dev/zero | tr '\0' b"}, c)
    assert c.output == "b" * 1000


async def test_a_missing_program_is_a_failure_saying_so() -> None:
    out = await run_shell({"kind": "shell", "argv": ["jobdeck-no-such-program", "--flag"]}, ctx())
    assert not out.ok
    assert out.error == "command not found: jobdeck-no-such-program"


async def test_a_missing_command_in_a_shell_string_fails_with_127() -> None:
    out = await run_shell({"kind": "shell", "command": "jobdeck-no-such-program --flag"}, ctx())
    assert (out.ok, out.exit_code) == (False, 127)
    assert "not found" in (out.error or ""), out.error


async def test_a_missing_working_directory_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    out = await run_shell({"kind": "shell", "argv": ["true"], "cwd": str(missing)}, ctx())
    assert not out.ok
    assert out.error == f"working directory not found: {missing}"


async def _start_and_cancel(command: str, grace: float) -> tuple[float, RunContext]:
    """Start `command`, wait until it prints `ready`, cancel it; return how long it took to die."""
    c = ctx(kill_grace=grace)
    task = asyncio.create_task(run_shell({"kind": "shell", "command": command}, c))
    await until(lambda: "ready" in c.output, what="the command to print 'ready'")
    t0 = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(grace + 10):  # a command that never dies fails the test, not the run
            await task
    return time.monotonic() - t0, c


async def test_cancel_sends_term_then_kill_after_the_grace_period(tmp_path: Path) -> None:
    marker = tmp_path / "signals"
    grace = 0.8
    command = (f"trap 'echo TERM >> {marker}' TERM; echo pid=$$; echo ready; "
               "while :; do sleep 0.05; done")  # fmt: skip
    took, c = await _start_and_cancel(command, grace)
    pid = int(c.output.split("pid=")[1].split()[0])
    assert marker.read_text().startswith("TERM"), "SIGTERM must be sent first"
    assert grace * 0.9 <= took <= grace + 2.0, (
        f"expected death by SIGKILL about {grace} s after cancel, got {took:.2f} s"
    )
    assert not alive(pid), f"process {pid} still runs"


async def test_a_command_that_exits_on_term_dies_at_once() -> None:
    grace = 5.0
    took, c = await _start_and_cancel("echo pid=$$; echo ready; sleep 30", grace)
    pid = int(c.output.split("pid=")[1].split()[0])
    assert took < 1.5, f"expected the command to die on SIGTERM at once (grace {grace} s), got {took:.2f} s"
    assert not alive(pid)


async def test_cancel_stops_the_whole_process_group() -> None:
    took, c = await _start_and_cancel("sleep 30 & echo child=$!; echo ready; wait", 5.0)
    child = int(c.output.split("child=")[1].split()[0])
    deadline = time.monotonic() + 3
    while alive(child) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert not alive(child), f"the command's background child {child} survived the cancel"
    assert took < 1.5, took


# ---------------------------------------------------------------- http


class _Handler(BaseHTTPRequestHandler):
    def _reply(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/ok":
            self._reply(200, b"all good")
        elif self.path == "/fail":
            self._reply(500, b"boom: database unavailable")
        elif self.path == "/big":
            self._reply(200, b"x" * 5000)
        else:
            self._reply(404, b"no such page")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        echo = {"path": self.path, "content_type": self.headers.get("content-type"),
                "token": self.headers.get("x-token"), "body": body.decode()}  # fmt: skip
        self._reply(201, json.dumps(echo).encode(), "application/json")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def web() -> Iterator[str]:
    """A real HTTP server on a loopback port, in a thread."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
async def _fresh_http_client(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    # The handler keeps one client per process; each test has its own event loop, so each gets its own.
    monkeypatch.setattr(http_handler, "_client", None)
    yield
    if http_handler._client is not None:
        await http_handler._client.aclose()


async def test_a_2xx_response_is_a_success_with_status_and_body(web: str) -> None:
    c = ctx()
    out = await run_http({"kind": "http", "url": f"{web}/ok"}, c)
    assert out.ok, out
    assert out.result == {"status": 200, "body": "all good"}
    assert c.output == "all good"


async def test_a_json_body_and_headers_are_sent(web: str) -> None:
    task = {"kind": "http", "method": "POST", "url": f"{web}/hook", "headers": {"x-token": "s3cret"}, "body": {"n": 1}}
    out = await run_http(task, ctx())
    assert out.ok, out
    assert out.result["status"] == 201
    echo = json.loads(out.result["body"])
    assert echo == {"path": "/hook", "content_type": "application/json", "token": "s3cret", "body": '{"n":1}'}


async def test_a_header_can_name_a_secret_that_the_agent_fills_in_and_redacts(web: str, tmp_path: Path) -> None:
    (tmp_path / "hook-token").write_text("tok-Zq9-secret\n")
    task = {"kind": "http", "method": "POST", "url": f"{web}/hook", "headers": {"x-token": {"secret": "hook-token"}}}
    c = ctx(secrets=SecretStore(tmp_path))
    out = await run_http(task, c)
    assert out.ok, out
    # The receiver got the value; the job's result and output (which the server keeps) show only the name.
    assert '"token": "[secret hook-token]"' in out.result["body"], out.result
    assert "tok-Zq9-secret" not in c.output and "[secret hook-token]" in c.output, c.output
    missing = await run_http({**task, "headers": {"x-token": {"secret": "nope"}}}, ctx(secrets=SecretStore(tmp_path)))
    assert (missing.ok, missing.retryable) == (False, False) and "secret 'nope' not found" in (missing.error or "")


async def test_a_long_body_is_kept_as_an_excerpt(web: str) -> None:
    out = await run_http({"kind": "http", "url": f"{web}/big"}, ctx())
    assert out.ok
    assert out.result["body"] == "x" * 2048


async def test_a_500_is_a_failure_with_the_status(web: str) -> None:
    out = await run_http({"kind": "http", "url": f"{web}/fail"}, ctx())
    assert not out.ok
    assert out.error == "HTTP 500 Internal Server Error"
    assert out.result == {"status": 500, "body": "boom: database unavailable"}


async def test_a_404_is_a_failure(web: str) -> None:
    out = await run_http({"kind": "http", "url": f"{web}/missing"}, ctx())
    assert (out.ok, out.error) == (False, "HTTP 404 Not Found")


async def test_connection_refused_is_a_failure_naming_the_url() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connections are refused
        url = f"http://127.0.0.1:{port}/ok"
        out = await run_http({"kind": "http", "url": url}, ctx())
    assert not out.ok
    assert out.error is not None and out.error.startswith("ConnectError") and url in out.error, out.error


# ---------------------------------------------------------------- python


async def test_a_sync_function_returns_its_value() -> None:
    out = await run_python({"kind": "python", "function": f"{TASKS}:add", "args": [2, 40]}, ctx())
    assert (out.ok, out.result, out.error) == (True, 42, None)


async def test_an_async_function_with_kwargs_returns_its_value() -> None:
    task = {"kind": "python", "function": f"{TASKS}:greet", "args": ["ada"], "kwargs": {"punctuation": "?"}}
    out = await run_python(task, ctx())
    assert (out.ok, out.result) == (True, {"greeting": "hello ada?"})


async def test_a_dotted_path_without_a_colon_and_a_nested_attribute_resolve() -> None:
    assert (await run_python({"kind": "python", "function": f"{TASKS}.add", "args": [1, 2]}, ctx())).result == 3
    out = await run_python({"kind": "python", "function": f"{TASKS}:Namespace.nested", "args": [21]}, ctx())
    assert (out.ok, out.result) == (True, 42)


async def test_a_sync_function_does_not_block_the_event_loop(tmp_path: Path) -> None:
    started, release = tmp_path / "started", tmp_path / "release"
    task = {"kind": "python", "function": f"{TASKS}:wait_for_release", "args": [str(started), str(release), 10]}
    run = asyncio.create_task(run_python(task, ctx()))
    await until(started.exists, what="the task to start")
    release.touch()  # only possible if the loop is free while the function runs
    out = await run
    assert (out.ok, out.result) == (True, True), "the function was not released: it blocked the event loop"


@pytest.mark.parametrize(("function", "expected"), [("fail", "ValueError: bad input 42"),
                                                     ("fail_async", "RuntimeError: bad input 42")])  # fmt: skip
async def test_an_exception_becomes_a_failure_with_its_message(function: str, expected: str) -> None:
    out = await run_python({"kind": "python", "function": f"{TASKS}:{function}", "args": ["bad input 42"]}, ctx())
    assert (out.ok, out.error) == (False, expected)


@pytest.mark.parametrize(
    ("function", "expected"),
    [
        (f"{TASKS}:nope", f"module {TASKS!r} has no 'nope'"),
        ("jobdeck_no_such_module.sub:run", "cannot import 'jobdeck_no_such_module.sub'"),
        (f"{TASKS}:NOT_CALLABLE", "is not callable"),
        ("justaname", "is not a dotted path"),
    ],
)
async def test_an_unknown_dotted_path_fails_with_a_clear_message(function: str, expected: str) -> None:
    out = await run_python({"kind": "python", "function": function}, ctx())
    assert not out.ok
    assert expected in (out.error or ""), f"expected {expected!r} in {out.error!r}"


async def test_an_http_run_says_whether_the_host_answered_well_for_its_circuit_breaker(web: str) -> None:
    failed = await run_http({"kind": "http", "url": f"{web}/fail"}, ctx())
    assert (failed.ok, failed.breaker_ok) == (False, False), "a 500 counts against the host"
    ok = await run_http({"kind": "http", "url": f"{web}/ok"}, ctx())
    assert (ok.ok, ok.breaker_ok) == (True, True)
    refused = await run_http({"kind": "http", "url": "http://127.0.0.1:9/"}, ctx())
    assert (refused.ok, refused.breaker_ok) == (False, False), "no connection counts against the host"
