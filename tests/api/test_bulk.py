"""POST /v1/jobs/bulk: one action on the listed jobs or on every job matching a filter."""

from __future__ import annotations

from pathlib import Path

from core.client import JobDeckClient
from tests.conftest import RunningNode, node_settings, start_node, stop_node

LATER = {"task": {"kind": "python", "function": "agents.builtin:noop"}, "delay": 3600}


async def test_bulk_by_filter_changes_exactly_the_matching_jobs(running: RunningNode) -> None:
    c = running.client
    await c.submit_batch([{**LATER, "queue": "bulk-a", "name": f"a-{i}"} for i in range(30)])
    await c.submit_batch([{**LATER, "queue": "bulk-b", "name": f"b-{i}"} for i in range(5)])
    preview = await c.bulk("cancel", filter={"queue": "bulk-a"}, dry_run=True)
    assert (preview["matched"], preview["changed"], preview["dry_run"]) == (30, 0, True)
    assert {j["state"] for j in (await c.list_jobs(queue="bulk-a"))["jobs"]} == {"scheduled"}, (
        "a dry run changes nothing"
    )
    done = await c.bulk("cancel", filter={"queue": "bulk-a", "name_prefix": "a-1"})
    assert (done["matched"], done["changed"], done["errors"]) == (11, 11, [])  # a-1, a-10 .. a-19
    states = {j["name"]: j["state"] for j in (await c.list_jobs(limit=100))["jobs"]}
    assert all(s == "cancelled" for n, s in states.items() if n.startswith("a-1"))
    assert all(s == "scheduled" for n, s in states.items() if not n.startswith("a-1"))


async def test_bulk_reports_each_refused_job_with_its_reason(running: RunningNode) -> None:
    c = running.client
    ids = (await c.submit_batch([{**LATER, "queue": "bulk-c"} for _ in range(3)]))["ids"]
    await c.job_action(ids[0], "cancel")
    out = await c.bulk("priority", ids=[*ids, 999_999], priority=7)
    assert (out["matched"], out["changed"], out["error_count"]) == (4, 2, 2)
    errors = {e["id"]: e["error"] for e in out["errors"]}
    assert errors == {ids[0]: "conflict", 999_999: "not_found"}
    assert [(await c.get_job(i))["priority"] for i in ids[1:]] == [7, 7]


async def test_a_bulk_request_must_say_which_jobs(running: RunningNode) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=running.url) as http:
        for body, words in (
            ({"action": "cancel"}, "give either 'ids' or 'filter'"),
            ({"action": "cancel", "ids": [1], "filter": {}}, "give either 'ids' or 'filter'"),
            ({"action": "priority", "ids": [1]}, "'priority' goes with the action 'priority'"),
            ({"action": "explode", "ids": [1]}, "action"),
            ({"action": "cancel", "filter": {"state": "bogus"}}, "filter.state: unknown state 'bogus'"),
        ):
            resp = await http.post("/v1/jobs/bulk", json=body)
            assert resp.status_code == 422 and words in resp.json()["message"], (body, resp.text)


async def test_bulk_by_filter_takes_every_match_past_100000(tmp_path: Path) -> None:
    """It stopped at 100,000 and said matched: 100000. Now every match, in chunked transactions."""
    node, url, task = await start_node(node_settings(tmp_path), local_agent=False)
    try:
        n = 100_003
        spec = {**LATER, "queue": "bulk-big"}
        for i in range(0, n, 10_000):  # the store's batch insert: seconds, not minutes of HTTP
            await node.engine.submit([spec] * min(10_000, n - i))
        await node.engine.submit([{**LATER, "queue": "bulk-other"}] * 3)
        async with JobDeckClient(url) as c:
            preview = await c.bulk("priority", filter={"queue": "bulk-big"}, priority=9, dry_run=True)
            assert preview["matched"] == n, f"expected matched {n}, got {preview['matched']}"
            done = await c.bulk("priority", filter={"queue": "bulk-big"}, priority=9)
            assert (done["matched"], done["changed"], done["error_count"]) == (n, n, 0), done
            oldest = (await c.list_jobs(queue="bulk-big", cursor=2, limit=1))["jobs"]
            assert oldest and oldest[0]["id"] == 1 and oldest[0]["priority"] == 9, oldest  # the first one too
            others = (await c.list_jobs(queue="bulk-other"))["jobs"]
            assert {j["priority"] for j in others} == {0}, "jobs outside the filter are untouched"
    finally:
        await stop_node(node, task)
