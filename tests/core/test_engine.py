"""The engine through the API of a real node: order, limits, retries, timeouts, cancel, leases."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from agents.runtime import AgentConfig, AgentRuntime
from core.client import JobDeckClient
from core.protocol import PROTOCOL_VERSION, LocalChannel
from tests.conftest import RunningNode, node_settings, start_node, stop_node, until

NOOP = {"kind": "python", "function": "agents.builtin:noop"}


def sleeper(seconds: float) -> dict[str, Any]:
    return {"kind": "python", "function": "agents.builtin:sleep", "args": [seconds]}


def ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


async def wait_state(client: JobDeckClient, job_id: int, state: str, timeout: float = 10.0) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        job = await client.get_job(job_id)
        return job if job["state"] == state else None

    return await until(check, timeout, f"job {job_id} to be {state}")  # type: ignore[no-any-return]


async def test_priority_order_and_fifo_within_a_priority(running: RunningNode) -> None:
    c = running.client
    await c.submit({"task": NOOP, "queue": "ordered"})  # creates the queue
    await c.set_concurrency("ordered", 1)
    await c.queue_action("ordered", "pause")
    priorities = [0, 5, -3, 5, 10, 0]
    ids = [(await c.submit({"task": NOOP, "queue": "ordered", "priority": p}))["id"] for p in priorities]
    await c.queue_action("ordered", "resume")
    jobs = [await c.wait_for(i) for i in ids]
    started = sorted(jobs, key=lambda j: ts(j["started_at"]))
    got = [(j["priority"], j["id"]) for j in started]
    expected = sorted(zip(priorities, ids, strict=True), key=lambda pi: (-pi[0], pi[1]))
    assert got == expected, f"start order {got}, expected {expected}"


async def test_queue_concurrency_limit_is_never_exceeded(running: RunningNode) -> None:
    c = running.client
    await c.submit({"task": NOOP, "queue": "limited"})
    await c.set_concurrency("limited", 2)
    ids = (await c.submit_batch([{"task": sleeper(0.3), "queue": "limited"} for _ in range(6)]))["ids"]
    jobs = [await c.wait_for(i, timeout=20) for i in ids]
    spans = [(ts(j["started_at"]), ts(j["finished_at"])) for j in jobs]
    peak = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert peak == 2, f"at most 2 of queue 'limited' may run at once; peak was {peak}: {spans}"


async def test_paused_queue_holds_jobs_until_resumed(running: RunningNode) -> None:
    c = running.client
    first = await c.submit({"task": NOOP, "queue": "held"})
    await c.wait_for(first["id"])
    await c.queue_action("held", "pause")
    job = await c.submit({"task": NOOP, "queue": "held"})
    other = await c.submit({"task": NOOP, "queue": "free"})
    await c.wait_for(other["id"])  # the dispatcher has had its chance
    assert (await c.get_job(job["id"]))["state"] == "queued"
    await c.queue_action("held", "resume")
    assert (await c.wait_for(job["id"]))["state"] == "succeeded"


async def test_retries_with_backoff_then_dead_then_replay(running: RunningNode) -> None:
    c = running.client
    spec = {"task": {"kind": "python", "function": "agents.builtin:fail", "args": ["boom"]},
            "max_attempts": 3, "backoff": {"base": 0.2, "cap": 1.0}}  # fmt: skip
    job = await c.wait_for((await c.submit(spec))["id"], timeout=20)
    assert job["state"] == "dead" and job["attempt"] == 3, job
    assert "boom" in job["last_error"]
    attempts = await c.attempts(job["id"])
    assert [a["outcome"] for a in attempts] == ["failed"] * 3
    gaps = [attempts[i + 1]["started_at"] - attempts[i]["finished_at"] for i in range(2)]
    assert gaps[0] >= 0.1 and gaps[1] >= 0.2, f"backoff 0.2 s doubling with jitter >= half: gaps {gaps}"
    replayed = await c.job_action(job["id"], "retry")
    assert replayed["state"] == "queued" and replayed["max_attempts"] == 6
    job = await c.wait_for(job["id"], timeout=20)
    assert job["state"] == "dead" and job["attempt"] == 6


async def test_timeout_kills_the_run(running: RunningNode) -> None:
    c = running.client
    started = time.monotonic()
    job = await c.submit({"task": {"kind": "shell", "command": "sleep 30"}, "timeout": 0.5, "max_attempts": 1})
    job = await c.wait_for(job["id"], timeout=10)
    assert job["state"] == "dead" and "timed out" in job["last_error"], job
    assert time.monotonic() - started < 5


async def test_cancel_running_shell_job_stops_it_quickly(running: RunningNode, tmp_path: Path) -> None:
    c = running.client
    marker = tmp_path / "still-running"
    job = await c.submit({"task": {"kind": "shell", "command": f"sleep 30; touch {marker}"}})
    await wait_state(c, job["id"], "running")
    t0 = time.monotonic()
    asked = await c.job_action(job["id"], "cancel")
    assert asked["state"] == "running" and asked["cancel_requested"] is True, asked
    done = await c.wait_for(job["id"], timeout=10)
    elapsed = time.monotonic() - t0
    assert done["state"] == "cancelled", done
    assert elapsed < 1.0, f"a cancelled shell job must stop within 1 s, took {elapsed:.2f} s"
    attempts = await c.attempts(job["id"])
    assert attempts[-1]["outcome"] == "cancelled"


async def test_cancel_waiting_job_and_pause_resume(running: RunningNode) -> None:
    c = running.client
    later = await c.submit({"task": NOOP, "delay": 3600})
    assert later["state"] == "scheduled"
    paused = await c.job_action(later["id"], "pause")
    assert paused["state"] == "paused" and paused["paused_from"] == "scheduled"
    resumed = await c.job_action(later["id"], "resume")
    assert resumed["state"] == "scheduled", "a resumed job goes back to waiting for its time"
    cancelled = await c.job_action(later["id"], "cancel")
    assert cancelled["state"] == "cancelled"


async def test_priority_change_of_waiting_job(running: RunningNode) -> None:
    c = running.client
    job = await c.submit({"task": NOOP, "delay": 3600, "priority": 1})
    changed = await c.set_priority(job["id"], 99)
    assert changed["priority"] == 99 and changed["state"] == "scheduled"


async def test_delayed_job_starts_on_time(running: RunningNode) -> None:
    c = running.client
    # the baseline, on this node at this moment: how long a job due now takes from its submit to its start
    now = await c.wait_for((await c.submit({"task": NOOP}))["id"])
    pickup = ts(now["started_at"]) - ts(now["created_at"])
    job = await c.submit({"task": NOOP, "delay": 0.4})
    assert job["state"] == "scheduled"
    done = await c.wait_for(job["id"])
    late = ts(done["started_at"]) - ts(done["run_at"])
    # woken at run_at, not found by the 1 s safety poll: as late as a job due now, give or take 0.25 s
    assert 0 <= late < pickup + 0.25, (
        f"started {late * 1000:.1f} ms after run_at (a job due now: {pickup * 1000:.1f} ms)"
    )


async def test_a_schedule_run_written_ahead_starts_at_its_fire_time_never_before(tmp_path: Path) -> None:
    """A real node writes the run seconds ahead (created before its fire time); its agent starts it
    once the fire time has come, woken by the dispatcher's timer, not by a write or the safety poll."""
    node, url, task = await start_node(node_settings(tmp_path, schedule_lead_seconds=3.0))
    c = JobDeckClient(url)
    try:
        now = await c.wait_for((await c.submit({"task": NOOP}))["id"])
        pickup = ts(now["started_at"]) - ts(now["created_at"])  # a job due now, on this node at this moment
        s = await c.create_schedule({"name": "every-6s", "interval": 6, "job": {"task": NOOP, "queue": "sched"}})

        async def first() -> dict[str, Any] | None:
            jobs = (await c.list_jobs(schedule_id=s["id"], state="succeeded"))["jobs"]
            return jobs[-1] if jobs else None

        run = await until(first, 20, "the schedule's first run to succeed")
        fire = ts(run["fire_time"])
        assert ts(run["created_at"]) < fire, f"written {ts(run['created_at']) - fire:+.3f} s from its fire time"
        late = ts(run["started_at"]) - fire
        assert 0 <= late < pickup + 0.5, (
            f"started {late * 1000:.1f} ms after its fire time (a job due now: {pickup * 1000:.1f} ms)"
        )
    finally:
        await c.close()
        await stop_node(node, task)


