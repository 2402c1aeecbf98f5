"""The Schedules view: timing, next fire times, paused, last result; new and edit (a form with a
live preview, screens/schedule_form.py), pause, resume, run now, backfill (a dry-run count first); and a preview panel: the cursor schedule's next fire times,
local and UTC, with what a policy or the clocks do to them."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from console_tui.actions import bindings_for
from console_tui.format import epoch, state_text
from console_tui.screens.base import Json
from console_tui.screens.dialogs import ConfirmScreen, PromptScreen
from console_tui.screens.tables import TableView
from core.errors import JobDeckError

PREVIEW_N = 5
BACKFILL_HINT = "FROM TO in the schedule's zone, e.g. 2026-11-30T00:00 2026-11-30T06:00"


def timing(s: Json) -> str:
    if s.get("cron"):
        return f"{s['cron']} {s.get('timezone') or 'UTC'}"
    if s.get("interval"):
        return f"every {s['interval']:g}s"
    return "once"


def backfill_range(text: str, zone: str) -> tuple[str, str]:
    """`FROM TO` (local times in `zone`, or instants with an offset) as two ISO instants; a
    ValueError says what is wrong (the prompt shows it under the field)."""
    parts = text.split()
    if len(parts) != 2:
        raise ValueError(f"two times, FROM and TO: {BACKFILL_HINT}")
    out = []
    for name, part in zip(("FROM", "TO"), parts, strict=True):
        try:
            t = datetime.fromisoformat(part)
        except ValueError:
            raise ValueError(f"{name} {part!r} is not a date and time: {BACKFILL_HINT}") from None
        out.append((t if t.tzinfo else t.replace(tzinfo=ZoneInfo(zone))).isoformat())
    return out[0], out[1]


def workflow_text(s: Json) -> str | None:
    """What a workflow schedule fires, as the web's schedule list says it: `workflow NAME (N jobs)`
    (None for a schedule that makes a job)."""
    wf = s.get("workflow")
    if not wf:
        return None
    n = len(wf.get("jobs") or [])
    return f"workflow {wf.get('name')} ({n} job{'' if n == 1 else 's'})"


def template_queue(s: Json) -> str:
    """The queue a schedule's runs go to: its job's, or its workflow's first job's."""
    jobs = (s.get("workflow") or {}).get("jobs") or []
    first = jobs[0] if jobs else s.get("job") or {}
    return str(first.get("queue") or "default")


def fire_time_lines(text: Text, got: Json, zone: str, fmt: Any) -> Text:
    """Append a preview's fire times to `text`: each in the schedule's zone and the viewer's, with its marks
    (DST gap or overlap, a policy's skip); the schedules panel and the schedule form both show them so."""
    for f in got.get("fire_times", []):
        t = epoch(f.get("utc"))
        text.append(f"\n  {fmt.date_time(t, zone)}  = {fmt.other_zone(t, zone)}")
        if f.get("marks"):
            text.append(f"   {' '.join(f['marks'])}", style="yellow")
    if not got.get("fire_times"):
        text.append("\n  no fire time to come", style="dim")
    return text


def preview_text(s: Json, got: Json, fmt: Any) -> Text:
    """The preview panel: the next fire times in the schedule's zone and in the viewer's (or UTC),
    with their marks (dst_gap, dst_overlap, excluded, may_skip)."""
    zone = str(got.get("timezone") or s.get("timezone") or "UTC")
    text = Text.assemble((f"#{s['id']} {s['name']}", "bold"))
    if fires := workflow_text(s):
        text.append(f" · fires {fires}", style="cyan")
    text.append(f" · next {PREVIEW_N} fire times ({zone})")
    text.append(f" · overlap {s.get('overlap', 'skip')}, catch-up {s.get('catch_up', 'latest')}", style="dim")
    if s.get("paused"):
        text.append(" · paused: none of these fires until resumed", style="bold magenta")
    return fire_time_lines(text, got, zone, fmt)


def policy_note(s: Json) -> str:
    """What the schedule's policies did, for the bar: why it paused itself, skipped and missed fire
    times, and its policies when they are not the defaults (nothing for a plain schedule)."""
    parts = []
    if s.get("paused_reason"):
        parts.append(str(s["paused_reason"]))
    if s.get("skipped"):
        parts.append(f"{s['skipped']} skipped (overlap {s.get('overlap')})")
    if s.get("missed"):
        parts.append(f"{s['missed']} missed (catch-up {s.get('catch_up')})")
    if not parts and (s.get("overlap", "skip"), s.get("catch_up", "latest")) != ("skip", "latest"):
        parts.append(f"overlap {s.get('overlap')}, catch-up {s.get('catch_up')}")
    return "".join(f" · {p}" for p in parts)


class SchedulesView(TableView):
    view_name: ClassVar[str] = "schedules"
    title: ClassVar[str] = "Schedules"
    BINDINGS = bindings_for("schedules")
    # 128 columns with the cell padding: the whole table fits a 130-column terminal, scroll bar included
    # NEXT FIRE is in the schedule's own zone, with its abbreviation (CET, EDT); `z` moves the others.
    COLUMNS = (("id", "ID", 4), ("name", "NAME", 16), ("timing", "TIMING", 25), ("status", "STATUS", 6),
               ("next", "NEXT FIRE (ITS ZONE)", 23), ("in", "IN", 9), ("last", "LAST FIRE", 24), ("fired", "FIRED", 5))  # fmt: skip
    POLL_SECONDS = 10.0
    DEFAULT_CSS = """
    SchedulesView #preview { height: 7; border-top: solid $primary-darken-2; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        yield from super().compose()
        yield Static("", id="preview")

    @on(DataTable.RowHighlighted)
    def _preview_cursor(self, event: DataTable.RowHighlighted) -> None:
        self.load_preview()

    @work(exclusive=True, group="schedule-preview")
    async def load_preview(self) -> None:
        """The cursor schedule's next fire times (the newest cursor move wins)."""
        s = self.current()
        panel = self.query_one("#preview", Static)
        if s is None:
            panel.update("")
            return
        try:
            got = await self.console.client.preview(int(s["id"]), n=PREVIEW_N)
        except JobDeckError as exc:
            panel.update(Text(f"#{s['id']}: no preview ({exc.message})", style="red"))
            return
        panel.update(preview_text(s, got, self.console.fmt))

    def key(self, item: Json) -> str:
        return str(item["id"])

    def bar(self) -> str:
        """The count, and the cursor schedule's next fire time in the viewer's zone (or UTC when the
        viewer is in the schedule's zone): the console's hover."""
        text = super().bar()
        s = self.current()
        nxt = epoch(s.get("next_fire_at")) if s else None
        if s and nxt is not None and not s.get("paused"):
            zone = s.get("timezone") or "UTC"
            d = self.console.fmt
            text += f" · #{s['id']} {s['name']} next fires {d.date_time(nxt, zone)} = {d.other_zone(nxt, zone)}"
        if s:
            fires = workflow_text(s)
            text += (f" · fires {fires}" if fires else "") + policy_note(s)
        return text

    async def fetch(self) -> list[Json]:
        return await self.console.client.schedules()

    async def enrich(self, items: list[Json]) -> None:
        """The state of each schedule's latest job: the schedule API does not carry it."""
        client = self.console.client

        async def last(s: Json) -> None:
            try:
                page = await client.list_jobs(schedule_id=s["id"], limit=1)
            except JobDeckError:
                return
            if page["jobs"]:
                s["_last_job"] = page["jobs"][0]

        await asyncio.gather(*(last(s) for s in items[:100]))

    def cells(self, s: Json) -> list[Any]:
        d = self.console.fmt
        nxt = epoch(s.get("next_fire_at"))
        job, fired = s.get("_last_job"), epoch(s.get("last_fire_at"))
        last = Text.assemble(f"#{job['id']} ", state_text(job["state"]), " ") if job else Text()
        last.append(f"{d.age(fired)} ago" if fired is not None else "" if job else "-", style="dim")
        return [
            Text(str(s["id"]), justify="right"),
            s["name"],
            timing(s),
            Text("paused", style="bold red" if s.get("paused_reason") else "bold magenta")
            if s.get("paused")
            else Text("active", style="green"),
            d.date_time(nxt, s.get("timezone") or "UTC"),
            d.until(nxt) if not s.get("paused") else "-",
            last,
            Text(str(s.get("fired", 0)), justify="right"),
        ]

    def wants(self, event: Json) -> bool:
        t = str(event.get("type", ""))
        return t.startswith("schedule.") or (event.get("job_id") is not None and t in ("job.succeeded", "job.dead"))

    def target_queue(self) -> str | None:
        s = self.current()
        return template_queue(s) if s else None

    async def action_pause(self) -> None:
        if s := self.current():
            await self.call(self.console.client.schedule_action(s["id"], "pause"), f"schedule {s['name']} paused")
            await self.reload()

    async def action_resume(self) -> None:
        if s := self.current():
            await self.call(self.console.client.schedule_action(s["id"], "resume"), f"schedule {s['name']} resumed")
            await self.reload()

    def action_new_schedule(self) -> None:
        from console_tui.screens.schedule_form import ScheduleFormScreen

        self.app.push_screen(ScheduleFormScreen(), self._saved)

    def action_edit_schedule(self) -> None:
        from console_tui.screens.schedule_form import ScheduleFormScreen

        if s := self.current():
            self.app.push_screen(ScheduleFormScreen(s), self._saved)

    def _saved(self, saved: Json | None) -> None:
        if saved is not None:
            self.run_worker(self._show_saved(saved))

    async def _show_saved(self, saved: Json) -> None:
        await self.reload()
        key = str(saved["id"])
        if key in self.items:
            self.table.move_cursor(row=self.table.get_row_index(key))
        self.load_preview()  # an edit of the cursor row: its panel shows the new timing

    async def action_run_now(self) -> None:
        if s := self.current():
            job = await self.call(self.console.client.schedule_action(s["id"], "run"))
            if job is not None:
                self.console.notify(f"job #{job['id']} made from schedule {s['name']} ({job['state']})", timeout=4)
                await self.reload()

    def action_backfill(self) -> None:
        """Ask for a range, count its fire times (dry run), then ask before making the runs."""
        s = self.current()
        if s is None:
            return
        client, zone = self.console.client, str(s.get("timezone") or "UTC")

        async def count(text: str) -> tuple[str, str, Json]:
            start, end = backfill_range(text, zone)
            return start, end, await client.backfill(int(s["id"]), start, end, dry_run=True)

        async def make(start: str, end: str) -> None:
            out = await self.call(client.backfill(int(s["id"]), start, end))
            if out is not None:
                self.console.notify(f"schedule {s['name']}: {out['made']} run(s) backfilled", timeout=4)
                await self.reload()

        def counted(got: tuple[str, str, Json] | None) -> None:
            if got is None:
                return
            start, end, dry = got
            if not dry["would_make"]:
                self.console.notify(f"nothing to backfill: all {dry['fire_times']} fire time(s) have a job", timeout=4)
                return
            detail = f"{dry['fire_times']} fire time(s) in the range, {dry['existing']} of them have a job already"

            def answered(yes: bool | None) -> None:
                if yes:
                    self.run_worker(make(start, end))

            self.app.push_screen(ConfirmScreen(f"Make {dry['would_make']} run(s) of {s['name']}?", detail, yes="Make"),
                                 answered)  # fmt: skip

        self.app.push_screen(PromptScreen(f"Backfill {s['name']}", BACKFILL_HINT, count), counted)
