"""/metrics and /metrics/cluster of real nodes, read with Prometheus's own text parser: the
counters and histograms move with real jobs, the store-wide gauges are the store's, and a sum of
the node series over several nodes on one PostgreSQL is the cluster's figure (no double count)."""

from __future__ import annotations

from pathlib import Path

import httpx

from core.client import JobDeckClient
from tests.auth.principals import TOKENS, auth_settings
from tests.conftest import RunningNode, node_settings, start_node, stop_node
from tests.obs.promtext import scrape, value


def shell(command: str, queue: str, **extra: object) -> dict[str, object]:
    return {"name": f"m-{queue}", "queue": queue, "task": {"kind": "shell", "command": command}, **extra}


async def test_counters_and_histograms_move_with_real_jobs(running: RunningNode) -> None:
    client = running.client
    before = await scrape(running.url)
    assert value(before, "jobdeck_jobs_submitted_total") == 0, "a fresh node has submitted nothing"
    ok = [(await client.submit(shell("true", "fast")))["id"] for _ in range(5)]
    bad = [(await client.submit(shell("exit 3", "slow", max_attempts=1)))["id"] for _ in range(2)]
    for job_id in ok + bad:
        await client.wait_for(job_id, timeout=120)

    m = await scrape(running.url)
    assert value(m, "jobdeck_jobs_submitted_total", queue="fast") == 5, m
    assert value(m, "jobdeck_jobs_submitted_total", queue="slow") == 2
    assert value(m, "jobdeck_jobs_finished_total", queue="fast", outcome="succeeded") == 5
    assert value(m, "jobdeck_jobs_finished_total", queue="slow", outcome="dead") == 2
    assert value(m, "jobdeck_jobs_finished_total", queue="slow", outcome="succeeded") == 0
    assert value(m, "jobdeck_pickup_latency_seconds_count", queue="fast") == 5
    assert value(m, "jobdeck_pickup_latency_seconds_bucket", queue="fast", le="+Inf") == 5
    assert value(m, "jobdeck_run_duration_seconds_count", queue="slow", outcome="failed") == 2
    assert value(m, "jobdeck_run_duration_seconds_sum", queue="fast") > 0
    assert value(m, "jobdeck_store_commit_seconds_count") > 0
    assert value(m, "jobdeck_agents", draining="false") == 1
    assert value(m, "jobdeck_agent_slots", use="free") == running.node.settings.local_slots
    # by route template, not raw path: /v1/jobs/{job_id} is one series however many jobs were read
    assert value(m, "jobdeck_http_request_duration_seconds_count", method="POST", route="/v1/jobs", status="201") == 7
    reads = value(m, "jobdeck_http_request_duration_seconds_count", method="GET", route="/v1/jobs/{job_id}")
    assert reads >= 7, m
    assert not [k for k in m if ("route", "/v1/jobs/1") in k[1]], "a raw path became a label"

    cluster = await scrape(running.url, "/metrics/cluster")
    assert value(cluster, "jobdeck_jobs", queue="fast", state="succeeded") == 5, cluster
    assert value(cluster, "jobdeck_jobs", queue="slow", state="dead") == 2
    assert value(cluster, "jobdeck_queue_depth", queue="fast") == 0
    assert value(cluster, "jobdeck_schedules") == 0


async def test_an_unmatched_path_is_one_series_and_the_request_id_is_echoed(running: RunningNode) -> None:
    async with httpx.AsyncClient(base_url=running.url) as http:
        for i in range(3):
            assert (await http.get(f"/no/such/{i}")).status_code == 404
        resp = await http.get("/livez", headers={"X-Request-ID": "abc-123"})
        assert resp.headers["x-request-id"] == "abc-123"
        made = (await http.get("/livez")).headers["x-request-id"]
        assert len(made) == 32, made
    m = await scrape(running.url)
    assert value(m, "jobdeck_http_request_duration_seconds_count", route="unmatched", status="404") == 3, m


