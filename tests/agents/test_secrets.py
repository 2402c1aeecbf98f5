"""Secrets named in a task's env: resolved on the agent (a secrets folder, then its environment),
given to the task, and redacted from everything the run shows (output, live stream, errors, results)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agents.handlers import RunContext
from agents.handlers.python import run_python
from agents.handlers.shell import run_shell
from agents.pool import WorkerPool
from agents.secrets import SecretStore, env_name
from core.client import JobDeckClient
from tests.agents.conftest import RemoteAgent
from tests.conftest import RunningNode, node_settings, start_node, stop_node, until

TASKS = "tests.agents.tasks_for_tests"
VALUE = "hunter2-Zq9!x"
REF = {"DB_PASSWORD": {"secret": "db-password"}}


@pytest.fixture
def secrets_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "secrets"
    folder.mkdir()
    (folder / "db-password").write_text(VALUE + "\n")  # as `echo value > file` writes it
    return folder


@pytest.fixture
async def pool() -> AsyncIterator[WorkerPool]:
    p = WorkerPool(2)
    try:
        yield p
    finally:
        await p.close()


def ctx(store: SecretStore, pool: WorkerPool | None = None, **kw: Any) -> RunContext:
    return RunContext(1, 1, secrets=store, workers=pool, **kw)


async def test_a_shell_task_gets_the_secret_and_what_it_prints_is_redacted(secrets_dir: Path) -> None:
    streamed: list[bytes] = []
    c = ctx(SecretStore(secrets_dir), stream=streamed.append)
    command = (
        'test "$DB_PASSWORD" = "$EXPECTED" && echo match; echo "pw=$DB_PASSWORD."; echo "$DB_PASSWORD" >&2; exit 3'
    )
    out = await run_shell({"kind": "shell", "command": command, "env": {**REF, "EXPECTED": VALUE}}, c)
    assert (out.ok, out.exit_code) == (False, 3)
    assert c.output == "match\npw=[secret db-password].\n[secret db-password]\n"
    assert VALUE not in b"".join(streamed).decode(), "the live stream must be redacted too"
    assert out.error == "exit code 3: [secret db-password]", out.error


async def test_the_agents_environment_holds_secrets_and_the_folder_comes_first(secrets_dir: Path) -> None:
    environ = {env_name("db-password"): "from-env", env_name("api.token"): "tok-from-env"}
    assert env_name("api.token") == "JOBDECK_SECRET_API_TOKEN"
    store = SecretStore(secrets_dir, environ)
    assert (store.get("db-password"), store.get("api.token")) == (VALUE, "tok-from-env")
    assert SecretStore(None, environ).get("db-password") == "from-env"


async def test_an_unknown_secret_fails_at_once_saying_where_the_agent_looked(secrets_dir: Path) -> None:
    c = ctx(SecretStore(secrets_dir, {}))
    out = await run_shell({"kind": "shell", "command": "echo never", "env": {"X": {"secret": "nope"}}}, c)
    assert (out.ok, out.retryable) == (False, False)
    expected = f"secret 'nope' not found on this agent: no file {secrets_dir / 'nope'} and no JOBDECK_SECRET_NOPE"
    assert out.error is not None and out.error.startswith(expected), out.error
    assert c.output == "", "the command must not run"
    out = await run_python({"kind": "python", "function": f"{TASKS}:add", "args": [1, 2],
                            "env": {"X": {"secret": "nope"}}}, ctx(SecretStore(None, {})))  # fmt: skip
    assert (out.ok, out.retryable) == (False, False) and "--secrets-dir" in (out.error or ""), out.error


@pytest.mark.parametrize("name", ["../secrets/db-password", "/etc/passwd", ".hidden", ""])
async def test_a_secret_name_cannot_reach_outside_the_folder(secrets_dir: Path, name: str) -> None:
    out = await run_shell(
        {"kind": "shell", "command": "true", "env": {"X": {"secret": name}}}, ctx(SecretStore(secrets_dir))
    )
    assert (out.ok, out.retryable) == (False, False)
    assert "is not a secret name" in (out.error or ""), out.error


async def test_tasks_never_see_the_secret_variables_of_the_agent(
    monkeypatch: pytest.MonkeyPatch, pool: WorkerPool
) -> None:
    monkeypatch.setenv("JOBDECK_SECRET_HIDDEN", "agent-only")
    monkeypatch.setenv("JOBDECK_TOKEN", "jd_the-agents-own-token")  # the agent's credentials stay its own
    monkeypatch.setenv("JOBDECK_DATABASE_URL", "postgresql://jobdeck:pw@db/jobdeck")
    c = ctx(SecretStore())
    assert (await run_shell({"kind": "shell", "command": "env"}, c)).ok
    assert "JOBDECK_JOB_ID=1" in c.output
    for name in ("JOBDECK_SECRET_HIDDEN", "JOBDECK_TOKEN", "JOBDECK_DATABASE_URL"):
        assert name not in c.output, f"{name} reached the task's environment:\n{c.output}"
    # The worker processes of this pool start after the variable was set: they must not have it either.
    for name in ("JOBDECK_SECRET_HIDDEN", "JOBDECK_TOKEN"):
        out = await run_python({"kind": "python", "function": f"{TASKS}:identity", "args": [name]},
                               ctx(SecretStore(), pool))  # fmt: skip
        assert out.ok and out.result["value"] is None, out


async def test_a_sync_python_task_gets_its_secret_in_os_environ_and_leaks_nothing(
    secrets_dir: Path, pool: WorkerPool
) -> None:
    c = ctx(SecretStore(secrets_dir), pool)
    ok = await run_python({"kind": "python", "function": f"{TASKS}:identity", "args": ["DB_PASSWORD"], "env": REF}, c)
    assert ok.ok and ok.result["value"] == ok.result["job_env"] == "[secret db-password]", (
        "the value reached the task, and its echo in the result was redacted"
    )
    c = ctx(SecretStore(secrets_dir), pool)
    out = await run_python({"kind": "python", "function": f"{TASKS}:leak", "args": ["DB_PASSWORD"], "env": REF}, c)
    assert (out.ok, out.error) == (False, "RuntimeError: could not log in with [secret db-password]")
    assert c.output == "the password is [secret db-password]!\n"


async def test_an_async_python_task_gets_its_secret_from_current_job(secrets_dir: Path) -> None:
    task = {"kind": "python", "function": f"{TASKS}:leak_async", "args": ["DB_PASSWORD"], "env": REF}
    out = await run_python(task, ctx(SecretStore(secrets_dir)))
    assert (out.ok, out.result) == (True, {"secret": "[secret db-password]"})
    assert "DB_PASSWORD" not in os.environ, "an async task shares the agent's process: its env is not set there"


def test_a_secret_split_across_writes_is_still_redacted() -> None:
    streamed: list[bytes] = []
    c = RunContext(1, 1, stream=streamed.append)
    c.hide("pw", "abcdefgh")
    c.hide("key", "-----BEGIN KEY-----\nAAAABBBBCCCC\n-----END KEY-----")
    for chunk in (b"x abc", b"def", b"gh y AAAAB", b"BBBCCCC", b" ab"):
        c.write(chunk)
    assert c.output == "x [secret pw] y [secret key] ab"
    assert b"".join(streamed) == c.output.encode(), "the stream gets the held-back tail at the end"
    assert c.redact("token abcdefgh") == "token [secret pw]"


# ---------------------------------------------------------------- through a real server and agent


async def test_a_secret_reaches_the_task_and_nothing_the_server_keeps_or_shows(remote_agent: RemoteAgent) -> None:
    c = remote_agent.client
    (remote_agent.log.parent / "secrets" / "db-password").write_text(VALUE + "\n")
    digest = hashlib.sha256(VALUE.encode()).hexdigest()  # the job must not carry the value to check it
    since = (await c.health())["last_seq"]
    feed: list[Any] = []

    async def follow() -> None:
        async for e in c.events(since=since, types=["job.output"], control=True):  # live output: asked for by name
            feed.append(e)

    follower = asyncio.create_task(follow())
    await until(lambda: any(e["type"] == "stream.caught_up" for e in feed), 10, "the feed to be live")
    check = f'printf %s "$DB_PASSWORD" | sha256sum | grep -q {digest} && echo same'
    shell = {
        "kind": "shell",
        "command": f'echo "pw=$DB_PASSWORD"; {check}; echo "$DB_PASSWORD" >&2; exit 1',
        "env": REF,
    }
    leak = {"kind": "python", "function": f"{TASKS}:leak", "args": ["DB_PASSWORD"], "env": REF}
    leak_async = {"kind": "python", "function": f"{TASKS}:leak_async", "args": ["DB_PASSWORD"], "env": REF}
    jobs = [await c.submit({"task": t, "max_attempts": 1}) for t in (shell, leak, leak_async)]
    unknown = await c.submit({"task": {"kind": "shell", "command": "true", "env": {"T": {"secret": "api-token"}}}})
    done = [await c.wait_for(j["id"], timeout=30) for j in jobs]
    assert [d["state"] for d in done] == ["dead", "dead", "succeeded"], done
    assert done[0]["task"]["env"] == REF, "the job keeps the reference, not the value"
    outputs = [(await c.output(j["id"]))["output"] for j in jobs]
    assert outputs[0] == "pw=[secret db-password]\nsame\n[secret db-password]\n", outputs[0]
    assert outputs[1] == "the password is [secret db-password]!\n", outputs[1]
    assert done[2]["result"] == {"secret": "[secret db-password]"}
    attempts = [a for j in jobs for a in await c.attempts(j["id"])]
    assert attempts[1]["error"] == "RuntimeError: could not log in with [secret db-password]", attempts[1]
    await until(lambda: sum(e["type"] == "job.output" for e in feed) >= 2, 10, "the live output events")
    follower.cancel()
    live = "".join(e["data"]["text"] for e in feed if e["type"] == "job.output")
    assert "pw=[secret db-password]" in live, live
    shown = [*done, *outputs, *attempts, *[await c.job_events(j["id"]) for j in jobs], feed, await c.audit()]
    assert VALUE not in json.dumps(shown), "the secret's value was shown by the API or the live feed"
    # A secret the agent does not have: dead after one attempt (of three), naming it and where it looked.
    assert (await c.wait_for(unknown["id"], timeout=20))["state"] == "dead"
    tried = await c.attempts(unknown["id"])
    assert len(tried) == 1 and "secret 'api-token' not found on this agent" in tried[0]["error"], tried
    assert "JOBDECK_SECRET_API_TOKEN" in tried[0]["error"] and "secrets/api-token" in tried[0]["error"], tried
    data = remote_agent.log.parent / "data"
    stored = b"".join(p.read_bytes() for p in data.rglob("*") if p.is_file())
    assert stored and VALUE.encode() not in stored, "the secret's value is in the server's files"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"P": {"secret": 5}}, '\'P\' must be a string or {"secret": "name"}'),
        ({"P": {"name": "x"}}, '\'P\' must be a string or {"secret": "name"}'),
        ({"P": 5}, '\'P\' must be a string or {"secret": "name"}'),
        ({"P": {"secret": "../x"}}, "'P': '../x' is not a secret name"),
    ],
)
async def test_the_api_refuses_an_env_value_that_is_neither_a_string_nor_a_reference(
    running: RunningNode, env: dict[str, Any], message: str
) -> None:
    for task in ({"kind": "shell", "command": "true", "env": env}, {"kind": "python", "function": "m:f", "env": env},
                 {"kind": "http", "url": "http://127.0.0.1:9/", "headers": env}):  # fmt: skip
        r = await running.client._http.post("/v1/jobs", json={"task": task})
        assert r.status_code == 422, r.text
        body = r.json()
        field = "task.headers" if task["kind"] == "http" else "task.env"
        assert body["field"] == field and message in body["message"], body


async def test_the_local_agent_of_jobdeck_up_reads_the_secrets_dir_setting(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "db-password").write_text(VALUE)
    node, url, serving = await start_node(node_settings(tmp_path, secrets_dir=str(tmp_path / "s")))
    try:
        async with JobDeckClient(url) as c:
            job = await c.submit({"task": {"kind": "shell", "command": 'echo "[$DB_PASSWORD]"', "env": REF}})
            assert (await c.wait_for(job["id"]))["state"] == "succeeded"
            assert (await c.output(job["id"]))["output"] == "[[secret db-password]]\n"
    finally:
        await stop_node(node, serving)
