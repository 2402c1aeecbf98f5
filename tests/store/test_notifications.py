"""Notification channels, deliveries and attempts (core/store/notifications.py), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from core.errors import Conflict, NotFound
from core.store.notifications import AttemptResult
from tests.store.conftest import StoreKit


def _item(channel_id: int, key: str) -> dict:
    return {"channel_id": channel_id, "kind": "test", "message_id": f"msg_{key}", "payload": {"type": "t", "n": key},
            "max_attempts": 3}  # fmt: skip


def _result(d: dict, ok: bool, retry_at: float | None, **kw: object) -> AttemptResult:
    return AttemptResult(d["id"], d["channel_id"], ok, 200 if ok else 503, 1.5, "body", None if ok else "HTTP 503",
                         retry_at, **kw)  # type: ignore[arg-type]  # fmt: skip


async def due(s: object, now: float, skip: list[int] | None = None) -> bool:
    """Whether a claim at `now` would take something, by the dispatcher's peek (a read)."""
    at = await s.next_delivery_at(now, skip or [])  # type: ignore[attr-defined]
    return at is not None and at <= now


async def test_channels_are_named_once_and_secrets_merge(kit: StoreKit) -> None:
    s = kit.store
    c = await s.create_channel("ops", "webhook", {"url": "http://x/"}, {"secret": "whsec_a", "headers": {"A": "1"}})
    with pytest.raises(Conflict):
        await s.create_channel("ops", "webhook", {"url": "http://y/"}, {})
    c2 = await s.update_channel(c["id"], config={"timeout": 3.0}, secrets={"headers": {}})
    assert c2["config"] == {"url": "http://x/", "timeout": 3.0} and c2["secrets"] == {"secret": "whsec_a"}
    events = [e for e in kit.committed if e.type.startswith("notify.channel.")]
    assert [e.type for e in events] == ["notify.channel.created", "notify.channel.updated"]
    assert all(b"whsec_a" not in e.body for e in events), "events carry secret names, never values"
    await s.delete_channel(c["id"])
    with pytest.raises(NotFound):
        await s.get_channel(c["id"])


async def test_a_message_id_is_written_once_and_a_claim_is_one_dispatchers(kit: StoreKit) -> None:
    s = kit.store
    c = await s.create_channel("ops", "webhook", {}, {})
    first = await s.add_deliveries([_item(c["id"], "a"), _item(c["id"], "b")])
    again = await s.add_deliveries([_item(c["id"], "a"), _item(c["id"], "c")])
    assert [d["message_id"] for d in first] == ["msg_a", "msg_b"] and [d["message_id"] for d in again] == ["msg_c"]
    now = first[0]["next_at"] + 1
    assert await due(s, now) and not await due(s, now, [c["id"]]), "the peek agrees with a claim"
    assert await s.next_delivery_at(now) == first[0]["next_at"], "the peek says when the first is due"
    got = await s.claim_deliveries(now, 60.0, 10)
    assert sorted(d["message_id"] for d in got) == ["msg_a", "msg_b", "msg_c"]
    assert not await due(s, now), "all claimed: nothing due"
    assert await s.claim_deliveries(now, 60.0, 10) == [], "claimed: no other dispatcher gets them"
    assert not await due(s, now + 61, [c["id"]])
    assert await s.claim_deliveries(now + 61, 60.0, 10, skip=[c["id"]]) == [], "a skipped channel is left alone"
    await s.release_deliveries([got[0]["id"]])
    assert [d["id"] for d in await s.claim_deliveries(now, 60.0, 10)] == [got[0]["id"]], "given back, claimable again"


async def test_attempts_retry_finish_and_disable_a_channel_after_its_limit(kit: StoreKit) -> None:
    s = kit.store
    c = await s.create_channel("ops", "webhook", {}, {})
    [d] = await s.add_deliveries([_item(c["id"], "a")])
    t = d["next_at"]
    [d] = await s.claim_deliveries(t, 60.0, 10)
    assert await s.record_attempts([_result(d, False, t + 5, disable_after=3)]) == []
    assert not await due(s, t + 1) and await due(s, t + 6)
    assert await s.claim_deliveries(t + 1, 60.0, 10) == [], "not due before its retry time"
    [d] = await s.claim_deliveries(t + 6, 60.0, 10)
    assert d["attempts"] == 1
    await s.record_attempts([_result(d, False, t + 10, counts=False, disable_after=3)])  # breaker open: not counted
    assert (await s.get_channel(c["id"]))["failures"] == 1
    [d] = await s.claim_deliveries(t + 11, 60.0, 10)
    await s.record_attempts([_result(d, True, None)])
    got = await s.get_delivery(d["id"])
    assert (got["status"], got["attempts"], [a["ok"] for a in got["log"]]) == ("delivered", 3, [False, False, True])
    assert (await s.get_channel(c["id"]))["failures"] == 0, "a success clears the failure count"

    [e] = await s.add_deliveries([_item(c["id"], "e")])
    for n in range(3):
        [e] = await s.claim_deliveries(t + 100 * (n + 1), 60.0, 10)
        disabled = await s.record_attempts([_result(e, False, t + 100 * (n + 1) + 1, disable_after=3)])
    assert [ch["name"] for ch in disabled] == ["ops"] and "3 failed attempts in a row" in disabled[0]["disabled_reason"]
    assert not (await s.get_channel(c["id"]))["enabled"]
    assert not await due(s, t + 1000)
    assert await s.claim_deliveries(t + 1000, 60.0, 10) == [], "a disabled channel's deliveries wait"
    assert [e.type for e in kit.committed][-1] == "notify.channel.disabled"
    with pytest.raises(Conflict):
        await s.replay_delivery(e["id"], 3)  # still pending
    await s.update_channel(c["id"], enabled=True)
    [e] = await s.claim_deliveries(t + 1000, 60.0, 10)
    await s.record_attempts([_result(e, False, None)])
    replayed = await s.replay_delivery(e["id"], 3)
    assert (replayed["status"], replayed["max_attempts"]) == ("pending", replayed["attempts"] + 3)


async def test_two_nodes_never_claim_the_same_delivery(kit: StoreKit) -> None:
    if kit.kind != "postgres":
        pytest.skip("only PostgreSQL is shared between nodes")
    import asyncio

    a, b = kit.store, await kit.another()
    c = await a.create_channel("ops", "webhook", {}, {})
    made = await a.add_deliveries([_item(c["id"], str(i)) for i in range(200)])
    now = made[-1]["next_at"] + 1
    got_a, got_b = await asyncio.gather(*(st.claim_deliveries(now, 60.0, 150) for st in (a, b)))
    ids_a, ids_b = {d["id"] for d in got_a}, {d["id"] for d in got_b}
    assert not ids_a & ids_b and len(ids_a | ids_b) == 200, (len(ids_a), len(ids_b))
