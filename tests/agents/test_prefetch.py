"""Jobs given ahead: an agent of short runs is given its next jobs beyond its slots, so a freed slot
starts the next job at once instead of waiting for the commit of the claim that replaces it. The
agent still runs at most its slots at once, reports what waits as its own (its leases are renewed),
and gives back what does not start: a cancelled job, one that waited too long, and all of them when
it drains. The core drives the protocol by hand in the first tests (the agent's side is under test)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agents import runtime
from agents.runtime import AgentConfig, AgentRuntime
from core.protocol import PROTOCOL_VERSION, LocalChannel, Message
from tests.agents import tasks_for_tests as tasks
from tests.conftest import RunningNode, until

pytestmark = pytest.mark.timeout(60)


def assignment(job_id: int, name: str) -> Message:
    task = {"kind": "python", "function": "tests.agents.tasks_for_tests:gated", "args": [name]}
    return {"job_id": job_id, "attempt": 1, "name": name, "queue": "q", "task": task, "timeout": None,
            "run_at": 0.0, "traceparent": None}  # fmt: skip


class Core:
    """The core's end of one agent's channel, spoken by the test."""

    def __init__(self, channel: LocalChannel) -> None:
        self.channel = channel
        self.hello: Message = {}

    async def next(self, kind: str) -> Message:
        """The next message of `kind` (heartbeats and output in between are skipped)."""
        while True:
            msg = await asyncio.wait_for(self.channel.recv(), 10)
            if msg.get("type") == kind:
                return msg


@pytest.fixture
async def agent() -> AsyncIterator[tuple[AgentRuntime, Core]]:
    """An agent of 2 slots (prefetch: as many) registered with the test as its core."""
    tasks.GATES.clear()
    tasks.STARTED.clear()
    core_end, agent_end = LocalChannel.pair()
    rt = AgentRuntime(AgentConfig(name="ahead", slots=2, heartbeat_seconds=30.0))
    serving = asyncio.create_task(rt.serve(agent_end))
    core = Core(core_end)
    core.hello = await core.next("register")
    await core_end.send({"type": "welcome", "protocol": PROTOCOL_VERSION, "lease_seconds": 90})
    try:
        yield rt, core
    finally:
        for gate in tasks.GATES.values():
            gate.set()
        await core_end.close()
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
        await rt.workers.close()


def started() -> list[str]:
    return list(tasks.STARTED)


def gate(name: str) -> None:
    tasks.GATES.setdefault(name, asyncio.Event()).set()


async def test_at_most_the_slots_run_and_jobs_given_ahead_start_as_runs_end(agent: tuple[AgentRuntime, Core]) -> None:
    rt, core = agent
    assert core.hello["prefetch"] == 2, f"register says prefetch {core.hello.get('prefetch')!r}, want its 2 slots"
    await core.channel.send({"type": "assign", "jobs": [assignment(i, n) for i, n in enumerate("abcd", 1)]})
    await until(lambda: len(started()) == 2, 5, "two runs to start")
    await asyncio.sleep(0.1)
    assert started() == ["a", "b"], f"started {started()} with 2 slots, want a and b only"
    pairs = sorted(map(tuple, rt.running_pairs()))
    assert pairs == [(1, 1), (2, 1), (3, 1), (4, 1)], f"running pairs {pairs}: waiting ones must be reported too"
    gate("a")
    result = await core.next("result")
    assert [r["job_id"] for r in result["results"]] == [1], f"results {result['results']}"
    await until(lambda: started() == ["a", "b", "c"], 5, "c to start in a's slot")
    gate("b")
    await until(lambda: started() == ["a", "b", "c", "d"], 5, "d to start in b's slot")
    gate("c")
    gate("d")
    done: set[int] = {1}
    while done != {1, 2, 3, 4}:
        done |= {r["job_id"] for r in (await core.next("result"))["results"]}


async def test_a_cancelled_job_that_waits_for_a_slot_is_given_back_unstarted(agent: tuple[AgentRuntime, Core]) -> None:
    rt, core = agent
    await core.channel.send({"type": "assign", "jobs": [assignment(i, n) for i, n in enumerate("abc", 1)]})
    await until(lambda: len(started()) == 2, 5, "two runs to start")
    await core.channel.send({"type": "cancel", "job_id": 3, "attempt": 1})
    back = await core.next("hand_back")
    assert back["jobs"] == [[3, 1]], f"handed back {back['jobs']}, want [[3, 1]]"
    assert sorted(map(tuple, rt.running_pairs())) == [(1, 1), (2, 1)]
    gate("a")
    await core.next("result")
    await asyncio.sleep(0.1)
    assert started() == ["a", "b"], f"started {started()}: the cancelled c must not run"


async def test_jobs_that_wait_too_long_and_all_waiting_jobs_at_a_drain_go_back(
    agent: tuple[AgentRuntime, Core], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, core = agent
    monkeypatch.setattr(runtime, "PREFETCH_WAIT_SECONDS", 0.2)
    await core.channel.send({"type": "assign", "jobs": [assignment(i, n) for i, n in enumerate("abc", 1)]})
    back = await core.next("hand_back")
    assert back["jobs"] == [[3, 1]], f"handed back {back['jobs']} after the wait, want [[3, 1]]"
    await core.channel.send({"type": "assign", "jobs": [assignment(4, "d")]})  # waits again
    await core.channel.send({"type": "drain"})
    await core.next("draining")
    back = await core.next("hand_back")
    assert back["jobs"] == [[4, 1]], f"handed back {back['jobs']} at the drain, want [[4, 1]]"
    assert started() == ["a", "b"], f"started {started()}"


async def test_the_core_gives_jobs_ahead_only_while_runs_are_short(running: RunningNode) -> None:
    c = running.client
    tasks.AT_ONCE.update(now=0, most=0)
    jobs: list[dict[str, Any]] = [{"task": {"kind": "python", "function": "tests.agents.tasks_for_tests:counted"},
                                   "queue": "short"}] * 600  # fmt: skip
    await c.submit_batch(jobs)
    session = next(iter(running.engine.hub.sessions.values()))
    most_free = 0

    async def drained() -> bool:
        nonlocal most_free
        most_free = max(most_free, session.free)
        n = next((q.get("counts") or {} for q in await c.queues() if q["name"] == "short"), {})
        return n.get("succeeded", 0) == 600

    await until(drained, 60, "600 short jobs to succeed")
    assert session.prefetch == session.slots == 32, f"prefetch {session.prefetch} of {session.slots} slots"
    assert session.ahead == 32, f"ahead {session.ahead} after short runs (mean {session.run_seconds})"
    assert tasks.AT_ONCE["most"] <= 32, f"{tasks.AT_ONCE['most']} runs at once on 32 slots"
    agents = await c.agents()
    assert agents[0]["slots_used"] <= 32 and agents[0]["slots_free"] <= 32, f"agent view {agents[0]}"
    sleeper = {"task": {"kind": "python", "function": "tests.agents.tasks_for_tests:big_result", "args": [1, 0.3]}}
    for _ in range(2):
        job = await c.submit({**sleeper, "queue": "long"})
        await until(lambda j=job: _state(c, j["id"], "succeeded"), 10, "a 0.3 s job to succeed")
    assert session.ahead == 0, f"ahead {session.ahead} after 0.3 s runs (mean {session.run_seconds})"


async def _state(c: Any, job_id: int, state: str) -> bool:
    return bool((await c.get_job(job_id))["state"] == state)


async def test_what_the_core_keeps_of_its_assignments_stays_small_behind_one_long_run() -> None:
    """The core remembers when it gave each batch (to tell a long run from short ones). One run that
    goes on while thousands of short ones come and go must not make that memory grow with them, and
    it still says the agent is given nothing ahead."""
    from core.agent_session import AgentSession
    from core.model import Job

    core_end, agent_end = LocalChannel.pair()
    session = AgentSession(None, core_end, {"name": "a", "slots": 4, "prefetch": 4})  # type: ignore[arg-type]
    session.run_seconds = 0.001  # its runs were short
    job = dict(queue="q", state="running", priority=0, sort_key=0.0, run_at=0.0, created_at=0.0, updated_at=0.0,
               attempt=1, max_attempts=1, backoff_base=1.0, backoff_cap=1.0, timeout=None, task={})  # fmt: skip
    await session.assign([Job(id=1, name="long", **job)])  # type: ignore[arg-type]
    for i in range(2, 2000):
        await session.assign([Job(id=i, name="short", **job)])  # type: ignore[arg-type]
        del session.running[i]  # its result came
        await agent_end.recv()
    assert len(session._given) <= 2 * session.slots + 9, f"{len(session._given)} assignments kept"
    await asyncio.sleep(0.02)  # the long run is overdue now
    assert session.ahead == 0, f"ahead {session.ahead} while job 1 runs on"
    del session.running[1]
    assert session.ahead == 4 and not session._given, (session.ahead, list(session._given))
