"""The job detail screen shows the job's trace id (from the submit's W3C traceparent)."""

from __future__ import annotations

import httpx

from core.client import JobDeckClient
from tests.conftest import ServerProcess, until
from tests.console_tui.conftest import console
from tests.console_tui.test_jobs import focus_job, jobs_view, plain

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


async def test_the_detail_shows_the_trace_id(node: ServerProcess, api: JobDeckClient) -> None:
    async with httpx.AsyncClient(base_url=node.url) as http:
        made = await http.post("/v1/jobs", json={"task": {"kind": "shell", "command": "true"}, "queue": "trace-q"},
                               headers={"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"})  # fmt: skip
    job_id = made.json()["id"]
    await api.wait_for(job_id, timeout=30)
    async with console(node.url) as (app, pilot):
        await focus_job(jobs_view(app), job_id)
        await pilot.press("enter")
        screen = await until(lambda: app.screen if type(app.screen).__name__ == "JobDetailScreen" else None, 5)
        await until(lambda: f"trace {TRACE}" in plain(screen.query_one("#summary").content), 15, "the trace id")