async def test_metrics_off_is_a_404_saying_how_to_turn_them_on(tmp_path: Path) -> None:
    node, url, task = await start_node(node_settings(tmp_path, metrics="false"), local_agent=False)
    try:
        async with httpx.AsyncClient(base_url=url) as http:
            for path in ("/metrics", "/metrics/cluster"):
                resp = await http.get(path)
                assert resp.status_code == 404, resp.text
                assert "JOBDECK_METRICS=true" in resp.json()["message"]
    finally:
        await stop_node(node, task)


async def test_with_sign_in_metrics_need_a_token_and_a_team_sees_its_queues_only(tmp_path: Path) -> None:
    node, url, task = await start_node(auth_settings(tmp_path), local_agent=False)
    try:
        admin = JobDeckClient(url, token=TOKENS["admin"][0])
        await admin.submit(shell("true", "payments", delay=3600))
        await admin.submit(shell("true", "search", delay=3600))
        await admin.close()
        async with httpx.AsyncClient(base_url=url) as http:
            assert (await http.get("/metrics")).status_code == 401
            assert (await http.get("/metrics/cluster")).status_code == 401
        everything = await scrape(url, "/metrics/cluster", headers={"Authorization": f"Bearer {TOKENS['admin'][0]}"})
        queues = {dict(k[1]).get("queue") for k in everything if k[0] == "jobdeck_jobs"}
        assert queues == {"payments", "search"}, everything
        team = await scrape(url, "/metrics/cluster", headers={"Authorization": f"Bearer {TOKENS['viewer'][0]}"})
        seen = {dict(k[1]).get("queue") for k in team if k[0] == "jobdeck_jobs"}
        assert seen == {"payments"}, f"the viewer's team owns payments only; saw {seen}"
        node_series = await scrape(url, headers={"Authorization": f"Bearer {TOKENS['viewer'][0]}"})
        assert value(node_series, "jobdeck_jobs_submitted_total", queue="payments") == 1
        assert value(node_series, "jobdeck_jobs_submitted_total", queue="search") == 0, "another team's queue"
    finally:
        await stop_node(node, task)


async def test_two_nodes_on_one_postgres_sum_to_the_cluster_without_double_counting(
    tmp_path: Path, pg_url: str
) -> None:
    nodes = [await start_node(node_settings(tmp_path / f"n{i}", database_url=pg_url), local_agent=False)
             for i in range(2)]  # fmt: skip
    try:
        for (_, url, _), n in zip(nodes, (3, 2), strict=True):
            client = JobDeckClient(url)
            for _ in range(n):
                await client.submit(shell("true", "shared", delay=3600))
            await client.close()
        node_series = [await scrape(url) for _, url, _ in nodes]
        assert [value(m, "jobdeck_jobs_submitted_total") for m in node_series] == [3, 2]
        cluster = [await scrape(url, "/metrics/cluster") for _, url, _ in nodes]
        # every node reads the same store: the same figure twice, which max() (not sum()) aggregates
        assert [value(c, "jobdeck_jobs", queue="shared", state="scheduled") for c in cluster] == [5, 5], cluster
    finally:
        for node, _, task in nodes:
            await stop_node(node, task)


