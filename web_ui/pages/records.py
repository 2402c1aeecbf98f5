"""Dead letters (replay one or all) and the audit log (admins)."""

from __future__ import annotations

import json
from typing import Any

import reflex as rx

from core.errors import JobDeckError
from web_ui.format import ago, clock
from web_ui.hub import Change, touched
from web_ui.layout import layout
from web_ui.state import AppState, page_state, set_editable

PAGE_SIZE = 50


@page_state("/dead", editable=("f_queue",))
class DeadState(AppState):
    """The Dead letters page: jobs with no attempts left."""

    def set_field(self, name: str, value: str) -> None:
        set_editable(self, name, value)

    rows: list[dict[str, str]] = []
    f_queue: str = ""
    cursors: list[int] = []
    cursor: int = 0
    next_cursor: int = 0

    def _filter(self) -> dict[str, Any]:
        flt: dict[str, Any] = {"state": "dead"}
        if self.f_queue.strip():
            flt["queue"] = self.f_queue.strip()
        return flt

    async def fetch(self) -> None:
        page = await self.client().list_jobs(**self._filter(), cursor=self.cursor or None, limit=PAGE_SIZE)
        self.rows = [
            {
                "id": str(j["id"]),
                "name": str(j.get("name") or ""),
                "queue": str(j.get("queue") or ""),
                "attempts": f"{j.get('attempt', 0)}/{j.get('max_attempts', 0)}",
                "died": ago(j.get("finished_at")),
                "error": str(j.get("last_error") or "")[:200],
                "refuse": self.may("jobs.write", j.get("queue")),
            }
            for j in page["jobs"]
        ]
        self.next_cursor = int(page.get("next_cursor") or 0)

    async def live_refresh(self, changes: list[Change] | None) -> None:
        if touched(changes, "job.dead", "job.queued", "job.scheduled", "job.cancelled", "job.created"):
            await self.fetch()

    async def load(self) -> Any:
        return await self._fetch_or_fail()

    async def set_queue(self, value: str) -> Any:
        self.f_queue, self.cursor, self.cursors = value, 0, []
        return await self.load()

    async def next_page(self) -> Any:
        if self.next_cursor:
            self.cursors, self.cursor = [*self.cursors, self.cursor], self.next_cursor
        return await self.load()

    async def prev_page(self) -> Any:
        if self.cursors:
            self.cursor, self.cursors = self.cursors[-1], self.cursors[:-1]
        return await self.load()

    async def replay(self, job_id: str) -> Any:
        try:
            await self.client().job_action(int(job_id), "retry")
        except JobDeckError as exc:
            return self.failed(exc)
        await self.fetch()
        return rx.toast.success(f"job {job_id} replayed", duration=2000)

    async def replay_all(self) -> Any:
        try:
            got = await self.client().bulk("retry", filter=self._filter())
        except JobDeckError as exc:
            return self.failed(exc)
        await self.fetch()
        return rx.toast.success(f"replayed {got.get('changed', 0)} of {got.get('matched', 0)} dead jobs")


@page_state("/audit", editable=("f_actor", "f_action"))
class AuditState(AppState):
    """The Audit log page (admins)."""

    def set_field(self, name: str, value: str) -> None:
        set_editable(self, name, value)

    entries: list[dict[str, str]] = []
    f_actor: str = ""
    f_action: str = ""
    cursors: list[str] = []
    cursor: str = ""
    next_cursor: str = ""
    note: str = ""

    async def fetch(self) -> None:
        if self.may("audit.read"):
            self.entries, self.note = [], self.may("audit.read")
            return
        try:
            got = await self.client().audit(actor=self.f_actor.strip() or None, action=self.f_action.strip() or None,
                                            cursor=self.cursor or None, limit=PAGE_SIZE)  # fmt: skip
        except JobDeckError as exc:
            if exc.status not in (404, 405):
                raise
            self.entries, self.note = [], "this core keeps no audit log yet"
            return
        self.note = ""
        self.entries = [
            {
                "when": clock(e.get("at"), self.zone_name()),
                "actor": f"{e.get('actor') or ''} ({e.get('role') or '-'})",
                "action": str(e.get("action") or ""),
                "target": str(e.get("target") or ""),
                "source": " ".join(str(e[k]) for k in ("ip", "via") if e.get(k)),
                "outcome": str(e.get("outcome") or ""),
                "detail": str(e.get("message") or json.dumps(e.get("after") or e.get("before") or {}))[:160],
            }
            for e in got.get("entries", [])
        ]
        self.next_cursor = str(got.get("next_cursor") or "")

    async def live_refresh(self, changes: list[Change] | None) -> None:
        if not self.cursor:  # the first page follows new entries
            await self.fetch()

    async def load(self) -> Any:
        return await self._fetch_or_fail()

    async def apply_filter(self) -> Any:
        self.cursor, self.cursors = "", []
        return await self.load()

    async def next_page(self) -> Any:
        if self.next_cursor:
            self.cursors, self.cursor = [*self.cursors, self.cursor], self.next_cursor
        return await self.load()

    async def prev_page(self) -> Any:
        if self.cursors:
            self.cursor, self.cursors = self.cursors[-1], self.cursors[:-1]
        return await self.load()


