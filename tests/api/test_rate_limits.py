"""Rate limits across nodes: with Redis, every node of a cluster takes from the same bucket; when
Redis goes away each node limits on its own (said once in the log), and nothing answers 5xx."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.auth.principals import TOKENS, auth_settings
from tests.conftest import start_node, stop_node, until
from tests.services import REDIS_URL, redis_problem
from tests.throwaway import ThrowawayRedis, throwaway_problem

VIEWER = {"authorization": f"Bearer {TOKENS['viewer'][0]}"}
BURST = 10


@pytest.fixture
def redis_url() -> str:
    problem = redis_problem()
    if problem:
        pytest.skip(problem)
    return REDIS_URL


@pytest.fixture
def own_redis() -> Iterator[ThrowawayRedis]:
    problem = throwaway_problem()
    if problem:
        pytest.skip(problem)
    with ThrowawayRedis() as r:
        yield r


async def _statuses(urls: list[str], n: int) -> list[int]:
    """`n` requests of one viewer, round-robin over the nodes."""
    out = []
    async with httpx.AsyncClient(headers=VIEWER, timeout=10) as http:
        for i in range(n):
            out.append((await http.get(urls[i % len(urls)] + "/v1/queues")).status_code)
    return out


async def test_two_nodes_on_one_redis_share_each_callers_bucket(
    tmp_path: Path,
    pg_url: str,
    redis_url: str,
) -> None:
    # A slow refill (one token every 10 s), so the count below is the burst, give or take one.
    nodes = []
    for name in ("a", "b"):
        settings = auth_settings(tmp_path / name, database_url=pg_url, redis_url=redis_url,
                                 rate_limit_per_second=0.1, rate_limit_burst=BURST)  # fmt: skip
        nodes.append(await start_node(settings, local_agent=False))
    try:
        got = await _statuses([url for _, url, _ in nodes], 3 * BURST)
        assert set(got) <= {200, 429}, f"only 200 and 429, never a 5xx: {got}"
        ok = got.count(200)
        assert BURST <= ok <= BURST + 1, (
            f"{3 * BURST} requests spread over two nodes with a shared burst of {BURST}: expected "
            f"{BURST} (+1 refill) to pass, got {ok} ({got}); each node alone would pass {BURST}"
        )
        assert all(n.app.state.rate_limits.shared for n, _, _ in nodes)
    finally:
        for node, _, task in nodes:
            await stop_node(node, task)


async def test_with_redis_down_each_node_limits_alone_and_says_so_once(
    tmp_path: Path, own_redis: ThrowawayRedis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobdeck.ratelimit")
    settings = auth_settings(tmp_path, redis_url=own_redis.url, rate_limit_per_second=0.1, rate_limit_burst=BURST)
    node, url, task = await start_node(settings, local_agent=False)
    limiter = node.app.state.rate_limits
    try:
        assert (await _statuses([url], 2)) == [200, 200]
        assert limiter.shared
        own_redis.stop()
        got = await _statuses([url], 2 * BURST)
        assert set(got) <= {200, 429}, f"Redis down: still only 200 and 429, got {got}"
        assert got.count(200) in (BURST, BURST + 1), f"the node's own bucket (a fresh one) limits: {got}"
        assert not limiter.shared
        down = [r for r in caplog.records if "Redis is unreachable" in r.getMessage()]
        assert len(down) == 1, f"expected the outage logged once, got {[r.getMessage() for r in down]}"
        own_redis.start()  # an empty Redis: the shared bucket starts full again
        await until(lambda: _statuses([url], 1), 10, "a request to go through again")

        async def shared_again() -> bool:
            await _statuses([url], 1)
            return bool(limiter.shared)

        await until(shared_again, 10, "the limiter to use Redis again")
        assert any("Redis is back" in r.getMessage() for r in caplog.records)
    finally:
        await stop_node(node, task)
