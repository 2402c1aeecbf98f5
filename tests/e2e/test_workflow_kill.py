"""A `jobdeck server` SIGKILLed in the middle of a workflow, then started again on its SQLite file: the
remote agent comes back to it, the jobs cut off by the kill run again, and the workflow still ends
right: every job succeeded once its parents had ended, none ran twice at once."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

from core.client import JobDeckClient
from tests.conftest import free_port, recorder_task, run_spans, spawn_agent, spawn_jobdeck

FAST = {"JOBDECK_LEASE_SECONDS": "2", "JOBDECK_HEARTBEAT_SECONDS": "0.5", "JOBDECK_REAP_INTERVAL_SECONDS": "0.2"}


async def _running_refs(c: JobDeckClient, wf_id: int) -> set[str]:
    wf = await c.get_workflow(wf_id)
    return {n["ref"] for n in wf["nodes"] if n["state"] == "running"}


async def test_a_server_killed_mid_workflow_comes_back_and_the_workflow_ends_right(tmp_path: Path) -> None:
    data, port = tmp_path / "data", free_port()
    server = spawn_jobdeck(data, "server", port=port, env=FAST)
    agent = spawn_agent(server.url, "kill-wf", tmp_path, "--slots", "4", "--heartbeat", "0.5")
    task = recorder_task(tmp_path, 0.6)
    jobs: list[dict[str, Any]] = [{"ref": "extract", "task": task}]
    jobs += [{"ref": f"part{i}", "task": task, "depends_on": ["extract"]} for i in range(6)]
    jobs += [{"ref": "load", "task": task, "depends_on": [f"part{i}" for i in range(6)]}]
    try:
        async with JobDeckClient(server.url) as c:
            made = await c.submit_workflow("killed-etl", jobs)
            wf_id, ids = made["workflow"]["id"], made["ids"]
            deadline = time.monotonic() + 60
            while not (at_kill := {r for r in await _running_refs(c, wf_id) if r.startswith("part")}):
                assert time.monotonic() < deadline, f"no part started in 60 s: {await c.get_workflow(wf_id)}"
                await asyncio.sleep(0.05)
        server.kill()  # SIGKILL mid-workflow: parts are running, the rest blocked or queued
        killed_at = time.time()  # runs cut off by the kill end here
        server = spawn_jobdeck(data, "server", port=port, env=FAST)
        async with JobDeckClient(server.url) as c:
            deadline = time.monotonic() + 90
            while (wf := await c.get_workflow(wf_id))["state"] == "running":
                assert time.monotonic() < deadline, f"workflow still running 90 s after the restart: {wf}"
                await asyncio.sleep(0.1)
            assert (wf["state"], wf["counts"]) == ("succeeded", {"succeeded": 8}), wf
            attempts = {r: await c.attempts(i) for r, i in ids.items()}
    finally:
        agent.terminate()
        agent.wait(15)
        server.proc.terminate()
        server.proc.wait(15)

    spans = run_spans(tmp_path, killed_at)
    assert set(spans) == set(ids.values()), f"every job ran: {sorted(spans)} vs {sorted(ids.values())}"
    # the parts running at the kill (their runs cross it, or start as it happens: the agent had them)
    # either reached the node after its restart (the agent keeps a result until a node takes it) or were
    # recorded lost and ran again: each job has exactly one successful attempt whatever happened
    assert at_kill, "the kill came while parts were running"
    for ref, tries in attempts.items():
        assert [a["outcome"] for a in tries].count("succeeded") == 1, (ref, tries)
    for job, intervals in spans.items():
        intervals.sort()
        for (_, e1), (s2, _) in itertools.pairwise(intervals):
            assert s2 >= e1, f"job {job} ran twice at once: {intervals}"
    first_start = {j: min(s for s, _ in iv) for j, iv in spans.items()}
    last_end = {j: max(e for _, e in iv) for j, iv in spans.items()}
    for spec in jobs:
        for parent in spec.get("depends_on", []):
            child, par = ids[spec["ref"]], ids[parent]
            # the child's first run started after the parent's last run ended (it succeeded once, last)
            assert first_start[child] >= last_end[par], (
                f"{spec['ref']} started at {first_start[child]} before its parent {parent} ended at {last_end[par]}"
            )


async def test_an_agent_reaching_a_node_that_closes_before_answering_retries() -> None:
    """A node starting up (or dying) can take the TCP connection and close it before any HTTP answer:
    for the agent that is a connection error to retry, not a crash (it ended the agent in the test
    above once, and the workflow waited for ever)."""

    async def close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(close_at_once, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with JobDeckClient(f"http://127.0.0.1:{port}") as c:
            try:
                await c.agent_channel()
            except OSError as exc:  # what AgentRuntime.run_forever retries
                assert "no WebSocket handshake answer" in str(exc), exc
            else:
                raise AssertionError("a node that closed at once gave a channel")
    finally:
        server.close()
        await server.wait_closed()
