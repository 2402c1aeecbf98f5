"""Remote agents as real processes over real WebSockets: failures, reconnects, routing, draining."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import websockets

from core.client import JobDeckClient
from core.errors import Unavailable
from tests.conftest import ROOT, ServerProcess, recorded_runs, recorder_task, spawn_agent, spawn_jobdeck, until

LEASE_ENV = {"JOBDECK_LEASE_SECONDS": "2", "JOBDECK_HEARTBEAT_SECONDS": "0.5", "JOBDECK_REAP_INTERVAL_SECONDS": "0.2"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """`jobdeck server` with no local agent and 2-second leases."""
    sp = spawn_jobdeck(tmp_path / "data", "server", env=LEASE_ENV)
    try:
        yield sp
    finally:
        sp.stop()


@pytest.fixture
async def client(server: ServerProcess) -> AsyncIterator[JobDeckClient]:
    async with JobDeckClient(server.url) as c:
        yield c


class Agents:
    """Starts `jobdeck agent` processes and stops them all at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, url: str, name: str, *args: str) -> subprocess.Popen[str]:
        proc = spawn_agent(url, name, self.tmp_path, "--heartbeat", "0.5", *args)
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        return (self.tmp_path / f"agent-{name}.log").read_text()

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[Agents]:
    a = Agents(tmp_path)
    try:
        yield a
    finally:
        a.stop_all()


async def wait_agents(c: JobDeckClient, *names: str) -> None:
    async def present() -> bool:
        return set(names) <= {a["name"] for a in await c.agents()}

    await until(present, 20, f"agents {names} to register")


async def wait_state(c: JobDeckClient, job_id: int, state: str, timeout: float = 15) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        job = await c.get_job(job_id)
        return job if job["state"] == state else None

    return await until(check, timeout, f"job {job_id} to be {state}")  # type: ignore[no-any-return]


class CuttableProxy:
    """A TCP proxy whose connections the test can cut, like a network blip."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        for w in self.writers:
            w.transport.abort()
        self.writers.clear()

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()


async def test_a_remote_agent_runs_jobs_and_streams_output(
    server: ServerProcess, client: JobDeckClient, agents: Agents
) -> None:
    agents.start(server.url, "a1", "--slots", "4")
    await wait_agents(client, "a1")
    since = (await client.health())["last_seq"]
    job = await client.submit(
        {"task": {"kind": "shell", "command": "for i in 1 2 3; do echo line $i; sleep 0.3; done"}}
    )
    streamed = ""
    async with asyncio.timeout(15):
        async for e in client.events(since=since, job_ids=[job["id"]], types=["job.output", "job.succeeded"]):
            if e["type"] == "job.output":
                assert e["seq"] is None, "live output is not stored in the event log"
                streamed += e["data"]["text"]
            else:
                break
    assert streamed == "line 1\nline 2\nline 3\n", f"streamed {streamed!r}"
    out = await client.output(job["id"])
    assert out["output"] == streamed and out["state"] == "succeeded" and out["limit_bytes"] == 64 * 1024


async def test_sigkill_agent_mid_job_is_retried_elsewhere_with_the_lost_attempt_recorded(
    server: ServerProcess, client: JobDeckClient, agents: Agents, tmp_path: Path
) -> None:
    doomed = agents.start(server.url, "doomed", "--slots", "1")
    await wait_agents(client, "doomed")
    job = await client.submit({"task": recorder_task(tmp_path, 1.0), "backoff": {"base": 0.1, "cap": 0.2}})
    await wait_state(client, job["id"], "running")
    doomed.kill()
    agents.start(server.url, "rescuer", "--slots", "1")
    done = await client.wait_for(job["id"], timeout=30)
    assert done["state"] == "succeeded", done
    attempts = [(a["agent"], a["outcome"]) for a in await client.attempts(job["id"])]
    assert attempts == [("doomed", "lost"), ("rescuer", "succeeded")], attempts


async def test_a_cut_connection_reconnects_and_no_job_runs_twice(
    server: ServerProcess, client: JobDeckClient, agents: Agents, tmp_path: Path
) -> None:
    proxy = CuttableProxy(int(server.url.rsplit(":", 1)[1]))
    via = await proxy.start()
    try:
        agents.start(via, "blinky", "--slots", "10")
        await wait_agents(client, "blinky")
        ids = (await client.submit_batch([{"task": recorder_task(tmp_path, 1.5)} for _ in range(10)]))["ids"]

        async def all_running() -> bool:
            return (await client.stats())["by_state"].get("running", 0) == 10

        await until(all_running, 15, "10 running jobs")
        proxy.cut()
        for job_id in ids:
            done = await client.wait_for(job_id, timeout=30)
            assert done["state"] == "succeeded" and done["attempt"] == 1, done
    finally:
        await proxy.close()
    starts = [(j, a) for w, j, a, _ in recorded_runs(tmp_path) if w == "start"]
    assert sorted(starts) == sorted((i, 1) for i in ids), f"each job must run exactly once: {starts}"
    assert "lost the connection" in agents.log("blinky")


async def test_cancel_reaches_a_remote_running_job_within_a_second(
    server: ServerProcess, client: JobDeckClient, agents: Agents
) -> None:
    agents.start(server.url, "a1", "--slots", "2")
    await wait_agents(client, "a1")
    job = await client.submit({"task": {"kind": "shell", "command": "sleep 30"}})
    await wait_state(client, job["id"], "running")
    t0 = time.monotonic()
    await client.job_action(job["id"], "cancel")
    done = await client.wait_for(job["id"], timeout=10)
    elapsed = time.monotonic() - t0
    assert done["state"] == "cancelled" and elapsed < 1.0, f"{done['state']} after {elapsed:.2f} s"


class _Left(dict):  # type: ignore[type-arg]
    """Jobs by state, falsy: `until` prints the last value when it gives up, so a failure says where they are."""

    def __bool__(self) -> bool:
        return False


@pytest.fixture
async def roomy(tmp_path: Path) -> AsyncIterator[tuple[ServerProcess, JobDeckClient]]:
    """A server with the default 30-second leases: this module's 2-second ones, at a load of 8,
    let a 5,000-slot agent's heartbeat come late, and runs lost three times ended dead (CI)."""
    sp = spawn_jobdeck(tmp_path / "roomy", "server")
    try:
        async with JobDeckClient(sp.url) as c:
            yield sp, c
    finally:
        sp.stop()


