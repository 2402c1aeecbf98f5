"""Job detail: the spec, attempts, the live output tail, the job's events and its actions."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import reflex as rx

from core.errors import JobDeckError, NotFound
from web_ui.format import STATE_COLOR, ago, clock, job_row, task_text
from web_ui.hub import HUB, Change
from web_ui.layout import layout
from web_ui.state import AppState, page_state, set_editable

ROUTE = "/jobs/[job_ref]"  # not [job_id]: Reflex makes the route argument a var of the root state
OUTPUT_POLL = 0.5  # seconds between output reads while the job runs
RELATED_SHOWN = 10  # parents / children named with their state; past that, how many more


@page_state(ROUTE, editable=("prio_value",))
class JobDetailState(AppState):
    """The Job detail page."""

    def set_field(self, name: str, value: str) -> None:
        set_editable(self, name, value)

    job_id: int = 0
    found: bool = True
    job: dict[str, str] = {}
    spec_json: str = ""
    attempts: list[dict[str, str]] = []
    events: list[dict[str, str]] = []
    output: str = ""
    running: bool = False
    prio_value: str = ""
    workflow: dict[str, str] = {}  # {id, label} of the job's workflow, or empty
    parents: list[dict[str, str]] = []  # {id, label, state, color}, the first RELATED_SHOWN
    children: list[dict[str, str]] = []
    more_parents: str = ""  # "and 9,990 more" past RELATED_SHOWN
    more_children: str = ""

    async def _related(self, ids: list[int]) -> tuple[list[dict[str, str]], str]:
        """Name and state of the first of `ids` (a fan-out root has thousands of children)."""
        shown = ids[:RELATED_SHOWN]
        got = await asyncio.gather(*(self.client().get_job(i) for i in shown), return_exceptions=True)
        rows = []
        for i, j in zip(shown, got, strict=True):
            ok = isinstance(j, dict)
            state = str(j["state"]) if ok else "?"
            rows.append({"id": str(i), "label": f"#{i} {(j.get('ref') or j.get('name')) if ok else ''}".strip(),
                         "state": state, "color": STATE_COLOR.get(state, "gray")})  # fmt: skip
        more = f"and {len(ids) - len(shown):,} more" if len(ids) > len(shown) else ""
        return rows, more

    def _id_from_url(self) -> int:
        tail = self.router.url.path.rstrip("/").rsplit("/", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    async def fetch(self) -> None:
        client = self.client()
        try:
            job = await client.get_job(self.job_id)
        except NotFound:
            self.found, self.job = False, {}
            return
        attempts, events, out = await asyncio.gather(
            client.attempts(self.job_id), client.job_events(self.job_id), client.output(self.job_id)
        )
        self.found = True
        zone = self.zone_name()
        row = job_row(job, self.may("jobs.write", job.get("queue")), zone)
        row.update(task=task_text(job.get("task") or {}), run_at_clock=clock(job.get("run_at"), zone),
                   created_clock=clock(job.get("created_at"), zone), color=STATE_COLOR.get(job["state"], "gray"),
                   trace_id=str(job.get("trace_id") or "-"), trace_url=str(job.get("trace_url") or ""))  # fmt: skip
        if job.get("waiting_for"):  # whole here (a list cuts it): a fair queue's adds where its key's turn is
            row["note"] = str(job["waiting_for"])
        self.job = row
        self.prio_value = self.prio_value or row["priority"]
        self.spec_json = json.dumps({k: job.get(k) for k in ("task", "queue", "priority", "max_attempts", "timeout",
                                                             "backoff", "tags", "labels", "idempotency_key",
                                                             "schedule_id")}, indent=2)  # fmt: skip
        self.attempts = [
            {
                "attempt": str(a["attempt"]),
                "agent": str(a.get("agent") or ""),
                "started": clock(a.get("started_at"), zone),
                "took": f"{(a['finished_at'] - a['started_at']):.3f}s"
                if a.get("finished_at") and a.get("started_at")
                else "",
                "outcome": str(a.get("outcome") or "running"),
                "error": str(a.get("error") or ""),
                "exit": "" if a.get("exit_code") is None else str(a["exit_code"]),
            }
            for a in attempts
        ]
        self.events = [
            {
                "seq": str(e.get("seq")),
                "when": ago(e.get("ts")),
                "type": str(e.get("type")),
                "detail": json.dumps({k: v for k, v in (e.get("data") or {}).items() if k != "job"})[:200],
            }
            for e in reversed(events)
        ]
        self.output = str(out.get("output") or "")
        self.running = job["state"] == "running"
        wf = job.get("workflow_id")
        self.workflow = (
            {"id": str(wf), "label": f"#{wf}" + (f" as {job['ref']}" if job.get("ref") else "")} if wf else {}
        )
        (self.parents, self.more_parents), (self.children, self.more_children) = await asyncio.gather(
            self._related(list(job.get("parents") or [])), self._related(list(job.get("children") or []))
        )

    async def live_refresh(self, changes: list[Change] | None) -> None:
        if changes is None or any(c.job_id == self.job_id for c in changes):
            await self.fetch()

    async def load(self) -> Any:
        self.job_id, self.prio_value, self.output = self._id_from_url(), "", ""
        try:
            await self.fetch()
        except JobDeckError as exc:
            return self.failed(exc)
        return JobDetailState.follow_output

    @rx.event(background=True)
    async def follow_output(self) -> None:
        """While the job runs and this page shows it, keep its output tail current."""
        async with self:
            job_id, token, client = self.job_id, self.router.session.client_token, self.client()
        while HUB.session_connected(token):
            try:
                out = await client.output(job_id)
            except JobDeckError:
                return
            async with self:
                if self.job_id != job_id or self.router.url.path.rstrip("/").rsplit("/", 1)[-1] != str(job_id):
                    return
                self.output = str(out.get("output") or "")
                if not out.get("running"):
                    return
            await asyncio.sleep(OUTPUT_POLL)

    async def act(self, action: str) -> Any:
        try:
            await self.client().job_action(self.job_id, action)
        except JobDeckError as exc:
            return self.failed(exc)
        await self.fetch()
        return [rx.toast.success(f"job {self.job_id}: {action} done", duration=2000), JobDetailState.follow_output]

    async def save_priority(self) -> Any:
        try:
            await self.client().set_priority(self.job_id, int(self.prio_value))
        except ValueError:
            return rx.toast.error("the priority must be a whole number")
        except JobDeckError as exc:
            return self.failed(exc)
        await self.fetch()
        return rx.toast.success(f"job {self.job_id}: priority {self.prio_value}", duration=2000)


def _trace(j: Any) -> rx.Component:
    """The job's trace id: a link to the trace UI when the core has a trace_url_template."""
    link = rx.link(j["trace_id"], href=j["trace_url"], is_external=True)
    return rx.box(rx.cond(j["trace_url"] != "", link, rx.text(j["trace_id"])), id="job-trace")


