"""The dashboard in a real browser against a real core: live updates across browsers, actions,
bulk by filter, charts, form errors, refused actions, and an unreachable core."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from core.client import JobDeckClient
from tests.web_ui.conftest import Dashboard, start_core

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]  # the first test may wait for the build
OpenPage = Callable[..., Page]


def api(web: Dashboard, method: str, *args: Any, **kwargs: Any) -> Any:
    """Call one JobDeckClient method against the test core (the API, not the browser)."""

    async def call() -> Any:
        async with JobDeckClient(web.core.url) as client:
            return await getattr(client, method)(*args, **kwargs)

    # Playwright's sync API runs an event loop in this thread: the client gets a thread of its own.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, call()).result(timeout=30)


def waiting_job(web: Dashboard, name: str, **extra: Any) -> int:
    """A job that waits (runs in ten minutes), so the test decides what happens to it."""
    spec = {"name": name, "delay": 600, "task": {"kind": "shell", "argv": ["true"]}, **extra}
    return int(api(web, "submit", spec)["id"])


def row(page: Page, job_id: int) -> Any:
    return page.locator(f"#job-row-{job_id}")


def test_a_job_created_in_one_browser_appears_in_another(open_page: OpenPage, web: Dashboard) -> None:
    a, b = open_page("/jobs"), open_page("/jobs")
    expect(b.locator("#core-status")).to_contain_text("live")
    a.get_by_role("button", name="New job").click()
    form = a.get_by_role("dialog")
    form.get_by_label("Command").fill("echo from-browser-a")
    form.get_by_label("Name").fill("created-in-a")
    form.get_by_label("Delay (s)").fill("600")
    form.locator("#submit-job").click()
    expect(b.locator("tr", has_text="created-in-a")).to_be_visible()
    expect(a.locator("tr", has_text="created-in-a")).to_be_visible()
    jobs = api(web, "list_jobs", name_prefix="created-in-a")["jobs"]
    assert len(jobs) == 1 and jobs[0]["task"]["argv"] == ["echo", "from-browser-a"], jobs


def test_pause_priority_and_cancel_show_in_the_other_browser(open_page: OpenPage, web: Dashboard) -> None:
    job_id = waiting_job(web, "acted-on")
    a, b = open_page("/jobs"), open_page("/jobs")
    expect(row(b, job_id)).to_be_visible()

    row(a, job_id).locator(".act-pause").click()
    expect(row(b, job_id).locator(".job-state")).to_have_text("paused")

    row(a, job_id).locator(".act-priority").click()
    a.get_by_label("New priority (higher runs first)").fill("7")
    a.locator("#prio-save").click()
    expect(row(b, job_id).locator(".job-priority")).to_have_text("7")

    row(a, job_id).locator(".act-cancel").click()
    expect(row(b, job_id).locator(".job-state")).to_have_text("cancelled")
    assert api(web, "get_job", job_id)["state"] == "cancelled"


def test_a_change_made_through_the_api_appears_without_reload(open_page: OpenPage, web: Dashboard) -> None:
    job_id = waiting_job(web, "api-change")
    page = open_page("/jobs")
    expect(row(page, job_id).locator(".job-state")).to_have_text("scheduled")
    api(web, "job_action", job_id, "pause")
    expect(row(page, job_id).locator(".job-state")).to_have_text("paused")
    api(web, "set_priority", job_id, 3)
    expect(row(page, job_id).locator(".job-priority")).to_have_text("3")


def test_a_bulk_action_on_everything_matching_the_filter(open_page: OpenPage, web: Dashboard) -> None:
    ids = [waiting_job(web, f"bulkgrp-{i}") for i in range(5)]
    other = waiting_job(web, "not-in-bulk")
    a, b = open_page("/jobs"), open_page("/jobs")
    # typed before the page is live, the filter would be overwritten when the page's state loads
    expect(a.locator("#core-status")).to_contain_text("live")
    expect(row(a, other)).to_be_visible()
    a.get_by_label("Name starts with").fill("bulkgrp")
    expect(a.locator("#jobs-table tbody tr")).to_have_count(5)
    a.locator("#bulk-filter-pause").click()
    dialog = a.get_by_role("alertdialog")
    expect(dialog).to_contain_text("every job with name starting with 'bulkgrp'")
    # a dry run counted what it would touch, and changed nothing
    expect(dialog.get_by_role("heading")).to_have_text("Apply pause to 5 jobs?")
    expect(dialog.locator("#bulk-count")).to_have_text("5 jobs")
    assert [api(web, "get_job", i)["state"] for i in ids] == ["scheduled"] * 5
    a.locator("#bulk-confirm").click()
    for job_id in ids:
        expect(row(b, job_id).locator(".job-state")).to_have_text("paused")
    expect(a.get_by_text("pause: 5 of 5 jobs changed")).to_be_visible()
    assert api(web, "get_job", other)["state"] == "scheduled"


def test_a_bulk_action_on_selected_rows(open_page: OpenPage, web: Dashboard) -> None:
    picked = [waiting_job(web, f"pick-{i}") for i in range(2)]
    left = waiting_job(web, "pick-not")
    page = open_page("/jobs")
    for job_id in picked:
        row(page, job_id).get_by_role("checkbox").click()
    expect(page.locator("#selected-count")).to_contain_text("2 selected")
    page.locator("#bulk-selected-cancel").click()
    for job_id in picked:
        expect(row(page, job_id).locator(".job-state")).to_have_text("cancelled")
    expect(row(page, left).locator(".job-state")).to_have_text("scheduled")


def test_a_job_can_be_submitted_with_the_keyboard_alone(open_page: OpenPage, web: Dashboard) -> None:
    page = open_page("/jobs")
    page.locator("#new-job").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("dialog").get_by_label("Command")).to_be_focused()
    page.keyboard.type("echo typed")
    page.keyboard.press("Tab")  # to Queue
    page.keyboard.press("Tab")  # to Name
    page.keyboard.type("keyboard-only")
    page.keyboard.press("Enter")
    expect(page.get_by_role("dialog")).to_have_count(0)
    expect(page.locator("tr", has_text="keyboard-only")).to_be_visible()


def test_overview_charts_render(open_page: OpenPage, web: Dashboard) -> None:
    api(web, "submit", {"task": {"kind": "shell", "argv": ["true"]}})
    page = open_page("/")
    for chart in ("outcomes", "latency", "depth", "success"):  # plotly's first draw: 8-15 s at a load of 10+
        expect(page.locator(f"#chart-{chart} svg.main-svg").first).to_be_visible(timeout=40_000)
    expect(page.locator("#chart-outcomes .bars path").first).to_be_attached()
    expect(page.locator("#count-succeeded")).not_to_have_text("0")


def test_form_errors_appear_next_to_the_field(open_page: OpenPage) -> None:
    page = open_page("/jobs")
    page.get_by_role("button", name="New job").click()
    page.locator("#submit-job").click()
    expect(page.locator("#error-command")).to_have_text("a command is needed")
    form = page.get_by_role("dialog")
    form.get_by_label("Command").fill("echo x")
    form.get_by_label("Queue").fill("bad queue!")
    page.locator("#submit-job").click()
    expect(page.locator("#error-queue")).to_contain_text("queue")  # the server's message, by the field
    expect(page.get_by_role("dialog")).to_be_visible()


def test_a_refused_action_shows_the_reason_and_changes_nothing(open_page: OpenPage, web: Dashboard) -> None:
    job_id = waiting_job(web, "refused")
    page = open_page("/jobs")
    row(page, job_id).locator(".act-priority").click()
    api(web, "job_action", job_id, "cancel")  # meanwhile, someone cancels it
    page.get_by_label("New priority (higher runs first)").fill("9")
    page.locator("#prio-save").click()
    expect(page.locator("[data-sonner-toast]", has_text="cancelled")).to_be_visible()
    job = api(web, "get_job", job_id)
    assert (job["state"], job["priority"]) == ("cancelled", 0), job


def test_pages_render_and_the_job_detail_follows_output(open_page: OpenPage, web: Dashboard) -> None:
    job_id = int(api(web, "submit", {"task": {"kind": "shell", "argv": ["echo", "detail-output"]}})["id"])
    page = open_page(f"/jobs/{job_id}")
    expect(page.locator("#detail-state")).to_have_text("succeeded")
    expect(page.locator("#job-output")).to_contain_text("detail-output")
    expect(page.locator("#job-events")).to_contain_text("job.succeeded")
    for path, marker in (("/queues", "#queue-row-default"), ("/agents", "#agents-table tbody tr"),
                         ("/schedules", "#schedules-table"), ("/dead", "#dead-table")):  # fmt: skip
        page.goto(web.url + path)
        expect(page.locator(marker).first).to_be_visible()


def test_a_schedule_with_the_cron_preview_as_you_type(open_page: OpenPage, web: Dashboard) -> None:
    page = open_page("/schedules")
    page.locator("#new-schedule").click()
    form = page.get_by_role("dialog")
    form.get_by_label("Name").fill("every-morning")
    cron = form.get_by_label("Cron (min hour day month weekday)")
    cron.fill("0 7 * * 1-5")
    expect(page.locator("#fire-times li")).to_have_count(5)
    expect(page.locator("#fire-times li").first).to_contain_text("07:00")
    cron.fill("0 7 * *")  # four fields: the server says why, by the field
    expect(page.locator("#s-error-cron")).to_be_visible()
    expect(page.locator("#fire-times li")).to_have_count(0)
    cron.fill("30 6 * * *")
    page.locator("#s-timezone").click()
    page.get_by_role("option", name="Asia/Tokyo").click()
    expect(page.locator("#fire-times")).to_contain_text("Asia/Tokyo")
    expect(page.locator("#fire-times li").first).to_contain_text("06:30")
    form.get_by_label("Command").fill("echo good morning")
    page.locator("#s-save").click()
    expect(page.locator("#schedules-table tr", has_text="every-morning")).to_be_visible()
    saved = [s for s in api(web, "schedules") if s["name"] == "every-morning"]
    assert saved and (saved[0]["cron"], saved[0]["timezone"]) == ("30 6 * * *", "Asia/Tokyo"), saved

    schedule_row = page.locator("#schedules-table tr", has_text="every-morning")
    schedule_row.get_by_role("button", name="Edit").click()
    expect(cron).to_have_value("30 6 * * *")
    cron.fill("45 6 * * *")
    expect(page.locator("#fire-times li").first).to_contain_text("06:45")
    page.locator("#s-save").click()
    expect(schedule_row).to_contain_text("45 6 * * *")
    assert api(web, "get_schedule", saved[0]["id"])["cron"] == "45 6 * * *"


def test_a_dead_job_is_replayed_from_the_dead_letters(open_page: OpenPage, web: Dashboard) -> None:
    spec = {"name": "doomed", "max_attempts": 1, "task": {"kind": "shell", "argv": ["false"]}}
    job_id = int(api(web, "submit", spec)["id"])
    api(web, "wait_for", job_id, ("dead",), 20)
    page = open_page("/dead")
    page.get_by_role("button", name=f"Replay job {job_id}").click()
    expect(page.locator("[data-sonner-toast]", has_text=f"job {job_id} replayed")).to_be_visible()
    assert api(web, "get_job", job_id)["attempt"] >= 1
    events = [e["type"] for e in api(web, "job_events", job_id)]
    assert events.count("job.dead") >= 1 and any(t in events for t in ("job.queued", "job.running")), events


def test_the_page_says_when_the_core_is_unreachable_and_recovers(open_page: OpenPage, web: Dashboard) -> None:
    """Runs last in this file: it stops and restarts the session's core on the same port."""
    page = open_page("/jobs")
    expect(page.locator("#core-status")).to_contain_text("live")
    port = int(web.core.url.rsplit(":", 1)[1])
    web.core.proc.terminate()
    web.core.proc.wait(20)
    expect(page.locator("#core-down")).to_be_visible(timeout=15_000)
    web.core = start_core(web.core.data_dir, port=port)
    expect(page.locator("#core-down")).to_have_count(0, timeout=15_000)
    job_id = waiting_job(web, "after-recovery")
    expect(row(page, job_id)).to_be_visible()


