"""One job: its spec and times, attempts with durations and errors, the live output tail and
its events; the job actions work here too. It follows the job on its own feed (with output)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, ClassVar

from rich.console import Group
from rich.pretty import Pretty
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, RichLog, Static

from console_tui.actions import bindings_for
from console_tui.format import epoch, state_text
from console_tui.screens.base import Json
from console_tui.screens.dialogs import PromptScreen
from console_tui.screens.events import event_line
from console_tui.screens.job_actions import JobActions
from console_tui.widgets.header import ConsoleHeader
from core.errors import JobDeckError

OUTCOME_STYLES = {"succeeded": "green", "running": "bold yellow", "cancelled": "dim", "interrupted": "yellow"}
RELATED_SHOWN = 10  # parents / children named in the Spec panel; past that, how many more
ATTEMPT_COLUMNS = (("attempt", "#", 3), ("agent", "AGENT", 16), ("outcome", "OUTCOME", 10), ("started", "STARTED", 9),
                   ("duration", "TOOK", 8), ("exit", "EXIT", 5), ("error", "ERROR", 40))  # fmt: skip


class JobDetailScreen(JobActions, Screen[None]):
    """Escape goes back to the list."""

    view_name: ClassVar[str] = "detail"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", "Back"), *bindings_for("detail")]
    DEFAULT_CSS = """
    JobDetailScreen #summary { height: auto; padding: 0 1; background: $boost; }
    JobDetailScreen #left { width: 1fr; }
    JobDetailScreen #right { width: 1fr; }
    JobDetailScreen #spec-box { height: 1fr; border: round $primary-darken-2; }
    JobDetailScreen #attempts { height: 10; border: round $primary-darken-2; }
    JobDetailScreen #output { height: 1fr; border: round $primary-darken-2; }
    JobDetailScreen #events { height: 1fr; border: round $primary-darken-2; }
    """

    def __init__(self, job_id: int) -> None:
        super().__init__()
        self.job_id = job_id
        self.job: Json = {}
        self.related: dict[int, Json] = {}  # the parents and children named in the Spec panel
        self.attempts_stale = False

    def compose(self) -> ComposeResult:
        yield ConsoleHeader(f"Job {self.job_id}")
        yield Static("loading …", id="summary")
        with Horizontal():
            with Vertical(id="left"):
                with VerticalScroll(id="spec-box"):
                    yield Static("", id="spec")
                table: DataTable[Any] = DataTable(id="attempts", cursor_type="row")
                for key, label, width in ATTEMPT_COLUMNS:
                    table.add_column(label, key=key, width=width)
                yield table
            with Vertical(id="right"):
                yield RichLog(id="output", max_lines=2000, wrap=True)
                yield RichLog(id="events", max_lines=500, wrap=False)
        yield Footer()

    async def on_mount(self) -> None:
        self.query_one("#spec-box").border_title = "Spec"
        self.query_one("#attempts").border_title = "Attempts"
        self.query_one("#output").border_title = "Output (live)"
        self.query_one("#events").border_title = "Events"
        client = self.console.client
        try:
            since = (await client.health())["last_seq"]
            self.job = await client.get_job(self.job_id)
            await self._load_related()
            output = await client.output(self.job_id)
            events = await client.job_events(self.job_id)
        except JobDeckError as exc:
            self.query_one("#summary", Static).update(Text(exc.message, style="bold red"))
            return
        self._show_job()
        await self._load_attempts()
        self.query_one("#output", RichLog).write(output.get("output") or Text("(no output yet)", style="dim"))
        log = self.query_one("#events", RichLog)
        for e in events[-200:]:
            log.write(event_line(e, self.console.fmt.clock_time(epoch(e.get("ts"))), compact=True))
        self.run_worker(self._follow(since), exclusive=True, group="job-feed")
        self.set_interval(0.25, self._refresh_attempts)

    async def _follow(self, since: int) -> None:
        client = self.console.client
        output = self.query_one("#output", RichLog)
        log = self.query_one("#events", RichLog)
        with contextlib.suppress(JobDeckError):
            async for e in client.events(since=since, job_ids=[self.job_id], types=["job.*", "job.output"]):
                if e.get("type") == "job.output":
                    output.write(str((e.get("data") or {}).get("text", "")).rstrip("\n"))
                    continue
                job = (e.get("data") or {}).get("job")
                if isinstance(job, dict):
                    self.job.update(job)
                    self._show_job()
                    self.refresh_refusals()
                if e.get("type") in ("job.started", "job.succeeded", "job.failed", "job.dead", "job.cancelled"):
                    self.attempts_stale = True
                log.write(event_line(e, self.console.fmt.clock_time(epoch(e.get("ts"))), compact=True))

    async def _load_related(self) -> None:
        """Name and state of the first parents and children (a fan-out root has thousands)."""
        ids = [*(self.job.get("parents") or [])[:RELATED_SHOWN], *(self.job.get("children") or [])[:RELATED_SHOWN]]
        got = await asyncio.gather(*(self.console.client.get_job(i) for i in ids), return_exceptions=True)
        self.related = {i: j for i, j in zip(ids, got, strict=True) if isinstance(j, dict)}

    def _related_text(self, ids: list[int]) -> Text:
        text = Text()
        for i in ids[:RELATED_SHOWN]:
            if text:
                text.append(", ")
            text.append(f"#{i}")
            if r := self.related.get(i):
                text.append(f" {r.get('ref') or r.get('name')} ")
                text.append_text(state_text(r["state"], bool(r.get("cancel_requested"))))
        if len(ids) > RELATED_SHOWN:
            text.append(f" and {len(ids) - RELATED_SHOWN:,} more", style="dim")
        return text

    def _show_job(self) -> None:
        j, d = self.job, self.console.fmt
        line = Text.assemble(
            (f"#{j['id']} ", "bold"), (f"{j.get('name')}   ", "bold"), state_text(j["state"], bool(j.get("cancel_requested"))),
            f"    queue {j.get('queue')}   priority {j.get('priority')}   attempt {j.get('attempt')}/{j.get('max_attempts')}",
            f"   agent {j.get('agent') or '-'}",
        )  # fmt: skip
        if j.get("last_error"):
            line.append(f"\nlast error: {j['last_error']}", style="red")
        if j.get("waiting_for"):
            line.append(f"\nwaiting for: {j['waiting_for']}", style="yellow")
        if j.get("trace_id"):  # its OpenTelemetry trace, and where to see it (JOBDECK_TRACE_URL_TEMPLATE)
            line.append(
                f"\ntrace {j['trace_id']}" + (f"   {j['trace_url']}" if j.get("trace_url") else ""), style="dim"
            )
        self.query_one("#summary", Static).update(line)
        spec = {k: j.get(k) for k in ("task", "timeout", "backoff", "tags", "labels", "idempotency_key") if j.get(k)}
        times = Text.assemble(
            ("Times\n", "bold"),
            f"  created   {d.date_time(epoch(j.get('created_at')))}\n",
            f"  run at    {d.date_time(epoch(j.get('run_at')))}\n",
            f"  finished  {d.date_time(epoch(j.get('finished_at')))}\n",
        )
        if j.get("schedule_id"):  # made by a schedule: which one, and the fire time it stands for
            times.append(f"  schedule  #{j['schedule_id']}, fire time {d.date_time(epoch(j.get('fire_time')))}\n")
        if j.get(
            "workflow_id"
        ):  # a job of a workflow: which one, its ref in it, what it waits for and what waits on it
            times.append(f"  workflow  #{j['workflow_id']}" + (f" as {j['ref']}" if j.get("ref") else "") + "\n")
        for label, key in (("parents ", "parents"), ("children", "children")):
            if j.get(key):
                times.append_text(Text.assemble(f"  {label}  ", self._related_text(list(j[key])), "\n"))
        times.append_text(Text.assemble("\n", ("Spec", "bold")))
        self.query_one("#spec", Static).update(Group(times, Pretty(spec, indent_guides=True)))

    async def _load_attempts(self) -> None:
        d = self.console.fmt
        try:
            attempts = await self.console.client.attempts(self.job_id)
        except JobDeckError:
            return
        table = self.query_one("#attempts", DataTable)
        table.clear()
        for a in attempts:
            started, finished = a.get("started_at") or a.get("claimed_at"), a.get("finished_at")
            took = (
                (finished - started) if isinstance(started, float | int) and isinstance(finished, float | int) else None
            )
            table.add_row(
                a.get("attempt"),
                a.get("agent") or "-",
                Text(a.get("outcome") or "-", style=OUTCOME_STYLES.get(a.get("outcome") or "", "red")),
                d.clock_time(started if isinstance(started, float | int) else epoch(started)),
                d.duration(took),
                str(a.get("exit_code") if a.get("exit_code") is not None else "-"),
                Text((a.get("error") or "").splitlines()[0][:200] if a.get("error") else "", style="red"),
                key=str(a.get("attempt")),
            )

    async def _refresh_attempts(self) -> None:
        if self.attempts_stale:
            self.attempts_stale = False
            await self._load_attempts()

    # -- actions on this job

    def target_queue(self) -> str | None:
        return self.job.get("queue")

    def action_back(self) -> None:
        self.dismiss(None)

    async def _act(self, action: str, verb: str) -> None:
        await self.call(self.console.client.job_action(self.job_id, action), f"{verb}: job {self.job_id}")

    def cancel_question(self) -> tuple[str, str] | None:
        return f"Cancel job {self.job_id} ({self.job.get('name')})?", "A running job is stopped first."

    async def _nudge(self, step: int) -> None:
        new = int(self.job.get("priority", 0)) + step
        await self.call(self.console.client.set_priority(self.job_id, new), f"priority of job {self.job_id}: {new}")

    async def action_priority_set(self) -> None:
        client = self.console.client

        async def submit(text: str) -> Json:
            try:
                value = int(text.strip())
            except ValueError:
                raise ValueError(f"{text!r} is not a whole number") from None
            return await client.set_priority(self.job_id, value)

        self.app.push_screen(PromptScreen(f"Priority of job {self.job_id}", "-1000 … 1000, higher runs first",
                                          submit, value=str(self.job.get("priority", 0))))  # fmt: skip