async def test_two_agents_run_ten_thousand_concurrent_sleeping_jobs(
    roomy: tuple[ServerProcess, JobDeckClient], agents: Agents
) -> None:
    server, client = roomy
    for name in ("big1", "big2"):
        agents.start(server.url, name, "--slots", "5000")
    await wait_agents(client, "big1", "big2")
    # Each job sleeps 15 s: 9,000 can only be seen running at once if the claims start them
    # before the first ones end. Idle, the two agents hold 9,000 within ~1 s; pinned to one core
    # beside two busy loops, 5.8 s; so at a load of 12 a 6 s sleep let the first runs end first
    # (the peak was never reached, however long the wait). The sleep, not the deadline, bounds it.
    sleeper = {"task": {"kind": "python", "function": "agents.builtin:sleep", "args": [15]}}
    await client.submit_batch([sleeper] * 10_000)

    async def peak() -> int:
        return int((await client.stats())["by_state"].get("running", 0))

    seen = await until(lambda: _at_least(peak, 9_000), 30, "9,000 jobs running at once")
    assert seen >= 9_000

    async def finished() -> bool | _Left:
        by_state = (await client.stats())["by_state"]
        return by_state.get("succeeded", 0) == 10_000 or _Left({k: v for k, v in by_state.items() if v})

    # 15 s of sleep, then 10,000 results; the bound is for a machine at a load of 10+ (a failure
    # names the states the jobs were left in)
    await until(finished, 160, "all 10,000 to succeed")
    per_agent = {a["name"]: a["slots_used"] for a in await client.agents()}
    assert per_agent == {"big1": 0, "big2": 0}


class _Short(int):
    """A count below the wanted one, falsy: `until`'s failure then says how many there were."""

    def __bool__(self) -> bool:
        return False


async def _at_least(probe: Any, n: int) -> int:
    value = await probe()
    return value if value >= n else _Short(value)