def test_queue_limits_are_shown_and_changed_from_the_queues_page(open_page: OpenPage, web: Dashboard) -> None:
    api(web, "submit", {"task": {"kind": "shell", "argv": ["true"]}, "queue": "limits-q", "delay": 3600})
    page = open_page("/queues")
    row = page.locator("#queue-row-limits-q")
    expect(row.locator(".queue-rate")).to_have_text("no limit")  # as the Concurrency column says
    expect(row.locator(".queue-keys")).to_have_text("no limit")
    row.get_by_role("button", name="Limit").click()
    dialog = page.get_by_role("dialog")
    dialog.locator("#rate-value").fill("2.5")
    dialog.locator("#burst-value").fill("4")
    dialog.locator("#key-value").fill("3")
    dialog.locator("#fair-value").click()
    dialog.locator("#weights-value").fill("gold=3, free=1")
    dialog.get_by_role("button", name="Save").click()
    expect(row.locator(".queue-rate")).to_have_text("2.5/s (burst 4)")
    expect(row.locator(".queue-keys")).to_contain_text("3")
    expect(row.locator(".queue-keys")).to_contain_text("fair")
    expect(row.locator(".queue-weights")).to_have_text(" free=1, gold=3")
    [q] = [q for q in api(web, "queues") if q["name"] == "limits-q"]
    assert (q["rate_limit"], q["rate_burst"], q["key_concurrency"], q["concurrency"]) == (2.5, 4, 3, None), q
    assert (q["fair"], q["fairness_weights"]) == (True, {"gold": 3.0, "free": 1.0}), q
    row.get_by_role("button", name="Limit").click()  # a weight that is not KEY=N is refused, nothing saved
    dialog.locator("#weights-value").fill("gold=lots")
    dialog.get_by_role("button", name="Save").click()
    expect(page.get_by_text("weights: 'gold=lots' is not KEY=N")).to_be_visible()
    [q] = [q for q in api(web, "queues") if q["name"] == "limits-q"]
    assert q["fairness_weights"] == {"gold": 3.0, "free": 1.0}, q


