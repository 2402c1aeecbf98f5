"""The dispatcher on an idle node: its polls are reads (a claim is a store write even when it takes
nothing, twice a second per node), and a delivery another node wrote is still found by the poll."""

from __future__ import annotations

import asyncio
import time

from core.notify.dispatcher import Dispatcher
from core.notify.service import payload
from core.store.notifications import AttemptResult
from tests.notify.conftest import Receiver
from tests.store.conftest import StoreKit, kit  # noqa: F401 - the both-stores fixture

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


async def test_an_idle_dispatcher_writes_nothing_and_its_poll_still_finds_another_nodes_delivery(
    kit: StoreKit,  # noqa: F811
    receiver: Receiver,
) -> None:
    store = kit.store
    receiver.secret = SECRET
    commits: list[float] = []
    store.observe_commits(commits.append)
    dispatcher = Dispatcher(store, time.time, poll=0.1)
    dispatcher.start()
    try:
        await asyncio.sleep(1.0)  # ten polls with no channel at all
        assert commits == [], f"{len(commits)} store commits from an idle dispatcher's polls"
        channel = await store.create_channel("hook", "webhook", {"url": receiver.url}, {"secret": SECRET})
        await asyncio.sleep(0.5)  # a channel with nothing due
        before = len(commits)
        await asyncio.sleep(1.0)
        assert len(commits) == before, f"{len(commits) - before} commits from polls with nothing due"
        item = {"channel_id": channel["id"], "kind": "test", "message_id": "msg_from_another_node",
                "payload": payload("test", time.time(), {"title": "hi"}), "max_attempts": 3}  # fmt: skip
        await store.add_deliveries([item])  # written elsewhere: nothing wakes this dispatcher
        [got] = await receiver.wait_for(1, timeout=5)
        assert got.verified and got.headers["webhook-id"] == "msg_from_another_node", got
    finally:
        await dispatcher.stop()


async def test_an_idle_dispatcher_looks_less_often_and_still_finds_a_retry_another_node_wrote(
    kit: StoreKit,  # noqa: F811
    receiver: Receiver,
) -> None:
    """While its looks find nothing the dispatcher's poll doubles (0.1 s here, up to 8 s); a look that
    finds a delivery due later (a retry another node wrote) sets its timer to that time."""
    store = kit.store
    receiver.secret = SECRET
    looks = 0
    peek = next(getattr(store, n) for n in ("next_delivery_at", "deliveries_due") if hasattr(store, n))

    async def counted(*args: object) -> object:
        nonlocal looks
        looks += 1
        return await peek(*args)

    store.next_delivery_at = store.deliveries_due = counted
    dispatcher = Dispatcher(store, time.time, poll=0.1)
    dispatcher.start()
    try:
        channel = await store.create_channel("hook", "webhook", {"url": receiver.url}, {"secret": SECRET})
        await asyncio.sleep(3.0)
        assert looks <= 6, f"{looks} looks in 3 s of nothing due (a poll of 0.1 s doubling: 0.1, 0.2 ... 1.6)"
        due = time.time() + 1.0
        item = {"channel_id": channel["id"], "kind": "test", "message_id": "msg_due_later",
                "payload": payload("test", time.time(), {"title": "hi"}), "max_attempts": 3}  # fmt: skip
        [d] = await store.add_deliveries([item])
        await store.record_attempts([AttemptResult(d["id"], channel["id"], False, 503, 1.0, "", "HTTP 503", due)])
        [got] = await receiver.wait_for(1, timeout=10)
        late = time.time() - due
        # the looks after the write: at most 3.2 s later (the poll then), and the timer set to `due`
        assert got.headers["webhook-id"] == "msg_due_later" and late < 3.2, f"sent {late:.2f} s after it was due"
    finally:
        del store.next_delivery_at, store.deliveries_due
        await dispatcher.stop()
