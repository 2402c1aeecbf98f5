"""The web job detail shows the job's trace id (from its submit's W3C traceparent)."""

from __future__ import annotations

import httpx
from playwright.sync_api import expect

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