async def test_label_routing_and_the_reason_a_job_waits(
    server: ServerProcess, client: JobDeckClient, agents: Agents
) -> None:
    agents.start(server.url, "gpu", "--label", "gpu=true", "--slots", "8")
    agents.start(server.url, "plain", "--slots", "8")
    await wait_agents(client, "gpu", "plain")
    task = {"kind": "python", "function": "agents.builtin:sleep", "args": [0.05]}
    ids = (await client.submit_batch([{"task": task, "labels": {"gpu": "true"}} for _ in range(20)]))["ids"]
    for job_id in ids:
        done = await client.wait_for(job_id, timeout=20)
        assert done["agent"] == "gpu", f"job {job_id} needs gpu=true but ran on {done['agent']}"
    stuck = await client.submit({"task": task, "labels": {"region": "eu"}})
    assert stuck["state"] == "queued"
    assert stuck["waiting_for"] == "no connected agent has the labels region=eu", stuck
    agents.start(server.url, "eu", "--label", "region=eu")
    assert (await client.wait_for(stuck["id"], timeout=20))["agent"] == "eu"


async def test_sigterm_drains_an_agent(
    server: ServerProcess, client: JobDeckClient, agents: Agents, tmp_path: Path
) -> None:
    proc = agents.start(server.url, "leaving", "--slots", "4", "--shutdown-grace", "10")
    await wait_agents(client, "leaving")
    job = await client.submit({"task": recorder_task(tmp_path, 1.0)})
    await wait_state(client, job["id"], "running")
    proc.send_signal(signal.SIGTERM)

    async def draining() -> bool:
        return any(a["name"] == "leaving" and a["draining"] for a in await client.agents())

    await until(draining, 5, "the agent to say it is draining")
    late = await client.submit({"task": {"kind": "python", "function": "agents.builtin:noop"}})
    assert proc.wait(15) == 0, agents.log("leaving")
    assert (await client.get_job(job["id"]))["state"] == "succeeded", "a draining agent finishes its jobs"
    late_now = await client.get_job(late["id"])
    assert late_now["state"] == "queued" and late_now["waiting_for"] == "no agent is connected", late_now


async def test_drain_from_the_api(server: ServerProcess, client: JobDeckClient, agents: Agents) -> None:
    agents.start(server.url, "cordoned", "--slots", "4")
    await wait_agents(client, "cordoned")
    drained = await client.drain_agent("cordoned")
    assert drained["draining"] is True
    job = await client.submit({"task": {"kind": "python", "function": "agents.builtin:noop"}})
    assert job["waiting_for"] == "every agent that could run it is draining", job