def _pager(state: Any) -> rx.Component:
    return rx.hstack(
        rx.button("Previous", on_click=state.prev_page, disabled=state.cursors.length() == 0, variant="soft", size="1"),
        rx.button("Next", on_click=state.next_page, disabled=~state.next_cursor.to(bool), variant="soft", size="1"),
        spacing="2",
    )


def dead_page() -> rx.Component:
    """The Dead letters page."""

    def row(j: Any) -> rx.Component:
        return rx.table.row(
            rx.table.cell(rx.link(j["id"], href="/jobs/" + j["id"])),
            rx.table.cell(j["name"]),
            rx.table.cell(j["queue"]),
            rx.table.cell(j["attempts"]),
            rx.table.cell(j["died"]),
            rx.table.cell(rx.text(j["error"], size="1")),
            rx.table.cell(
                rx.button(
                    "Replay",
                    size="1",
                    variant="soft",
                    on_click=DeadState.replay(j["id"]),
                    disabled=j["refuse"] != "",
                    title=j["refuse"],
                    aria_label="Replay job " + j["id"],
                )
            ),
            id="dead-row-" + j["id"],
        )

    return layout(
        "Dead letters",
        rx.hstack(
            rx.el.label("Queue", html_for="dead-queue", style={"font_size": "0.85rem"}),
            rx.input(
                value=DeadState.f_queue,
                on_change=DeadState.set_queue,
                id="dead-queue",
                placeholder="any",
                debounce_timeout=300,
            ),
            rx.spacer(),
            rx.button(
                "Replay all matching",
                on_click=DeadState.replay_all,
                disabled=~AppState.can_write_jobs,
                color_scheme="orange",
                id="replay-all",
            ),
            align="center",
            width="100%",
        ),
        rx.table.root(
            rx.table.header(
                rx.table.row(
                    *(
                        rx.table.column_header_cell(h)
                        for h in ("ID", "Name", "Queue", "Attempts", "Died", "Last error", "")
                    )
                )
            ),
            rx.table.body(rx.foreach(DeadState.rows, row)),
            width="100%",
            id="dead-table",
        ),
        rx.cond(DeadState.rows.length() == 0, rx.text("No dead jobs.", color_scheme="gray"), rx.fragment()),
        _pager(DeadState),
    )


def audit_page() -> rx.Component:
    """The Audit log page."""
    keys = ("when", "actor", "action", "target", "source", "outcome", "detail")
    return layout(
        "Audit log",
        rx.form(
            rx.hstack(
                rx.el.label("Actor", html_for="audit-actor", style={"font_size": "0.85rem"}),
                rx.input(
                    value=AuditState.f_actor, id="audit-actor", on_change=lambda v: AuditState.set_field("f_actor", v)
                ),
                rx.el.label("Action", html_for="audit-action", style={"font_size": "0.85rem"}),
                rx.input(
                    value=AuditState.f_action,
                    id="audit-action",
                    placeholder="e.g. jobs.cancel",
                    on_change=lambda v: AuditState.set_field("f_action", v),
                ),
                rx.button("Filter", type="submit", variant="soft"),
                align="center",
            ),
            on_submit=lambda _: AuditState.apply_filter(),
        ),
        rx.cond(AuditState.note != "", rx.callout(AuditState.note, icon="info", color_scheme="gray"), rx.fragment()),
        rx.table.root(
            rx.table.header(rx.table.row(*(rx.table.column_header_cell(k.capitalize()) for k in keys))),
            rx.table.body(rx.foreach(AuditState.entries, lambda e: rx.table.row(*(rx.table.cell(e[k]) for k in keys)))),
            width="100%",
            size="1",
            id="audit-table",
        ),
        _pager(AuditState),
    )
