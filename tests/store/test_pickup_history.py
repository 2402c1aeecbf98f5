"""The pick-up latency history the claims keep (core/store/pickup.py), split into jobs held by their
queue's policy and jobs that waited for a slot: one suite on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.model import utcnow
from core.store.pickup import BOUNDS, bucket_of, history_view, quantile
from core.store.postgres import PostgresStore
from core.store.sqlite import SQLiteStore
from tests.store.conftest import POLICY, StoreKit
from tests.store.test_conformance import claim, submit, two_nodes
from tests.store.test_flow import finish


async def totals(store: Any, since: float) -> dict[str, tuple[int, float]]:
    """class -> (jobs, summed wait seconds) claimed since `since`."""
    out = {"held": [0, 0.0], "slot": [0, 0.0]}
    for held, _, _, n, s in await store.pickup_history(since, 60.0):
        cell = out["held" if held else "slot"]
        cell[0] += n
        cell[1] += s
    return {k: (int(v[0]), round(float(v[1]), 3)) for k, v in out.items()}


async def reopen(kit: StoreKit) -> Any:
    """The same data through a store opened afresh, as after a node's restart."""
    await kit.store.close()
    if kit.kind == "sqlite":
        kit.store = SQLiteStore(Path(kit.url), POLICY, on_commit=lambda events: None)
    else:
        kit.store = PostgresStore(kit.url, POLICY, on_commit=lambda events: None)
    await kit.store.open()
    return kit.store


async def test_a_paused_queue_s_jobs_were_held_the_others_waited_for_a_slot(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, {"queue": "reports"}, {"queue": "reports"}, {"queue": "free"}, now=t0)
    await s.update_queue("reports", {"paused": True}, t0 + 1)
    got = await s.claim_jobs(claim(paused=frozenset({"reports"})), t0 + 2)
    assert [j.queue for j in got] == ["free"], got
    await s.update_queue("reports", {"paused": False}, t0 + 5)
    assert len(await s.claim_jobs(claim(), t0 + 6)) == 2
    await submit(s, {"queue": "reports"}, now=t0 + 10)  # after the pause ended: nothing held it
    assert len(await s.claim_jobs(claim(), t0 + 10.5)) == 1
    assert await totals(s, t0 - 60) == {"held": (2, 12.0), "slot": (2, 2.5)}


async def test_jobs_behind_a_concurrency_limit_were_held(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, *({"queue": "api"} for _ in range(3)), now=t0)
    await s.update_queue("api", {"concurrency": 1}, t0)
    # the engine says the limit leaves less room than the agent has (core.flow.held_by_limits)
    first = await s.claim_jobs(claim(caps={"api": 1}, held=frozenset({"api"})), t0 + 0.1)
    assert len(first) == 1
    assert await totals(s, t0 - 60) == {"held": (0, 0.0), "slot": (1, 0.1)}, "the first went at once"
    await finish(s, first, t0 + 3)
    second = await s.claim_jobs(claim(caps={"api": 1}, held=frozenset({"api"})), t0 + 3)
    assert len(second) == 1
    assert (await totals(s, t0 - 60))["held"] == (1, 3.0), "the second waited for the first: the limit held it"


async def test_jobs_behind_a_rate_limit_were_held(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, *({"queue": "mail"} for _ in range(3)), now=t0)
    await s.update_queue("mail", {"rate_limit": 1.0, "rate_burst": 1}, t0)
    for i in range(3):
        assert len(await s.claim_jobs(claim(), t0 + i)) == 1, i
    assert await totals(s, t0 - 60) == {"held": (2, 3.0), "slot": (1, 0.0)}, "one token a second held two"


async def test_the_history_survives_a_restart_and_is_pruned(kit: StoreKit) -> None:
    s, t0 = kit.store, utcnow()
    await submit(s, {}, {}, now=t0 - 7200)
    await s.claim_jobs(claim(limit=1), t0 - 7200 + 0.02)
    await s.claim_jobs(claim(limit=1), t0 + 0.3)
    s = await reopen(kit)
    assert await totals(s, t0 - 86400) == {"held": (0, 0.0), "slot": (2, 7200.32)}
    assert await s.prune_pickup(t0 - 3600) == 1
    assert await totals(s, t0 - 86400) == {"held": (0, 0.0), "slot": (1, 7200.3)}


@two_nodes
async def test_every_node_reads_the_claims_of_every_node(kit: StoreKit) -> None:
    a, t0 = kit.store, utcnow()
    b = await kit.another()
    await submit(a, *({"queue": "q"} for _ in range(4)), now=t0)
    await a.update_queue("q", {"paused": True}, t0)
    await b.update_queue("q", {"paused": False}, t0 + 2)  # resumed through the other node
    assert len(await a.claim_jobs(claim(limit=2), t0 + 3)) == 2
    assert len(await b.claim_jobs(claim(limit=2), t0 + 3)) == 2
    assert await totals(a, t0 - 60) == await totals(b, t0 - 60) == {"held": (4, 12.0), "slot": (0, 0.0)}


def test_percentiles_come_from_the_buckets() -> None:
    counts = [0] * (len(BOUNDS) + 1)
    counts[bucket_of(0.003)] = 90  # 0..5 ms
    counts[bucket_of(0.7)] = 10  # 0.5..1 s
    assert quantile(counts, 0.5) == pytest.approx(0.005 * 50 / 90)
    assert quantile(counts, 0.99) == pytest.approx(0.5 + 0.5 * 9 / 10)
    assert quantile([0] * len(counts), 0.5) is None
    counts[-1] = 1000
    assert quantile(counts, 0.99) == BOUNDS[-1], "a wait over the last bound is at least the last bound"


def test_every_interval_is_in_the_view_with_nulls_where_nothing_was_claimed() -> None:
    now = 3600.0 * 100 + 30
    view = history_view([(1, int(now // 60), bucket_of(2.0), 4, 8.0)], now, 900.0, 30.0)
    assert view["bucket_seconds"] == 60 and len(view["buckets"]) == 15, "kept per minute: 30-s intervals are 60"
    assert view["held"]["jobs"][-1] == 4 and view["held"]["mean_ms"][-1] == 2000.0
    assert 1000.0 < view["held"]["p50_ms"][-1] <= 2500.0
    assert view["slot"]["jobs"] == [0] * 15 and view["slot"]["p99_ms"] == [None] * 15
    one = history_view([(0, int(now // 60), bucket_of(1.2), 1, 1.2)], now, 900.0, 60.0)["slot"]
    assert (one["p50_ms"][-1], one["p99_ms"][-1]) == (1200.0, 1200.0), "a lone job's wait is exact, not a bucket's"