async def test_bad_agents_are_refused_with_a_reason(
    server: ServerProcess, client: JobDeckClient, agents: Agents
) -> None:
    url = server.url.replace("http", "ws") + "/v1/agents"
    async with websockets.connect(url) as ws:
        await ws.send(orjson.dumps({"type": "register", "protocol": 99, "name": "future", "slots": 1}))
        reply = orjson.loads(await asyncio.wait_for(ws.recv(), 5))
    assert reply["type"] == "error" and "protocol 99" in reply["message"], reply
    agents.start(server.url, "twin", "--slots", "1")
    await wait_agents(client, "twin")
    # A namesake elsewhere (its own state folder, so another identity) is refused by the core.
    second = agents.start(server.url, "twin", "--slots", "1", "--state-dir", str(server.data_dir.parent / "twin2"))
    assert second.wait(15) == 1
    assert "is connected already" in agents.log("twin")
    bad_import = subprocess.run(
        [sys.executable, "-m", "core.cli", "agent", "--server", server.url, "--import", "no_such_tasks_module"],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert bad_import.returncode == 1 and "cannot import 'no_such_tasks_module'" in bad_import.stderr
    assert "Traceback" not in bad_import.stderr


async def test_sdk_tasks_run_and_unknown_tasks_die_at_once(
    server: ServerProcess, client: JobDeckClient, agents: Agents
) -> None:
    from examples.shop.tasks import nightly_report, send_receipt

    agents.start(server.url, "shop", "--import", "examples.shop.tasks", "--queues", "emails,reports,default")
    await wait_agents(client, "shop")
    receipt = await client.enqueue(send_receipt, 7, "ada@example.org")
    assert receipt["queue"] == "emails" and receipt["max_attempts"] == 5 and receipt["timeout"] == 30
    report = await client.enqueue(nightly_report, "2026-11-29", region="us")
    assert (await client.wait_for(receipt["id"], timeout=20))["result"] == {"order_id": 7, "sent_to": "ada@example.org"}
    assert (await client.wait_for(report["id"], timeout=20))["result"].startswith("2026-11-29 us:")
    unknown = await client.submit({"task": {"kind": "python", "function": "shop.tasks:gone"}, "max_attempts": 5})
    dead = await client.wait_for(unknown["id"], timeout=20)
    assert dead["state"] == "dead" and dead["attempt"] == 1, "retrying cannot make a missing task appear"
    assert "cannot import 'shop.tasks'" in dead["last_error"], dead["last_error"]


async def test_a_wrong_server_url_is_one_clear_error() -> None:
    async with JobDeckClient("http://127.0.0.1:9") as c:
        with pytest.raises(Unavailable) as err:
            await c.agents()
    assert "cannot reach JobDeck at http://127.0.0.1:9" in err.value.message


async def test_many_large_results_arrive_whole_and_an_oversized_one_is_noted(
    server: ServerProcess, client: JobDeckClient, agents: Agents
) -> None:
    agents.start(server.url, "bulky", "--slots", "600")
    await wait_agents(client, "bulky")
    big = {"kind": "python", "function": "tests.agents.tasks_for_tests:big_result", "args": [50_000]}
    ids = (await client.submit_batch([{"task": big}] * 500))["ids"]  # ~25 MB of results at once

    async def all_done() -> bool:
        return (await client.stats())["by_state"].get("succeeded", 0) == 500

    await until(all_done, 60, "500 jobs with 50 kB results to succeed")
    for i in ids[:5] + ids[-5:]:
        assert len((await client.get_job(i))["result"]) == 50_000
    for i in ids[::25]:
        assert len(await client.attempts(i)) == 1, f"job {i}: no result may be lost and the job rerun"
    huge = await client.submit({"task": {**big, "args": [1_000_000]}})
    done = await client.wait_for(huge["id"], timeout=20)
    assert done["state"] == "succeeded" and "not kept" in done["result"], str(done["result"])[:200]


async def test_bulkheads_keep_slots_for_a_queue_that_a_flood_elsewhere_cannot_take(
    server: ServerProcess, client: JobDeckClient, agents: Agents
) -> None:
    """`--queues reports:2,emails:1,*`: 20 long reports fill only their 2 slots, an email starts at once in
    its own, and another queue gets the shared slots (32 by default), none of them a report's."""
    agents.start(server.url, "bulk", "--queues", "reports:2,emails:1,*")
    await wait_agents(client, "bulk")
    [me] = [a for a in await client.agents() if a["name"] == "bulk"]
    assert (me["slots"], me["queue_slots"]) == (35, {"reports": 2, "emails": 1}), me
    sleeper = {"kind": "python", "function": "agents.builtin:sleep", "args": [60]}
    reports = [(await client.submit({"task": sleeper, "queue": "reports", "timeout": 120}))["id"] for _ in range(20)]

    async def running_reports() -> int:
        return sum(1 for j in (await client.list_jobs(queue="reports", state="running"))["jobs"])

    assert await until(running_reports, 20, "2 reports to run") == 2
    email = await client.submit({"task": {"kind": "python", "function": "agents.builtin:noop"}, "queue": "emails"})
    assert (await client.wait_for(email["id"], timeout=20))["state"] == "succeeded", "the email had its own slot"
    other = [(await client.submit({"task": sleeper, "queue": "misc", "timeout": 120}))["id"] for _ in range(5)]
    for j in other:
        await wait_state(client, j, "running", 20)
    assert await running_reports() == 2, "18 reports wait: the shared slots are not theirs"
    waiting = (await client.list_jobs(queue="reports", state="queued"))["jobs"][0]
    why = (await client.get_job(waiting["id"]))["waiting_for"]
    assert why == "the bulkhead of queue 'reports' is full: agent bulk keeps 2 slots for 'reports', all busy", why
    await client.bulk("cancel", ids=reports + other)
    bad = subprocess.run([sys.executable, "-m", "core.cli", "agent", "--server", server.url, "--queues", "a:2",
                          "--slots", "1"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert bad.returncode != 0 and "--slots 1 is fewer than the 2 slots --queues keeps" in bad.stderr, bad.stderr
    listed = subprocess.run([sys.executable, "-m", "core.cli", "--server", server.url, "agents"], capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    [line] = [x for x in listed.stdout.splitlines() if x.startswith("bulk ")]
    assert "reports:2,emails:1,*" in line, f"the CLI names the bulkheads: {listed.stdout}"
