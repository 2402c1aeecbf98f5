"""The Schedules view: timing, next fire times, paused, last result; pause, resume."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from rich.text import Text

from console_tui.actions import bindings_for
from console_tui.format import epoch, state_text
from console_tui.screens.base import Json
from console_tui.screens.tables import TableView
from core.errors import JobDeckError


def timing(s: Json) -> str:
    if s.get("cron"):
        return f"{s['cron']} {s.get('timezone') or 'UTC'}"
    if s.get("interval"):
        return f"every {s['interval']:g}s"
    return "once"


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
            text += policy_note(s)
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
        return str((s.get("job") or {}).get("queue") or "default") if s else None

    async def action_pause(self) -> None:
        if s := self.current():
            await self.call(self.console.client.schedule_action(s["id"], "pause"), f"schedule {s['name']} paused")
            await self.reload()

    async def action_resume(self) -> None:
        if s := self.current():
            await self.call(self.console.client.schedule_action(s["id"], "resume"), f"schedule {s['name']} resumed")
            await self.reload()
