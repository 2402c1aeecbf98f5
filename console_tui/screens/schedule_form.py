"""The schedule form: create a schedule or edit one (cron, interval or once; zone; overlap and
catch-up policies; jitter; pause after failures; exclusions), with its next fire times previewed
as you type, as the web form does. What the server refuses (422 names the field) is shown under
that field; an edit sends only the fields that changed, so the audit log shows what did."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Button, Input, Label, Static

from console_tui.format import epoch
from console_tui.screens.dialogs import DIALOG_CSS
from console_tui.screens.schedules import PREVIEW_N, fire_time_lines
from core.errors import InvalidInput, JobDeckError

if TYPE_CHECKING:
    from console_tui.app import ConsoleApp

PREVIEW_DEBOUNCE = 0.25  # seconds after the last key before the preview asks the server
OVERLAPS = ("skip", "buffer_one", "buffer_all", "cancel_previous", "allow")
CATCH_UPS = ("latest", "none", "all")
TIMINGS = ("cron", "interval", "at")
# (field id, label, placeholder): the ids are the API's field names (command and queue: the job's).
FIELDS = (
    ("name", "Name", "e.g. nightly-report"),
    ("cron", "Cron", "e.g. 0 2 * * 1-5   (or give Every or Once at)"),
    ("interval", "Every (s)", "seconds between runs, e.g. 300"),
    ("at", "Once at", "e.g. 2026-12-24T18:00 (in the zone)"),
    ("timezone", "Zone", "UTC"),
    ("exclude_dates", "Not on", "dates, comma-separated, e.g. 2026-12-25, 2027-01-01"),
    ("exclude_cron", "Not when", "a cron expression, e.g. * * * * 0,6 (weekends)"),
    ("command", "Command", "a shell string, e.g. ./report.sh"),
    ("queue", "Queue", "default"),
    ("overlap", "Overlap", " | ".join(OVERLAPS) + "   (default skip)"),
    ("catch_up", "Catch-up", " | ".join(CATCH_UPS) + "   (default latest)"),
    ("catch_up_window", "Window (s)", "3600: how late a missed fire time still runs (catch-up all)"),
    ("jitter", "Jitter (s)", "0: each run starts up to this long after its fire time"),
    ("pause_after_failures", "Pause after", "0 (never): failed runs in a row"),
)
NUMBERS = ("interval", "catch_up_window", "jitter")
INTEGERS = ("pause_after_failures",)
PREVIEWED = ("cron", "interval", "at", "timezone", "exclude_dates", "exclude_cron")
SUGGESTIONS = {"overlap": OVERLAPS, "catch_up": CATCH_UPS}
#: What an emptied field of an edit sends: the default, or no exclusions.
EMPTIED: dict[str, Any] = {"timezone": "UTC", "overlap": "skip", "catch_up": "latest", "catch_up_window": 3600.0,
                           "jitter": 0.0, "pause_after_failures": 0, "exclude_dates": [], "exclude_cron": ""}  # fmt: skip


def field_of(path: str | None) -> str | None:
    """The form field an API error names: `job.task.command` -> command, `exclude_dates[1]` -> exclude_dates."""
    if not path:
        return None
    parts = path.replace("[", ".").split(".")
    if parts[0] == "job":
        return "queue" if parts[1:2] == ["queue"] else "command"
    return parts[0] if parts[0] in {f for f, _, _ in FIELDS} else None


def _number(text: str) -> str:
    return f"{float(text):g}" if text else ""


def values_of(s: dict[str, Any]) -> dict[str, str]:
    """A stored schedule (the API's JSON) as the form's texts."""
    job = s.get("job") or {}
    task = job.get("task") or {}
    at = epoch(s.get("at"))
    zone = str(s.get("timezone") or "UTC")
    return {
        "name": str(s.get("name") or ""),
        "cron": str(s.get("cron") or ""),
        "interval": _number(str(s.get("interval") or "")),
        "at": datetime.fromtimestamp(at, ZoneInfo(zone)).strftime("%Y-%m-%dT%H:%M:%S") if at is not None else "",
        "timezone": zone,
        "command": str(task.get("command") or "") if task.get("kind") == "shell" else "",
        "queue": str(job.get("queue") or "default"),
        "overlap": str(s.get("overlap") or "skip"),
        "catch_up": str(s.get("catch_up") or "latest"),
        "catch_up_window": _number(str(s.get("catch_up_window") or "")),
        "jitter": _number(str(s.get("jitter") or "0")),
        "pause_after_failures": str(s.get("pause_after_failures") or 0),
        "exclude_dates": ", ".join(s.get("exclude_dates") or []),
        "exclude_cron": str(s.get("exclude_cron") or ""),
    }


def body_of(v: dict[str, str]) -> dict[str, Any]:
    """The form's texts as API fields (no job): numbers parsed, the one-time instant in its zone. A
    text that does not parse raises InvalidInput naming its field; an empty field is left out."""
    out: dict[str, Any] = {}
    for key in ("name", "cron", "timezone", "overlap", "catch_up", "exclude_cron"):
        if v.get(key):
            out[key] = v[key]
    for key in (*NUMBERS, *INTEGERS):
        text = v.get(key, "")
        if not text:
            continue
        try:
            out[key] = int(text) if key in INTEGERS else float(text)
        except ValueError:
            kind = "a whole number" if key in INTEGERS else "a number of seconds"
            raise InvalidInput(f"{key}: {text!r} is not {kind}", field=key) from None
    if v.get("at"):
        try:
            t = datetime.fromisoformat(v["at"])
        except ValueError:
            raise InvalidInput(f"at: {v['at']!r} is not a date and time such as 2026-12-24T18:00", field="at") from None
        if t.tzinfo is None:
            try:
                t = t.replace(tzinfo=ZoneInfo(v.get("timezone") or "UTC"))
            except (ZoneInfoNotFoundError, ValueError):
                raise InvalidInput(f"timezone: {v.get('timezone')!r} is not a time zone", field="timezone") from None
        out["at"] = t.isoformat()
    if v.get("exclude_dates"):
        out["exclude_dates"] = [d.strip() for d in v["exclude_dates"].split(",") if d.strip()]
    return out


def preview_panel(got: dict[str, Any] | None, problem: str | None, fmt: Any) -> Text:
    """The form's preview: the next fire times in the schedule's zone and the viewer's, with marks."""
    if problem:
        return Text(f"no preview: {problem}", style="red")
    if got is None:
        return Text("give Cron, Every or Once at to see the next fire times", style="dim")
    zone = str(got.get("timezone") or "UTC")
    text = Text(f"next {PREVIEW_N} fire times ({zone})", style="bold")
    return fire_time_lines(text, got, zone, fmt)


class ScheduleFormScreen(ModalScreen[dict[str, Any] | None]):
    """A new schedule (`schedule` None) or an edit of one; ctrl+s saves, escape closes."""

    DEFAULT_CSS = (
        """
    ScheduleFormScreen { align: center middle; }
    ScheduleFormScreen .dialog { width: 100; max-height: 95%; }
    ScheduleFormScreen .row { height: 1; margin-bottom: 1; }
    ScheduleFormScreen .row Label { width: 13; }
    ScheduleFormScreen .row Input { width: 1fr; height: 1; border: none; padding: 0 1; }
    ScheduleFormScreen .row Input:focus { background: $boost; text-style: bold; }
    ScheduleFormScreen .field-error { color: $error; padding-left: 13; height: auto; display: none; margin-bottom: 1; }
    ScheduleFormScreen .field-error.shown { display: block; }
    ScheduleFormScreen #preview { height: auto; min-height: 3; border: round $primary-darken-2; padding: 0 1;
                                  margin-bottom: 1; }
    """
        + DIALOG_CSS
    )
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close"), Binding("ctrl+s", "save", "Save")]

    def __init__(self, schedule: dict[str, Any] | None = None, queue: str = "default") -> None:
        super().__init__()
        self.schedule = schedule
        self.before = values_of(schedule) if schedule else {"queue": queue, "timezone": "UTC"}
        self.workflow = bool(schedule and schedule.get("workflow"))

    @property
    def console(self) -> ConsoleApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        title = f"Edit schedule #{self.schedule['id']}" if self.schedule else "New schedule"
        with VerticalScroll(classes="dialog"):
            yield Label(title, classes="title")
            for key, label, placeholder in FIELDS:
                if self.workflow and key in ("command", "queue"):
                    continue  # a workflow schedule's template is edited as a workflow (CLI or API)
                with Horizontal(classes="row"):
                    yield Label(label)
                    choices = SUGGESTIONS.get(key)
                    yield Input(self.before.get(key, ""), placeholder=placeholder, id=key,
                                suggester=SuggestFromList(choices) if choices else None)  # fmt: skip
                yield Static("", classes="field-error", id=f"error-{key}")
                if key == PREVIEWED[-1]:
                    yield Static("", id="preview")  # below the fields it previews
            yield Static("", classes="error", id="error")
            with Horizontal(classes="buttons"):
                yield Button("Cancel (esc)", id="close")
                yield Button("Save (ctrl+s)", id="save", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#name", Input).focus()
        self.refresh_preview()

    def values(self) -> dict[str, str]:
        return {i.id: i.value.strip() for i in self.query(Input) if i.id}

    @on(Input.Changed)
    def _typed(self, event: Input.Changed) -> None:
        if event.input.id in PREVIEWED:
            self.refresh_preview()

    @work(exclusive=True, group="schedule-form-preview")
    async def refresh_preview(self) -> None:
        """Ask the server for the next fire times of what is typed (the newest keystroke wins)."""
        import asyncio

        await asyncio.sleep(PREVIEW_DEBOUNCE)
        if not self.is_mounted:  # the form was saved or closed meanwhile
            return
        try:
            v, panel = self.values(), self.query_one("#preview", Static)
        except NoMatches:  # the app is closing: the form's widgets went during the debounce
            return
        timing = {k: v[k] for k in TIMINGS if v.get(k)}
        if len(timing) != 1:
            problem = None if not timing else f"give one of Cron, Every or Once at, not {len(timing)}"
            panel.update(preview_panel(None, problem, self.console.fmt))
            return
        try:
            body = {k: val for k, val in body_of(v).items() if k in PREVIEWED}
            got = await self.console.client.preview_timing(body, n=PREVIEW_N)
        except JobDeckError as exc:
            where = field_of(exc.field)
            panel.update(preview_panel(None, f"{where}: {exc.message}" if where else exc.message, self.console.fmt))
            return
        panel.update(preview_panel(got, None, self.console.fmt))

    def body(self) -> dict[str, Any]:
        """What to send: everything given (new), or only what changed (edit; an emptied field goes
        back to its default, an emptied exclusion is removed)."""
        v = self.values()
        out = body_of(v)
        job_changed = not self.workflow and any(v.get(k, "") != self.before.get(k, "") for k in ("command", "queue"))
        if self.schedule is None or job_changed:
            old = dict(self.schedule.get("job") or {}) if self.schedule else {}
            task = {"kind": "shell", "command": v.get("command", "")}
            if self.schedule and not v.get("command"):
                task = old.get("task") or task  # a task that is not a shell string is kept as it was
            out["job"] = {**old, "task": task, "queue": v.get("queue") or "default"}
        if self.schedule is None:
            return out
        was = body_of(self.before)
        changed = {k: val for k, val in out.items() if k == "job" or val != was.get(k)}
        for key in set(was) - set(out) - {"name", *TIMINGS}:
            changed[key] = EMPTIED[key]
        if not any(k in out for k in TIMINGS):
            raise InvalidInput("give one of Cron, Every or Once at", field="cron")
        return changed

    def _clear_errors(self) -> None:
        for e in self.query(".field-error"):
            e.remove_class("shown")
            if isinstance(e, Static):
                e.update("")
        self.query_one("#error", Static).update("")

    def show_error(self, exc: JobDeckError) -> None:
        """Under the field it names, else under the form (and a notification, like every refusal)."""
        key = field_of(exc.field)
        if key is not None and self.query(f"#error-{key}"):
            box = self.query_one(f"#error-{key}", Static)
            box.update(f"↑ {exc.message}")
            box.add_class("shown")
            self.query_one(f"#{key}", Input).focus()
        else:
            self.query_one("#error", Static).update(exc.message)
            self.console.notify(exc.message, title=f"refused ({exc.status})", severity="error", timeout=8)

    async def action_save(self) -> None:
        self._clear_errors()
        client = self.console.client
        try:
            body = self.body()
            if self.schedule is None:
                saved = await client.create_schedule(body)
            elif body:
                saved = await client.update_schedule(int(self.schedule["id"]), body)
            else:
                saved = self.schedule
        except JobDeckError as exc:
            self.show_error(exc)
            return
        verb = "created" if self.schedule is None else "saved" if body else "unchanged"
        self.console.notify(f"schedule #{saved['id']} {saved['name']} {verb}", timeout=4)
        self.dismiss(saved)

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        await self.action_save()

    async def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            await self.action_save()
        else:
            self.dismiss(None)

    def action_close(self) -> None:
        self.dismiss(None)
