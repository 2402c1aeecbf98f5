"""Flow control in the stores (core/flow.py applied in the claim): one suite on SQLite and PostgreSQL;
@two_nodes tests run two PostgreSQL stores on one database, as two core nodes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.model import utcnow
from tests.store.conftest import StoreKit
from tests.store.test_conformance import claim, submit, two_nodes


async def test_a_rate_limit_starts_at_most_the_burst_then_the_rate(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, *({"queue": "mail"} for _ in range(30)), *({"queue": "free"} for _ in range(5)), now=t0)
    view = await s.update_queue("mail", {"rate_limit": 10.0, "rate_burst": 3}, t0)
    assert (view["rate_limit"], view["rate_burst"]) == (10.0, 3), view
    req = claim()
    first = await s.claim_jobs(req, t0)
    assert sorted(j.queue for j in first) == ["free"] * 5 + ["mail"] * 3, "the burst of 3, and every unlimited job"
    assert req.wake_at == pytest.approx(t0 + 0.1), "the next token comes in 1/rate s: the engine claims again then"
    again = claim()
    assert await s.claim_jobs(again, t0 + 0.05) == [], "half a token is no start"
    assert again.wake_at == pytest.approx(t0 + 0.1)
    assert len(await s.claim_jobs(claim(), t0 + 0.35)) == 3, "3.5 tokens refilled after 0.35 s at 10/s"
    assert len(await s.claim_jobs(claim(), t0 + 100)) == 3, "a quiet minute refills up to the burst, no more"
    [q] = [q for q in await s.list_queues() if q["name"] == "mail"]
    assert (q["rate_limit"], q["rate_burst"], q["running"], q["depth"]) == (10.0, 3, 9, 21), q


async def test_lifting_a_rate_limit_lets_the_queue_go_at_once(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, *({"queue": "mail"} for _ in range(10)), now=t0)
    await s.update_queue("mail", {"rate_limit": 0.5}, t0)
    assert len(await s.claim_jobs(claim(), t0)) == 1, "default burst at 0.5/s is one start"
    assert await s.claim_jobs(claim(), t0 + 1) == []
    await s.update_queue("mail", {"rate_limit": None}, t0 + 1)
    assert len(await s.claim_jobs(claim(), t0 + 1)) == 9
    settings = await s.queue_settings()
    assert settings["mail"].rate_limit is None and not settings["mail"].held


async def test_rate_limit_concurrency_and_pause_together(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, *({"queue": "api"} for _ in range(20)), now=t0)
    await s.update_queue("api", {"rate_limit": 100.0, "rate_burst": 10, "concurrency": 4}, t0)
    got = await s.claim_jobs(claim(caps={"api": 4}), t0)
    assert len(got) == 4, "the concurrency limit is the tighter one"
    await s.update_queue("api", {"paused": True}, t0)
    assert await s.claim_jobs(claim(paused=frozenset({"api"})), t0 + 1) == []
    limits, running, bucket = await s.queue_flow("api")
    assert (limits.paused, limits.concurrency, limits.rate_limit, running) == (True, 4, 100.0, 4)
    assert bucket.room(limits, t0) == 6, "4 of the 10 tokens were spent"


async def test_a_rate_limit_only_holds_the_queues_the_claim_may_take(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, *({"queue": "mail"} for _ in range(3)), {"queue": "other"}, now=t0)
    await s.update_queue("mail", {"rate_limit": 1.0, "rate_burst": 1}, t0)
    only_other = await s.claim_jobs(claim(queues=frozenset({"other"})), t0)
    assert [j.queue for j in only_other] == ["other"]
    assert len(await s.claim_jobs(claim(queues=frozenset({"mail"})), t0)) == 1, "its token was not spent by others"


@two_nodes
async def test_two_nodes_share_one_rate_limit(kit: StoreKit) -> None:
    """Both nodes claim as fast as they can for 2 (simulated) seconds: together they start at most
    burst + rate * elapsed jobs, and the bucket is not wasted (they start about that many)."""
    other = await kit.another()
    t0 = utcnow()
    await submit(kit.store, *({"queue": "shared"} for _ in range(500)), now=t0)
    await kit.store.update_queue("shared", {"rate_limit": 50.0, "rate_burst": 5}, t0)
    taken: dict[str, int] = {"n1": 0, "n2": 0}

    async def drain(store: Any, node: str) -> None:
        for step in range(200):  # every 10 ms of simulated time, each node claims
            taken[node] += len(await store.claim_jobs(claim(node, limit=20), t0 + step * 0.01))
            await asyncio.sleep(0)

    await asyncio.gather(drain(kit.store, "n1"), drain(other, "n2"))
    total = taken["n1"] + taken["n2"]
    assert total <= 5 + 50 * 1.99 + 1e-6, f"two nodes together started {total}: over the shared limit ({taken})"
    assert total >= 5 + 50 * 1.99 - 2, f"only {total} started: the nodes wasted tokens ({taken})"