def test_the_queues_page_shows_per_key_usage_and_circuit_breakers(open_page: OpenPage, web: Dashboard) -> None:
    from tests.store.test_two_node_breakers import FlakyHost

    host = FlakyHost()
    sleep = {"kind": "python", "function": "agents.builtin:sleep", "args": [30]}
    try:
        api(web, "submit", {"task": sleep, "queue": "web-keys-q", "delay": 3600})
        api(web, "update_queue", "web-keys-q", key_concurrency=1, breaker_min_requests=2, breaker_reset=300.0)
        jobs = [api(web, "submit", {"task": sleep, "queue": "web-keys-q", "concurrency_key": k, "fairness_key": k})
                for k in ("acme", "acme", "acme", "zeta")]  # fmt: skip
        for _ in range(2):
            dead = api(web, "submit", {"task": {"kind": "http", "url": f"http://{host.address}/"},
                                       "queue": "web-keys-q", "max_attempts": 1})  # fmt: skip
            api(web, "wait_for", dead["id"], timeout=20)
        page = open_page("/queues")
        page.locator("#queue-row-web-keys-q").get_by_role("button", name="Keys").click()
        panel = page.locator("#keys-panel")
        expect(panel).to_contain_text("Per-key usage of queue web-keys-q")
        expect(panel).to_contain_text("at most 1 job of one concurrency key runs at once")
        expect(panel.locator("#keys-running")).to_contain_text("acme1 of 1")
        expect(panel.locator("#keys-running")).to_contain_text("zeta1 of 1")
        expect(panel.locator("#keys-waiting")).to_contain_text("acme2")
        breaker = page.locator(f'[id="breaker-row-web-keys-q-{host.address}"]')
        expect(breaker).to_contain_text("open")
        expect(breaker).to_contain_text(f"circuit open for host {host.address} (queue 'web-keys-q')")
    finally:
        host.server.shutdown()
        api(web, "bulk", "cancel", ids=[j["id"] for j in jobs])