async def test_schedules_running_jobs_relays_and_lease_expiries_show_in_the_metrics(running: RunningNode) -> None:
    """The rest of the issue's list, each moved by the real thing: a schedule's fires and their
    lateness, a running job in its queue's gauge, the relays' lag, and a lease that expired because
    its agent (one that claimed and then went silent) never reported."""
    import asyncio
    import time

    from core.model import build_job
    from core.store.base import ClaimRequest

    client = running.client
    sched = await client.create_schedule({"name": "every-second", "interval": 1, "job": shell("true", "sched")})
    long_job = (await client.submit(shell("sleep 60", "long")))["id"]
    ghost = build_job({"queue": "ghostq", "labels": {"zone": "nowhere"}, "task": {"kind": "shell", "command": "true"}},
                      time.time(), running.node.engine.policy)  # fmt: skip
    ((stored, _),) = await running.store.submit_jobs([ghost])
    claimed = await running.store.claim_jobs(ClaimRequest("ghost-agent", 1, frozenset({"ghostq"}),
                                                          labels={"zone": "nowhere"}), time.time())  # fmt: skip
    assert [j.id for j in claimed] == [stored.id], "the silent agent holds the job"
    deadline = time.monotonic() + 60
    while True:
        m, cluster = await scrape(running.url), await scrape(running.url, "/metrics/cluster")
        moved = (value(m, "jobdeck_schedule_fires_total") >= 2 and value(m, "jobdeck_lease_expiries_total", queue="ghostq") == 1
                 and value(cluster, "jobdeck_queue_running", queue="long") == 1)  # fmt: skip
        if moved:
            break
        assert time.monotonic() < deadline, f"within 60 s: {m} {cluster}"
        await asyncio.sleep(0.5)
    assert value(m, "jobdeck_schedule_lateness_seconds_count") >= 2, m
    assert value(m, "jobdeck_schedule_misses_total") == 0
    assert ("jobdeck_relay_lag_events", frozenset({("relay", "notify")})) in cluster, "the notify relay's lag is served"
    assert (await client.get_job(stored.id))["state"] in ("failed", "dead", "queued"), "the lost attempt is recorded"
    await client.job_action(long_job, "cancel")
    await client.delete_schedule(sched["id"])


def test_a_batch_s_latencies_land_in_the_buckets_observe_puts_them_in() -> None:
    """The hot path counts a claim's (or a result batch's) values bucket by bucket: each value on a
    bound, between bounds, past the last and zero lands where prometheus-client's `observe` puts it."""
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from core.model import Policy, build_job
    from core.obs.metrics import PICKUP_BUCKETS, RUN_BUCKETS, NodeMetrics

    now = 1_700_000_000.0
    waits = [0.0, *PICKUP_BUCKETS, *(b * 1.5 for b in PICKUP_BUCKETS), 0.0049, 4000.0, 0.01, 0.01]
    jobs = []
    for i, w in enumerate(waits):
        job = build_job({"queue": "qa" if i % 3 else "qb", "task": {"kind": "shell", "command": "true"}}, now, Policy())
        job.run_at = -w  # claimed at 0: waits exactly w (now - w would round some off their bound)
        jobs.append(job)
    runs = [("qa", "succeeded" if i % 2 else "failed", 0.0, w) for i, w in enumerate(waits)]
    ours = NodeMetrics()
    ours.claimed(jobs[:7], 0.0)
    ours.claimed(jobs[7:], 0.0)
    ours.ran(runs)
    ref = CollectorRegistry()
    pickup = Histogram("jobdeck_pickup_latency_seconds", "x", ["queue"], buckets=PICKUP_BUCKETS, registry=ref)
    run = Histogram("jobdeck_run_duration_seconds", "x", ["queue", "outcome"], buckets=RUN_BUCKETS, registry=ref)
    for job, w in zip(jobs, waits, strict=True):
        pickup.labels(job.queue).observe(w)
    for queue, outcome, start, end in runs:
        run.labels(queue, outcome).observe(end - start)

    def samples(text: bytes, name: str) -> dict[str, str]:
        return {ln.rsplit(" ", 1)[0]: ln.rsplit(" ", 1)[1] for ln in text.decode().splitlines()
                if ln.startswith(name) and "_created" not in ln}  # fmt: skip

    for name in ("jobdeck_pickup_latency_seconds", "jobdeck_run_duration_seconds"):
        got, want = samples(ours.text(), name), samples(generate_latest(ref), name)
        assert got.keys() == want.keys(), (got.keys(), want.keys())
        for k in want:  # sums may differ in the last digits: summed in another order
            assert abs(float(got[k]) - float(want[k])) <= 1e-9 * max(1.0, float(want[k])), (k, got[k], want[k])
