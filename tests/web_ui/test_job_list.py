"""The Jobs page at scale in a real browser: sorted on the server by clicking a header, searched,
counted, its filters in the URL (a shared link opens the same view), a loading state before the
first data, and times with their zone (the browser's, or UTC with the header's switch)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.web_ui.conftest import UI_TIMEOUT, Console, Dashboard
from tests.web_ui.test_dashboard import api

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]  # the first test may wait for the build
OpenPage = Callable[..., Page]
CHART_WAIT = 40_000  # ms
NO_MATCH_WATCH = """(() => {
  window.__sawNoMatch = false;
  new MutationObserver(() => {
    if (document.body && document.body.innerText.includes('No jobs match')) window.__sawNoMatch = true;
  }).observe(document, {childList: true, subtree: true, characterData: true});
})()"""


def test_sort_search_count_and_the_url_keep_the_view(open_page: OpenPage, web: Dashboard) -> None:
    api(web, "submit_batch", [{"name": f"scale-{p}", "priority": p, "queue": "scale-q", "delay": 600,
                               "task": {"kind": "shell", "argv": ["echo", f"cust-{p}"]}} for p in (4, -1, 8, 2)])  # fmt: skip
    page = open_page("/jobs?queue=scale-q")
    expect(page.locator("#f-queue")).to_have_value("scale-q")
    expect(page.locator("#jobs-total")).to_contain_text("4 of 4")
    page.locator(".sort-priority").click()
    expect(page.locator(".job-priority").first).to_have_text("8")
    assert [t.strip() for t in page.locator(".job-priority").all_inner_texts()] == ["8", "4", "2", "-1"]
    expect(page).to_have_url(re.compile(r"/jobs\?queue=scale-q&sort=priority$"))
    page.locator(".sort-priority").click()  # again: the other way round
    expect(page.locator(".job-priority").first).to_have_text("-1")
    expect(page).to_have_url(re.compile(r"sort=priority&order=asc"))
    shared = page.url
    page.locator("#f-q").fill("cust-8")
    expect(page.locator("#jobs-total")).to_contain_text("1 of 1")
    expect(page.get_by_role("button", name="Next")).to_be_disabled()  # one page: nothing after it
    expect(page.locator("tr", has_text="scale-8")).to_be_visible()
    expect(page).to_have_url(re.compile(r"q=cust-8"))
    other = open_page(shared.replace(web.url, ""))  # a shared link: the same filter and sort
    expect(other.locator(".job-priority").first).to_have_text("-1")
    expect(other.locator("#jobs-total")).to_contain_text("4 of 4")


def test_the_first_paint_is_a_loading_state_not_no_jobs_match(open_page: OpenPage, web: Dashboard) -> None:
    api(web, "submit", {"name": "first-paint", "delay": 600, "task": {"kind": "shell", "argv": ["true"]}})
    page = open_page("/")
    page.add_init_script(NO_MATCH_WATCH)
    page.goto(web.url + "/jobs")
    expect(page.locator("tr", has_text="first-paint")).to_be_visible()
    assert page.evaluate("window.__sawNoMatch") is False, "'No jobs match' showed before the first data"


def test_times_carry_their_zone_and_utc_is_a_switch(browser: Browser, web: Dashboard, console: Console) -> None:
    api(web, "create_schedule", {"name": "paris-nightly", "cron": "0 2 * * *", "timezone": "Europe/Paris",
                                 "job": {"task": {"kind": "shell", "argv": ["true"]}}})  # fmt: skip
    api(web, "submit", {"name": "zoned", "delay": 600, "task": {"kind": "shell", "argv": ["true"]}})
    ctx = browser.new_context(viewport={"width": 1400, "height": 900}, timezone_id="America/New_York")
    ctx.set_default_timeout(UI_TIMEOUT)
    try:
        page = console.watch(ctx.new_page())
        page.goto(web.url + "/schedules")
        nxt = page.locator(".schedule-next", has_text="CE").first
        expect(nxt).to_contain_text(re.compile(r"02:00:00 CES?T"))  # in the schedule's own zone
        expect(nxt).to_have_attribute("title", re.compile(r"\(.* E[SD]T\)"))  # and the viewer's on hover
        page.goto(web.url + "/jobs")
        created = page.locator("tr", has_text="zoned").locator(".job-created")
        expect(created).to_have_attribute("title", re.compile(r"\d\d:\d\d:\d\d E[SD]T"))  # the browser's zone
        page.locator("#utc-switch").click()
        expect(created).to_have_attribute("title", re.compile(r"\d\d:\d\d:\d\d UTC"))
    finally:
        ctx.close()


def test_the_overview_range_picker_reads_the_store(open_page: OpenPage, web: Dashboard) -> None:
    job = api(web, "submit", {"name": "for-history", "task": {"kind": "shell", "argv": ["true"]}})
    page = open_page("/")
    points = "() => { const g = document.querySelector('#chart-outcomes .js-plotly-plot'); " \
             "return g && g.data && g.data.length ? g.data[0].x.length : 0; }"  # fmt: skip
    try:
        # plotly's first draw takes seconds on a loaded two-core machine: a generous wait
        page.wait_for_function(f"({points})() === 60", timeout=CHART_WAIT)  # 1 h in 1 min intervals
    except Exception:
        raise AssertionError(f"expected 60 points, got {page.evaluate(points)}") from None
    page.locator("#range-picker").get_by_role("radio", name="24 h").click()
    page.wait_for_function(f"({points})() === 96", timeout=CHART_WAIT)  # 24 h in 15 min intervals
    page.locator("#range-picker").get_by_role("radio", name="15 min").click()
    page.wait_for_function(f"({points})() === 30", timeout=CHART_WAIT)
    total = "() => document.querySelector('#chart-outcomes .js-plotly-plot').data.reduce((n, t) => " \
            "n + (t.name === 'succeeded' ? t.y.reduce((a, b) => a + b, 0) : 0), 0)"  # fmt: skip
    assert api(web, "get_job", job["id"])["state"] in ("succeeded", "running", "queued")
    page.wait_for_function(f"({total})() >= 1", timeout=CHART_WAIT)  # the finished job, read from the store
