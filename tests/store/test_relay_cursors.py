"""The outbox relays' positions and leases (core/store/relay_cursors.py), on SQLite and PostgreSQL."""

from __future__ import annotations

from tests.store.conftest import StoreKit


async def test_one_holder_at_a_time_and_a_lapsed_lease_changes_hands_with_a_new_epoch(kit: StoreKit) -> None:
    s = kit.store
    a = await s.claim_relay("kafka", "node-a", 30.0)
    assert a is not None and (a.epoch, a.acked_seq) == (1, 0), a
    assert await s.claim_relay("kafka", "node-b", 30.0) is None, "held by node-a"
    again = await s.claim_relay("kafka", "node-a", 30.0)
    assert again is not None and again.epoch == 1, "renewing keeps the epoch"
    a = await s.advance_relay(a, 41, 30.0)
    assert a is not None and a.acked_seq == 41
    lapsed = await s.advance_relay(a, 42, -1.0)  # renewed into the past: the lease has lapsed
    assert lapsed is not None
    b = await s.claim_relay("kafka", "node-b", 30.0)
    assert b is not None and (b.epoch, b.acked_seq) == (2, 42), b
    assert await s.advance_relay(a, 99, 30.0) is None, "the old holder's write is refused"
    assert (await s.advance_relay(b, 10, 30.0)).acked_seq == 42, "the position never moves back"


async def test_a_released_lease_is_taken_at_once_and_positions_show_the_lag(kit: StoreKit) -> None:
    s = kit.store
    for _ in range(3):
        await s.record_event("agent.connected", {"agent": {"name": "x"}})
    a = await s.claim_relay("kafka", "node-a", 30.0)
    a = await s.advance_relay(a, 1, 30.0)
    [pos] = await s.relay_positions()
    view = pos.view(await s.last_seq(), pos.acked_at + 2.0)
    assert (view["holder"], view["acked_seq"], view["behind_events"]) == ("node-a", 1, 2), view
    assert view["behind_seconds"] >= 2.0, "the oldest event not yet relayed is at least 2 s old"
    await s.release_relay(a)
    b = await s.claim_relay("kafka", "node-b", 30.0)
    assert b is not None and b.acked_seq == 1 and b.epoch == 2
    other = await s.claim_relay("notify", "node-a", 30.0)
    assert other is not None and other.acked_seq == 0, "each sink has its own cursor and lease"
    assert [p.name for p in await s.relay_positions()] == ["kafka", "notify"]