def _related(kind: str, rows: Any, more: Any) -> rx.Component:
    """Parents or children: each a link to its job, with its state."""
    return rx.flex(
        rx.foreach(
            rows,
            lambda r: rx.link(
                rx.hstack(rx.text(r["label"]), rx.badge(r["state"], color_scheme=r["color"]), spacing="1"),
                href="/jobs/" + r["id"],
                id=f"job-{kind}-" + r["id"],
            ),
        ),
        rx.text(more, color_scheme="gray", size="2"),
        wrap="wrap",
        spacing="3",
        id=f"job-{kind}",
    )


def _kv(label: str, value: Any) -> rx.Component:
    return rx.data_list.item(rx.data_list.label(label), rx.data_list.value(value))


def _button(label: str, action: str, flag: str, icon: str) -> rx.Component:
    return rx.button(
        rx.icon(icon, size=14),
        label,
        variant="soft",
        disabled=JobDetailState.job[flag] == "",
        on_click=JobDetailState.act(action),
        title=rx.cond(JobDetailState.job["refuse"] != "", JobDetailState.job["refuse"], label),
        id=f"detail-{action}",
    )


def _details() -> rx.Component:
    j = JobDetailState.job
    return rx.vstack(
        rx.hstack(
            rx.badge(j["state"], color_scheme=j["color"], size="3", id="detail-state"),
            rx.text(j["name"], weight="bold", size="4"),
            rx.spacer(),
            rx.cond(
                j["state"] == "paused",
                _button("Resume", "resume", "resumable", "play"),
                _button("Pause", "pause", "pausable", "pause"),
            ),
            _button("Cancel", "cancel", "cancellable", "x"),
            _button(rx.cond(j["state"] == "dead", "Replay", "Retry"), "retry", "retryable", "rotate-ccw"),
            _button("Run now", "run-now", "runnable", "fast-forward"),
            rx.form(
                rx.hstack(
                    rx.el.label("Priority", html_for="detail-priority", style={"font_size": "0.85rem"}),
                    rx.input(
                        value=JobDetailState.prio_value,
                        id="detail-priority",
                        type="number",
                        width="5rem",
                        on_change=lambda v: JobDetailState.set_field("prio_value", v),
                    ),
                    rx.button("Set", type="submit", variant="soft", disabled=j["prioritisable"] == ""),
                    align="center",
                ),
                on_submit=lambda _: JobDetailState.save_priority(),
            ),
            width="100%",
            align="center",
            wrap="wrap",
        ),
        rx.card(
            rx.heading("Output", rx.cond(JobDetailState.running, " (live)", ""), size="3", as_="h2"),
            # column-reverse keeps the view at the newest line, as a tail does, unless you scroll up
            rx.box(
                rx.el.pre(
                    JobDetailState.output, style={"white_space": "pre-wrap", "font_size": "0.8rem", "margin": "0"}
                ),
                id="job-output",
                tab_index=0,
                aria_label="job output",
                role="log",
                style={
                    "max_height": "20rem",
                    "overflow": "auto",
                    "display": "flex",
                    "flex_direction": "column-reverse",
                },
            ),
            width="100%",
        ),
        rx.grid(
            rx.card(
                rx.data_list.root(
                    _kv("Task", rx.code(j["task"])),
                    _kv("Queue", j["queue"]),
                    _kv("Priority", j["priority"]),
                    _kv("Attempts", j["attempts"]),
                    _kv("Created", j["created_clock"]),
                    _kv("Runs at", j["run_at_clock"]),
                    _kv("Agent", j["agent"]),
                    _kv("Trace", _trace(j)),
                    _kv("Note", j["note"]),
                    rx.cond(
                        JobDetailState.workflow.contains("id"),
                        _kv(
                            "Workflow",
                            rx.link(
                                JobDetailState.workflow["label"],
                                href="/workflows/" + JobDetailState.workflow["id"],
                                id="job-workflow",
                            ),
                        ),
                    ),
                    rx.cond(
                        JobDetailState.parents.length() > 0,
                        _kv("Parents", _related("parents", JobDetailState.parents, JobDetailState.more_parents)),
                    ),
                    rx.cond(
                        JobDetailState.children.length() > 0,
                        _kv("Children", _related("children", JobDetailState.children, JobDetailState.more_children)),
                    ),
                )
            ),
            rx.card(
                rx.heading("Spec", size="3", as_="h2"),
                rx.code_block(JobDetailState.spec_json, language="json", wrap_long_lines=True),
            ),
            columns=rx.breakpoints(initial="1", md="2"),
            spacing="4",
            width="100%",
        ),
        rx.card(
            rx.heading("Attempts", size="3", as_="h2"),
            rx.table.root(
                rx.table.header(
                    rx.table.row(
                        *(
                            rx.table.column_header_cell(h)
                            for h in ("#", "Agent", "Started", "Took", "Outcome", "Exit", "Error")
                        )
                    )
                ),
                rx.table.body(
                    rx.foreach(
                        JobDetailState.attempts,
                        lambda a: rx.table.row(
                            *(
                                rx.table.cell(a[k])
                                for k in ("attempt", "agent", "started", "took", "outcome", "exit", "error")
                            )
                        ),
                    )
                ),
                size="1",
                width="100%",
            ),
            width="100%",
        ),
        rx.card(
            rx.heading("Events", size="3", as_="h2"),
            rx.table.root(
                rx.table.header(
                    rx.table.row(*(rx.table.column_header_cell(h) for h in ("Seq", "When", "Type", "Detail")))
                ),
                rx.table.body(
                    rx.foreach(
                        JobDetailState.events,
                        lambda e: rx.table.row(*(rx.table.cell(e[k]) for k in ("seq", "when", "type", "detail"))),
                    )
                ),
                size="1",
                width="100%",
                id="job-events",
            ),
            width="100%",
        ),
        width="100%",
        spacing="4",
    )


def job_detail_page() -> rx.Component:
    """The Job detail page (`/jobs/ID`)."""
    return layout(
        "Job " + JobDetailState.job_id.to_string(),
        rx.link("← all jobs", href="/jobs", size="2"),
        rx.cond(JobDetailState.found, _details(), rx.callout("No job with this id.", icon="info", color_scheme="gray")),
    )