async def test_idempotency_key_returns_the_first_job(running: RunningNode) -> None:
    c = running.client
    a = await c.submit({"task": NOOP, "idempotency_key": "order-42"})
    b = await c.submit({"task": {"kind": "shell", "command": "false"}, "idempotency_key": "order-42"})
    assert a["id"] == b["id"] and b["task"] == a["task"]


async def test_expired_lease_is_reclaimed_and_counted_as_lost(tmp_path: Path) -> None:
    node, url, task = await start_node(
        node_settings(tmp_path, lease_seconds=1.0, heartbeat_seconds=0.3), local_agent=False
    )
    client = JobDeckClient(url)
    try:
        # An agent that takes a job and then vanishes without a word.
        core_end, agent_end = LocalChannel.pair()
        session = asyncio.create_task(node.engine.attach_agent(core_end))
        await agent_end.send(
            {"type": "register", "protocol": PROTOCOL_VERSION, "name": "doomed", "slots": 1, "queues": ["*"]}
        )
        job = await client.submit({"task": NOOP})
        while (await agent_end.recv())["type"] != "assign":
            pass
        await agent_end.close()
        await session
        # A healthy agent arrives; after the lease runs out the job is retried there.
        core2, agent2 = LocalChannel.pair()
        node.spawn(node.engine.attach_agent(core2), "s2")
        node.spawn(AgentRuntime(AgentConfig(name="healthy", slots=4)).serve(agent2), "a2")
        done = await client.wait_for(job["id"], timeout=15)
        assert done["state"] == "succeeded" and done["attempt"] == 2, done
        attempts = await client.attempts(job["id"])
        assert [(a["agent"], a["outcome"]) for a in attempts] == [("doomed", "lost"), ("healthy", "succeeded")]
    finally:
        await client.close()
        await stop_node(node, task)


