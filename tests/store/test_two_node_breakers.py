"""The circuit breaker of http jobs, shared by two `jobdeck server` nodes on one PostgreSQL, each with
its own agent, against a real local HTTP server that fails on command."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from core.client import JobDeckClient
from tests.conftest import ServerProcess, spawn_agent, until
from tests.store.test_two_nodes import two_nodes  # noqa: F401 - the fixture


class FlakyHost:
    """A local HTTP server answering 500 while `failing`, else 200; it counts what it was sent."""

    def __init__(self) -> None:
        self.failing = True
        self.hits: list[tuple[float, bool]] = []  # (when, answered 500)
        host = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                failing = host.failing
                host.hits.append((time.monotonic(), failing))
                self.send_response(500 if failing else 200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"no" if failing else b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def flaky_host() -> Iterator[FlakyHost]:
    h = FlakyHost()
    yield h
    h.server.shutdown()


async def test_a_breaker_opened_through_one_node_holds_the_hosts_jobs_on_both_then_one_trial_closes_it(
    two_nodes: tuple[ServerProcess, ServerProcess],  # noqa: F811
    flaky_host: FlakyHost,
    tmp_path: Path,
) -> None:
    a, b = two_nodes
    agents = [spawn_agent(n.url, f"hooks-{i}", tmp_path, "--slots", "4") for i, n in enumerate((a, b))]
    task = {"kind": "http", "url": f"http://{flaky_host.address}/hook"}
    try:
        async with JobDeckClient(a.url) as ca, JobDeckClient(b.url) as cb:
            await until(lambda: _two(ca), 30, "both agents to register")
            await ca.submit({"task": task, "queue": "hooks", "delay": 3600})  # the queue exists
            # reset 10 s: the breaker must still be open while the held jobs are submitted and read (at CI's load
            # that took over the 3 s it was, the trial began, and the jobs were no longer all held)
            await cb.update_queue("hooks", breaker_reset=10.0, breaker_min_requests=4)
            failing = [await ca.submit({"task": task, "queue": "hooks", "max_attempts": 1}) for _ in range(4)]
            for j in failing:
                assert (await ca.wait_for(j["id"], timeout=20))["state"] == "dead"

            async def opened() -> list[dict[str, Any]]:
                return [x for x in await cb.breakers() if x["host"] == flaky_host.address and x["state"] == "open"]

            [shown] = await until(opened, 10, "node B to show the breaker node A's agent opened")
            assert shown["queue"] == "hooks" and shown["mode"] == "wait" and shown["times_opened"] == 1, shown
            sent_while_failing = len(flaky_host.hits)
            assert sent_while_failing == 4, f"4 requests opened it, {sent_while_failing} were sent"

            held = [await cb.submit({"task": task, "queue": "hooks", "max_attempts": 1}) for _ in range(6)]

            async def all_held() -> list[dict[str, Any]]:
                jobs = [await ca.get_job(j["id"]) for j in held]
                return jobs if all(j["state"] == "scheduled" for j in jobs) else []

            jobs = await until(all_held, 10, "the jobs to be held back while the breaker is open")
            why = jobs[0]["waiting_for"] or ""
            assert why.startswith(f"circuit open for host {flaky_host.address} (queue 'hooks')"), jobs[0]
            assert all(j["attempt"] == 0 for j in jobs), "held jobs use no attempt"
            assert len(flaky_host.hits) == sent_while_failing, "nothing is sent to the host while the breaker is open"

            flaky_host.failing = False
            done = [await cb.wait_for(j["id"], timeout=60) for j in held]
            assert [d["state"] for d in done] == ["succeeded"] * 6, done
            assert all(d["attempt"] == 1 for d in done), "each ran once: the wait cost no attempt"
            after = [t for t, _ in flaky_host.hits[sent_while_failing:]]
            assert len(after) == 6, f"one request per held job once healed, got {len(after)}"
            [closed] = [x for x in await ca.breakers() if x["host"] == flaky_host.address]
            assert closed["state"] == "closed" and closed["probe_job"] is None, closed
    finally:
        for p in agents:
            p.kill()
            p.wait(10)


async def _two(c: JobDeckClient) -> bool:
    return len(await c.agents()) == 2
