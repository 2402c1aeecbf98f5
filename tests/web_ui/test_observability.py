"""The web dashboard's observability: the job detail shows the trace id (from its submit's W3C
traceparent), and the Overview's SLO panel the pick-up objectives and success over the last hour and day."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from playwright.sync_api import Page, expect

from tests.web_ui.conftest import Dashboard

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_the_job_detail_shows_the_trace_id(open_page, web: Dashboard) -> None:  # type: ignore[no-untyped-def]
    made = httpx.post(web.core.url + "/v1/jobs", json={"task": {"kind": "shell", "command": "true"}},
                      headers={"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"})  # fmt: skip
    assert made.status_code == 201, made.text
    page = open_page(f"/jobs/{made.json()['id']}")
    expect(page.locator("#job-trace")).to_have_text(TRACE)
    plain = httpx.post(web.core.url + "/v1/jobs", json={"task": {"kind": "shell", "command": "true"}}).json()
    page.goto(web.url + f"/jobs/{plain['id']}")
    expect(page.locator("#job-trace")).to_have_text("-")


def test_the_overview_has_an_slo_panel(open_page, web: Dashboard, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ids = [httpx.post(web.core.url + "/v1/jobs", json={"task": {"kind": "shell", "command": "true"}, "queue": "slo-web"})
           .json()["id"] for _ in range(5)]  # fmt: skip
    ids.append(httpx.post(web.core.url + "/v1/jobs", json={"task": {"kind": "shell", "command": "exit 1"}, "queue": "slo-web",
                                                             "max_attempts": 1}).json()["id"])  # fmt: skip
    deadline = time.monotonic() + 60
    while any(httpx.get(f"{web.core.url}/v1/jobs/{i}").json()["state"] not in ("succeeded", "dead") for i in ids):
        assert time.monotonic() < deadline, "the jobs did not finish"
        time.sleep(0.2)
    page = open_page("/")
    table = page.locator("#slo-table")
    # the rows come with the Overview's first load (charts included: 8-15 s at a load of 10-16 here)
    expect(table).to_contain_text("last hour", timeout=60_000)
    expect(table).to_contain_text("last day")
    expect(table).to_contain_text("≤ 2 s (p99: 99 %)")
    expect(table.locator("tbody tr").first).to_contain_text("%")  # a share, not "-": jobs finished in the hour
    # the budget is a share left, or, once overspent, what was spent and allowed (never "-3233 % left")
    budget = table.locator("tbody tr").first.locator("td").last
    expect(budget).to_have_text(re.compile(r"^(\d+ % left|spent: [\d,]+ dead, [\d.,]+ allowed)$"))
    page.screenshot(path=str(tmp_path / "overview-slo.png"), full_page=True)


def test_the_pickup_chart_splits_held_jobs_from_jobs_waiting_for_a_slot(
    open_page: Callable[..., Page], web: Dashboard, tmp_path: Path
) -> None:
    """A job held in a paused queue and one picked up at once: the Overview's latency chart (fed from
    the store's pick-up history) draws a point on both lines, for the range picked."""
    shell = {"kind": "shell", "command": "true"}
    # due in 1.5 s: the pause (a request) lands before it is due even on a busy machine
    held = httpx.post(web.core.url + "/v1/jobs", json={"task": shell, "queue": "pickup-web", "delay": 1.5}).json()
    assert httpx.post(web.core.url + "/v1/queues/pickup-web/pause").status_code == 200
    quick = httpx.post(web.core.url + "/v1/jobs", json={"task": shell}).json()
    time.sleep(2.2)
    assert httpx.post(web.core.url + "/v1/queues/pickup-web/resume").status_code == 200
    deadline = time.monotonic() + 60
    while any(httpx.get(f"{web.core.url}/v1/jobs/{j['id']}").json()["state"] != "succeeded" for j in (held, quick)):
        assert time.monotonic() < deadline, "the jobs did not finish"
        time.sleep(0.2)
    pickup = httpx.get(web.core.url + "/v1/stats/history", params={"range": "15m"}).json()["pickup"]
    assert sum(pickup["held"]["jobs"]) >= 1 and sum(pickup["slot"]["jobs"]) >= 1, pickup
    page = open_page("/")
    chart = page.locator("#chart-latency")
    expect(chart.locator("svg.main-svg").first).to_be_visible(timeout=60_000)  # plotly's first draw is slow here
    expect(chart).to_contain_text("waiting for a slot p50")
    expect(chart).to_contain_text("held (paused / limited) p50")
    traces = chart.locator("g.scatterlayer g.trace")
    expect(traces).to_have_count(4)
    for i in (0, 2):  # the p50 lines of "waiting for a slot" and "held"
        expect(traces.nth(i).locator("path.point").first).to_be_attached(timeout=30_000)
    page.locator("#range-picker").get_by_role("radio", name="15 min").click()
    expect(traces.nth(2).locator("path.point").first).to_be_attached(timeout=30_000)
    page.screenshot(path=str(tmp_path / "overview-pickup.png"), full_page=True)
