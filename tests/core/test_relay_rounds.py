"""The outbox relay (core/relay/relay.py) beside single commits: every event once and in order, while
its position costs a commit only every POSITION_EVERY, not one per event."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

from core.bus.local import LocalBus
from core.model import Policy
from core.relay import Relay
from core.relay.relay import POSITION_EVERY
from core.store.base import Event
from core.store.sqlite import SQLiteStore

POLICY = Policy(aging_seconds_per_priority=60.0, lease_seconds=30.0)


class ListSink:
    """A sink that keeps what it is given."""

    name = "test"

    def __init__(self) -> None:
        self.seqs: list[int] = []

    async def open(self) -> None:
        pass

    async def deliver(self, events: Sequence[Event]) -> int:
        self.seqs += [e.seq for e in events if e.seq is not None]
        return self.seqs[-1]

    async def close(self) -> None:
        pass


async def wait_for(check: object, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def test_a_relay_following_single_commits_adds_a_commit_only_every_position_interval(tmp_path: Path) -> None:
    bus = LocalBus()
    store = SQLiteStore(tmp_path / "jobdeck.db", POLICY, on_commit=bus.publish)
    commits: list[float] = []
    store.observe_commits(commits.append)
    await store.open()
    sink = ListSink()
    relay = Relay(store, bus, sink, lease_seconds=30.0)
    relay.start()
    try:
        await wait_for(lambda: relay.lease is not None and relay._live, "the relay to take its lease and catch up")
        before, began = len(commits), time.monotonic()
        n = 200
        for i in range(n):  # one commit each, as single submits are
            await store.record_event("agent.connected", {"agent": {"name": f"a{i}"}})
        await wait_for(lambda: len(sink.seqs) >= n, f"{n} events at the sink")
        elapsed = time.monotonic() - began
        extra = len(commits) - before - n
        allowed = elapsed / POSITION_EVERY + 2
        assert extra <= allowed, (
            f"{n} single commits in {elapsed:.2f} s made {extra} more commits for the relay's position; "
            f"expected at most {allowed:.0f} (one per {POSITION_EVERY} s), not one per event"
        )
        assert sink.seqs == sorted(set(sink.seqs)), "every event once, in seq order"
        assert sink.seqs[-n:] == list(range(sink.seqs[-n], sink.seqs[-n] + n)), "no gap"
    finally:
        await relay.stop()
    [pos] = await store.relay_positions()
    assert pos.acked_seq == await store.last_seq(), "a clean stop writes the position: a restart repeats nothing"
    await store.close()


async def test_events_the_bus_missed_still_reach_the_sink_from_the_store(tmp_path: Path) -> None:
    bus = LocalBus()
    quiet = LocalBus()  # commits announced to nobody: the relay must find them in the store
    store = SQLiteStore(tmp_path / "jobdeck.db", POLICY, on_commit=quiet.publish)
    await store.open()
    sink = ListSink()
    relay = Relay(store, bus, sink, lease_seconds=30.0)
    relay.start()
    try:
        for i in range(5):
            await store.record_event("agent.connected", {"agent": {"name": f"a{i}"}})
        await wait_for(lambda: len(sink.seqs) >= 5, "5 unannounced events at the sink (within IDLE_POLL)")
        assert sink.seqs == [1, 2, 3, 4, 5]
    finally:
        await relay.stop()
        await store.close()
