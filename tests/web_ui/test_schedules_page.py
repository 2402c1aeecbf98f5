"""The Schedules page in chromium against a real core: each schedule's policies and fired / skipped /
missed counts, its details (next fire times in its zone, run history, run now) and a backfill with
a dry-run count, a bad range refused with the field named, and each fire time made once."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Page, expect

from tests.web_ui.conftest import Dashboard
from tests.web_ui.test_dashboard import api

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
OpenPage = Callable[..., Page]
PARIS = ZoneInfo("Europe/Paris")


def local(t: datetime) -> str:
    return t.astimezone(PARIS).strftime("%Y-%m-%dT%H:%M")


def test_policies_counts_details_run_now_and_a_backfill_counted_then_made_once(
    open_page: OpenPage, web: Dashboard, tmp_path: Path
) -> None:
    s = api(web, "create_schedule", {
        "name": "web-hourly", "cron": "0 * * * *", "timezone": "Europe/Paris", "overlap": "buffer_one",
        "catch_up": "all", "job": {"queue": "web-sched", "task": {"kind": "shell", "argv": ["true"]}},
    })  # fmt: skip
    page = open_page("/schedules")
    row = page.locator(f"#schedule-row-{s['id']}")
    expect(row.locator(".schedule-policy")).to_have_text("buffer_one · catch-up all")
    expect(row.locator(".schedule-counts")).to_have_text("0 / 0 / 0")
    page.screenshot(path=str(tmp_path / "list.png"))
    row.get_by_role("button", name="Details").click()
    detail = page.locator("#schedule-detail")
    expect(detail.locator("#sd-policy")).to_contain_text("overlap buffer_one, catch-up all")
    expect(detail.locator("#sd-upcoming tbody tr")).to_have_count(10)
    first = detail.locator("#sd-upcoming tbody tr").first
    expect(first).to_contain_text(":00:00 CET")  # on the hour, in Paris (winter)
    expect(detail.locator("#sd-no-history")).to_be_visible()

    detail.locator("#sd-run").click()  # run now: a job at once, outside the timetable
    expect(detail.locator("#sd-history tbody tr")).to_have_count(1)
    expect(detail.locator("#sd-history .sd-outcome")).to_have_text("succeeded", timeout=30_000)
    expect(detail.locator("#sd-history tbody tr").first).to_contain_text("manual run")
    expect(row.locator(".schedule-counts")).to_have_text("1 / 0 / 0")  # live, no reload

    hour = datetime.now(PARIS).replace(minute=0, second=0, microsecond=0)
    page.fill("#bf-from", local(hour - timedelta(hours=1)))
    page.fill("#bf-to", local(hour - timedelta(hours=3)))
    page.locator("#bf-count").click()
    expect(page.locator("#bf-error-from")).to_contain_text("is after to")  # reversed: refused, named
    page.fill("#bf-from", local(hour - timedelta(hours=3)))
    page.fill("#bf-to", local(hour - timedelta(hours=1)))
    page.locator("#bf-count").click()
    expect(page.locator("#bf-result")).to_have_text(
        "would make 3 run(s): 3 fire time(s) in the range, 0 of them have a job already"
    )
    assert len(api(web, "list_jobs", schedule_id=s["id"])["jobs"]) == 1, "a dry run makes nothing"
    page.locator("#bf-run").click()
    expect(page.locator("#bf-result")).to_have_text("made 3 run(s) (0 of 3 fire times had a job already)")
    expect(detail.locator("#sd-history tbody tr")).to_have_count(4)
    made = api(web, "list_jobs", schedule_id=s["id"])["jobs"]
    want = sorted((hour - timedelta(hours=h)).timestamp() for h in (1, 2, 3))
    got = sorted(datetime.fromisoformat(j["fire_time"]).timestamp() for j in made if j["fire_time"])
    assert got == want, f"fire times made {got}, expected {want}"
    page.screenshot(path=str(tmp_path / "schedules.png"), full_page=True)
    print("screenshots in", tmp_path)
    page.locator("#bf-count").click()
    expect(page.locator("#bf-result")).to_have_text(
        "would make 0 run(s): 3 fire time(s) in the range, 3 of them have a job already"
    )
    page.locator("#bf-run").click()
    expect(page.locator("#bf-result")).to_have_text("made 0 run(s) (3 of 3 fire times had a job already)")
    assert len(api(web, "list_jobs", schedule_id=s["id"])["jobs"]) == 4, "each fire time at most once"


def test_the_form_sets_policies_and_an_edit_changes_only_what_was_changed(
    open_page: OpenPage, web: Dashboard, tmp_path: Path
) -> None:
    page = open_page("/schedules")
    page.locator("#new-schedule").click()
    form = page.get_by_role("dialog")
    form.get_by_label("Name").fill("web-policies")
    form.get_by_label("Cron (min hour day month weekday)").fill("*/10 * * * *")
    form.get_by_label("Command").fill("echo policies")
    page.locator("#s-overlap").click()
    page.get_by_role("option", name="buffer_one").click()
    page.locator("#s-catch-up").click()
    page.get_by_role("option", name="all").click()
    form.get_by_label("Catch-up window (s)").fill("-5")
    form.get_by_label("Jitter (s)").fill("30")
    form.get_by_label("Pause after failures").fill("3")
    form.get_by_label("Skip these dates").fill("2026-12-25, 2027-01-01")
    form.get_by_label("Skip fire times matching cron").fill("*/20 * * * *")  # every other */10 time
    expect(page.locator("#fire-times li", has_text="(excluded)").first).to_be_visible(timeout=10_000)
    form.get_by_label("Skip fire times matching cron").fill("* * * * 6,0")
    page.locator("#s-save").click()
    expect(page.locator("#s-error-catch_up_window")).to_contain_text("catch_up_window")  # the server's reason
    page.screenshot(path=str(tmp_path / "form.png"))
    assert not [s for s in api(web, "schedules") if s["name"] == "web-policies"], "a refused form writes nothing"
    form.get_by_label("Catch-up window (s)").fill("600")
    page.locator("#s-save").click()
    row = page.locator("#schedules-table tr", has_text="web-policies")
    expect(row.locator(".schedule-policy")).to_have_text("buffer_one · catch-up all")
    saved = next(s for s in api(web, "schedules") if s["name"] == "web-policies")
    got = {k: saved[k] for k in ("overlap", "catch_up", "catch_up_window", "jitter", "pause_after_failures",
                                 "exclude_dates", "exclude_cron")}  # fmt: skip
    assert got == {"overlap": "buffer_one", "catch_up": "all", "catch_up_window": 600, "jitter": 30,
                   "pause_after_failures": 3, "exclude_dates": ["2026-12-25", "2027-01-01"],
                   "exclude_cron": "* * * * 6,0"}, got  # fmt: skip

    # a schedule made elsewhere with an HTTP task and a job timeout: editing its cron in the form
    # changes the cron and nothing else (the task stays an HTTP call, the job keeps its fields)
    http = api(web, "create_schedule", {
        "name": "web-http", "cron": "0 * * * *", "overlap": "allow",
        "job": {"queue": "web-sched", "timeout": 42, "max_attempts": 7,
                "task": {"kind": "http", "url": "http://127.0.0.1:9/ping"}},
    })  # fmt: skip
    page.reload()
    page.locator("#schedules-table tr", has_text="web-http").get_by_role("button", name="Edit").click()
    cron = form.get_by_label("Cron (min hour day month weekday)")
    expect(cron).to_have_value("0 * * * *")
    cron.fill("15 * * * *")
    page.locator("#s-save").click()
    expect(page.locator("#schedules-table tr", has_text="web-http")).to_contain_text("15 * * * *")
    after = api(web, "get_schedule", http["id"])
    assert after["cron"] == "15 * * * *" and after["overlap"] == "allow", after
    assert after["job"] == http["job"], (after["job"], http["job"])


def test_the_form_makes_interval_and_one_time_schedules_and_switches_an_edit_to_cron(
    open_page: OpenPage, web: Dashboard
) -> None:
    page = open_page("/schedules")
    page.locator("#new-schedule").click()
    form = page.get_by_role("dialog")
    form.get_by_label("Name").fill("web-every")
    form.get_by_label("Command").fill("echo every")
    page.locator("#s-timing").click()
    page.get_by_role("option", name="interval").click()
    form.get_by_label("Every (seconds)").fill("soon")
    expect(page.locator("#s-error-interval")).to_contain_text("a number of seconds")
    page.locator("#s-save").click()
    assert not [s for s in api(web, "schedules") if s["name"] == "web-every"], "an unreadable interval writes nothing"
    form.get_by_label("Every (seconds)").fill("90")
    expect(page.locator("#fire-times li")).to_have_count(5, timeout=10_000)
    page.locator("#s-save").click()
    row = page.locator("#schedules-table tr", has_text="web-every")
    expect(row).to_contain_text("every 90s")
    every = next(s for s in api(web, "schedules") if s["name"] == "web-every")
    assert every["interval"] == 90 and every.get("cron") is None, every

    # one time, in Paris: stored as that instant
    at = (datetime.now(PARIS) + timedelta(days=2)).replace(hour=9, minute=30, second=0, microsecond=0)
    page.locator("#new-schedule").click()
    form.get_by_label("Name").fill("web-once")
    form.get_by_label("Command").fill("echo once")
    page.locator("#s-timing").click()
    page.get_by_role("option", name="once").click()
    page.locator("#s-timezone").click()
    page.get_by_role("option", name="Europe/Paris").click()
    form.get_by_label("At (in the time zone)").fill(local(at))
    expect(page.locator("#fire-times li")).to_have_count(1, timeout=10_000)
    page.locator("#s-save").click()
    expect(page.locator("#schedules-table tr", has_text="web-once")).to_be_visible()
    once = next(s for s in api(web, "schedules") if s["name"] == "web-once")
    assert datetime.fromisoformat(once["at"].replace("Z", "+00:00")) == at, (once["at"], at.isoformat())

    # editing the interval schedule into a cron one sends the cron and keeps the rest
    row.get_by_role("button", name="Edit").click()
    expect(form.get_by_label("Every (seconds)")).to_have_value("90")
    page.locator("#s-timing").click()
    page.get_by_role("option", name="cron").click()
    form.get_by_label("Cron (min hour day month weekday)").fill("0 6 * * *")
    page.locator("#s-save").click()
    expect(row).to_contain_text("0 6 * * *")
    after = api(web, "get_schedule", every["id"])
    assert after["cron"] == "0 6 * * *" and after.get("interval") is None and after["job"] == every["job"], after