async def test_interval_and_cron_schedules_fire_in_their_zone(running: RunningNode) -> None:
    c = running.client
    every = await c.create_schedule({"name": "every-second", "interval": 1, "job": {"task": NOOP, "queue": "sched"}})
    cron = await c.create_schedule(
        {"name": "kolkata", "cron": "* * * * * *", "timezone": "Asia/Kolkata", "job": {"task": NOOP, "queue": "sched"}}
    )

    async def fired(sid: int, n: int) -> list[dict[str, Any]] | None:
        jobs = (await c.list_jobs(schedule_id=sid, state="succeeded"))["jobs"]
        return jobs if len(jobs) >= n else None

    for s in (every, cron):
        jobs = await until(lambda s=s: fired(s["id"], 2), 10, f"schedule {s['name']} to fire twice")
        times = sorted(ts(j["fire_time"]) for j in jobs)
        assert len(set(times)) == len(times), f"a fire time was materialised twice: {times}"
    preview = await c.preview(cron["id"], 3)
    assert all(t["local"].endswith("+05:30") for t in preview["fire_times"]), preview
    await c.schedule_action(every["id"], "pause")
    paused = await c.get_schedule(every["id"])
    assert paused["paused"] and paused["next_fire_at"] is None
    manual = await c.schedule_action(every["id"], "run")
    assert (await c.wait_for(manual["id"]))["state"] == "succeeded"


