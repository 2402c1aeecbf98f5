"""The dispatcher on an idle node: its polls are reads (a claim is a store write even when it takes
nothing, twice a second per node), and a delivery another node wrote is still found by the poll."""

from __future__ import annotations

import asyncio
import time

from core.notify.dispatcher import Dispatcher
from core.notify.service import payload
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