def test_a_queues_breaker_numbers_are_changed_and_an_open_breaker_reset_from_the_queues_page(
    open_page: OpenPage, web: Dashboard
) -> None:
    from tests.store.test_two_node_breakers import FlakyHost

    host = FlakyHost()
    try:
        api(web, "submit", {"task": {"kind": "shell", "argv": ["true"]}, "queue": "web-brk-q", "delay": 3600})
        api(web, "update_queue", "web-brk-q", breaker_min_requests=2, breaker_reset=3600.0)
        for _ in range(2):
            dead = api(web, "submit", {"task": {"kind": "http", "url": f"http://{host.address}/"},
                                       "queue": "web-brk-q", "max_attempts": 1})  # fmt: skip
            api(web, "wait_for", dead["id"], timeout=20)
        page = open_page("/queues")
        page.locator("#queue-row-web-brk-q").get_by_role("button", name="Breakers").click()
        dialog = page.get_by_role("dialog")
        expect(dialog.locator("#reset-value")).to_have_value("3600")
        expect(dialog.locator("#min-value")).to_have_value("2")
        expect(dialog.locator("#ratio-value")).to_have_value("")
        dialog.locator("#ratio-value").fill("1.5")
        dialog.get_by_role("button", name="Save").click()
        expect(page.locator("[data-sonner-toast]", has_text="breaker_failure_ratio")).to_be_visible()
        expect(dialog).to_be_visible()  # a refused change keeps the dialog open
        dialog.locator("#ratio-value").fill("0.4")
        dialog.locator("#window-value").fill("20")
        dialog.locator("#reset-value").fill("90")
        dialog.locator("#mode-value").select_option("fail")
        dialog.get_by_role("button", name="Save").click()
        expect(page.locator("[data-sonner-toast]", has_text="breaker settings saved")).to_be_visible()
        [q] = [q for q in api(web, "queues") if q["name"] == "web-brk-q"]
        got = tuple(q[f"breaker_{k}"] for k in ("failure_ratio", "window", "reset", "min_requests", "mode"))
        assert got == (0.4, 20.0, 90.0, 2, "fail"), q
        breaker = page.locator(f'[id="breaker-row-web-brk-q-{host.address}"]')
        expect(breaker).to_contain_text("open")
        breaker.get_by_role("button", name="Reset").click()
        expect(page.locator("[data-sonner-toast]", has_text=f"breaker of {host.address} in queue web-brk-q closed"))\
            .to_be_visible()  # fmt: skip
        expect(breaker).to_contain_text("closed")
        [b] = [b for b in api(web, "breakers") if b["queue"] == "web-brk-q"]
        assert b["state"] == "closed", b
    finally:
        host.server.shutdown()