@pytest.mark.parametrize("state_action", [("succeeded", "pause"), ("succeeded", "resume")])
async def test_illegal_actions_name_the_state(running: RunningNode, state_action: tuple[str, str]) -> None:
    from core.errors import Conflict

    c = running.client
    job = await c.wait_for((await c.submit({"task": NOOP}))["id"])
    with pytest.raises(Conflict) as err:
        await c.job_action(job["id"], state_action[1])
    assert state_action[0] in err.value.message


async def test_the_bus_loop_lets_other_tasks_run_while_it_follows_a_big_commit(running: RunningNode) -> None:
    # a 10,000-job submit is one batch of events: followed in one go, it held the submitter's answer back
    import orjson

    from core.engine import FOLLOW_SLICE
    from core.model import iso
    from core.store.base import Event

    engine, followed = running.engine, []
    follow = engine._follow

    async def counted(e: Event) -> None:
        followed.append(e.seq)
        await follow(e)

    engine._follow = counted
    body = {"data": {"job": {"id": 1, "state": "blocked", "run_at": iso(time.time() + 3600)}}}
    n = 3 * FOLLOW_SLICE
    events = [Event(10**9 + i, time.time(), "job.created", None, "q", orjson.dumps(body)) for i in range(n)]

    async def probe() -> int:
        return len(followed)

    running.node.bus.publish(events)  # the bus loop is woken first ...
    seen = await asyncio.create_task(probe())  # ... this task right after it
    assert FOLLOW_SLICE <= seen < n, f"other tasks ran after {seen} of {n} events were followed"

    async def all_followed() -> bool | None:
        return len(followed) >= n or None

    await until(all_followed, 10, "the bus loop to follow them all")


async def test_an_idle_node_looks_for_work_less_often_yet_starts_work_as_fast(running: RunningNode) -> None:
    """Each idle loop's store round trips back off (core/idle.py: 1 s doubling to 8 s; the reaper asks
    only when a lease may have run out), while work that arrives after the idle spell still wakes them:
    a job due now and a delayed job start as soon as they did right after start-up."""
    c, store = running.client, running.store
    first = await c.wait_for((await c.submit({"task": NOOP}))["id"])
    pickup = ts(first["started_at"]) - ts(first["created_at"])  # on this node at this moment
    calls = {"promote_due_jobs": 0, "claim_jobs": 0, "expired_lease_ids": 0, "next_lease_expiry": 0}

    def counted(name: str) -> Any:
        real = getattr(store, name)

        async def call(*args: Any, **kw: Any) -> Any:
            calls[name] += 1
            return await real(*args, **kw)

        return call

    wrapped = [name for name in calls if hasattr(store, name)]
    for name in wrapped:
        setattr(store, name, counted(name))
    try:
        await asyncio.sleep(6.0)
        reaper = calls["expired_lease_ids"] + calls["next_lease_expiry"]
        # before: once a second each (6), and the reaper every reap_interval_seconds (0.2 s: 30)
        assert calls["promote_due_jobs"] <= 4 and calls["claim_jobs"] <= 4 and reaper <= 3, calls
        after = await c.wait_for((await c.submit({"task": NOOP}))["id"])
        delayed = await c.wait_for((await c.submit({"task": NOOP, "delay": 0.4}))["id"])
    finally:
        for name in wrapped:
            delattr(store, name)
    late = ts(after["started_at"]) - ts(after["created_at"])
    assert late < pickup + 0.25, f"started {late * 1000:.1f} ms after its submit ({pickup * 1000:.1f} ms before)"
    late = ts(delayed["started_at"]) - ts(delayed["run_at"])
    assert 0 <= late < pickup + 0.25, (
        f"started {late * 1000:.1f} ms after run_at ({pickup * 1000:.1f} ms for one due now)"
    )