def test_run_now_queues_a_waiting_job_from_its_row_and_its_detail(open_page: OpenPage, web: Dashboard) -> None:
    api(
        web,
        "submit",
        {"name": "hold-run-now", "queue": "web-run-now", "delay": 600, "task": {"kind": "shell", "argv": ["true"]}},
    )
    api(web, "queue_action", "web-run-now", "pause")  # once queued they stay queued: what run now did is what we see
    from_row = waiting_job(web, "run-now-row", queue="web-run-now", priority=4)
    from_detail = waiting_job(web, "run-now-detail", queue="web-run-now")
    page = open_page("/jobs")
    row(page, from_row).locator(".act-run-now").click()
    expect(row(page, from_row).locator(".job-state")).to_have_text("queued")
    job = api(web, "get_job", from_row)
    assert (job["state"], job["priority"]) == ("queued", 4), job
    expect(row(page, from_row).locator(".act-run-now")).to_be_disabled()  # queued already: nothing to run now
    detail = open_page(f"/jobs/{from_detail}")
    expect(detail.locator("#detail-state")).to_have_text("scheduled")
    detail.locator("#detail-run-now").click()
    expect(detail.locator("#detail-state")).to_have_text("queued")
    assert api(web, "get_job", from_detail)["state"] == "queued"
