"""The Schedules page's state: the list, the create-and-edit form with its as-you-type preview,
and a schedule's details (run history, next fire times, backfill with a dry-run count)."""

from __future__ import annotations

import shlex
import time
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import reflex as rx

from core import timetext
from core.errors import InvalidInput, JobDeckError
from web_ui.format import STATE_COLOR, ago, clock, clock_both, task_text, when
from web_ui.hub import Change, touched
from web_ui.state import AppState, page_state, set_editable

ZONES = ("UTC", "Europe/Paris", "Europe/London", "Europe/Berlin", "America/New_York", "America/Chicago",
         "America/Los_Angeles", "America/Sao_Paulo", "Asia/Tokyo", "Asia/Kolkata", "Asia/Singapore",
         "Australia/Sydney")  # fmt: skip
FORM_FIELDS = ("name", "cron", "interval", "at", "timezone", "command", "queue", "overlap", "catch_up",
               "catch_up_window", "jitter", "pause_after_failures", "exclude_dates", "exclude_cron")  # fmt: skip
TIMINGS = ("cron", "interval", "once")  # the form's timing kinds: a cron field, every N seconds, one time
OVERLAPS = ("skip", "buffer_one", "buffer_all", "cancel_previous", "allow")
CATCH_UPS = ("latest", "none", "all")
# the form's policy text fields: (state var, API field, parse); a blank one means the default on create
NUMBERS = (("s_window", "catch_up_window", float), ("s_jitter", "jitter", float),
           ("s_pause_after", "pause_after_failures", int))  # fmt: skip
BACKFILL_FIELDS = ("from", "to", "overlap")
BACKFILL_OVERLAPS = ("buffer_all", "allow")
HISTORY = 20  # runs shown in a schedule's details
UPCOMING = 10  # fire times previewed there
# the form's fields the preview depends on: set_previewed sets only these, then previews again
PREVIEWED = ("s_timing", "s_cron", "s_interval", "s_at", "s_timezone", "s_exclude_dates", "s_exclude_cron")


def _fire_time(t: dict[str, Any], zone: str) -> dict[str, str]:
    """A previewed fire time for the form: its local day and time, the UTC time beside it when the
    zone is not UTC, and its marks (excluded, a DST gap or repeat)."""
    local = datetime.fromisoformat(str(t.get("local")))
    utc = datetime.fromisoformat(str(t.get("utc")).replace("Z", "+00:00"))
    marks = [str(m).replace("_", " ") for m in t.get("marks") or []]
    return {"local": local.strftime("%a %Y-%m-%d %H:%M"),
            "utc": "" if zone == "UTC" else utc.strftime("%H:%M UTC"),
            "marks": f"({', '.join(marks)})" if marks else ""}  # fmt: skip


def _command_text(s: dict[str, Any]) -> str:
    """A schedule's shell task as the form's Command field shows it ('' for another kind of task)."""
    task = (s.get("job") or {}).get("task") or {}
    return shlex.join(task.get("argv") or []) or str(task.get("command") or "")


def _local_at(at: Any, zone: str) -> str:
    """A one-time schedule's `at` as the form's date-time field shows it, in the schedule's zone."""
    if not at:
        return ""
    instant = datetime.fromisoformat(str(at).replace("Z", "+00:00"))
    return instant.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%dT%H:%M")


def _number_text(v: Any) -> str:
    """A policy number as the form shows it: 3600.0 -> '3600', None -> ''."""
    return "" if v is None else f"{v:g}"


def _duration(job: dict[str, Any]) -> str:
    start, end = when(job.get("started_at")), when(job.get("finished_at"))
    return "" if start is None or end is None else timetext.duration(end - start)


@page_state("/schedules", editable=("s_name", "s_command", "s_queue", "s_window", "s_jitter", "s_pause_after"))
class SchedulesState(AppState):
    """The Schedules page."""

    def set_field(self, name: str, value: str) -> None:
        set_editable(self, name, value)

    schedules: list[dict[str, str]] = []
    editing: int = 0  # the schedule being edited; 0: a new one
    form_open: bool = False
    s_name: str = ""
    s_timing: str = "cron"  # one of TIMINGS
    s_cron: str = "*/5 * * * *"
    s_interval: str = ""  # seconds
    s_at: str = ""  # YYYY-MM-DDTHH:MM in s_timezone
    s_timezone: str = "UTC"
    s_command: str = ""
    s_queue: str = "default"
    s_command_hint: str = "./nightly.sh"
    s_overlap: str = "skip"
    s_catch_up: str = "latest"
    s_window: str = ""
    s_jitter: str = ""
    s_pause_after: str = ""
    s_exclude_dates: str = ""  # comma separated YYYY-MM-DD
    s_exclude_cron: str = ""
    _original: dict[str, Any] = {}  # the schedule being edited, as read: an edit sends only what changed
    errors: dict[str, str] = {}
    fire_times: list[dict[str, str]] = []  # local, utc, marks

    async def fetch(self) -> None:
        self.schedules = [
            {
                "id": str(s["id"]),
                "name": s["name"],
                "timing": s.get("cron") or (f"every {s['interval']:g}s" if s.get("interval") else f"at {s.get('at')}"),
                "timezone": str(s.get("timezone") or ""),
                "task": _template_text(s),
                "queue": str((s.get("job") or {}).get("queue") or _first_queue(s)),
                "next": clock(s.get("next_fire_at"), str(s.get("timezone") or "UTC")),  # the schedule's zone
                "next_both": clock_both(s.get("next_fire_at"), str(s.get("timezone") or "UTC"), self.zone_name()),
                "next_in": ago(s.get("next_fire_at")),
                "fired": str(s.get("fired", 0)),
                "skipped": str(s.get("skipped", 0)),
                "missed": str(s.get("missed", 0)),
                "overlap": str(s.get("overlap") or "skip"),
                "catch_up": str(s.get("catch_up") or "latest"),
                "paused": "1" if s.get("paused") else "",
                "paused_reason": str(s.get("paused_reason") or ""),
            }
            for s in await self.client().schedules()
        ]

    async def live_refresh(self, changes: list[Change] | None) -> None:
        if touched(changes, "schedule."):
            await self.fetch()
        if self.detail_open and touched(changes, "job.", "schedule."):
            await self._load_detail()

    # -- a schedule's details: history, next fire times, backfill

    detail_open: bool = False
    detail_id: int = 0
    detail_name: str = ""
    detail_policy: str = ""
    history: list[dict[str, str]] = []
    upcoming: list[dict[str, str]] = []
    bf_from: str = ""
    bf_to: str = ""
    bf_overlap: str = "buffer_all"
    bf_result: str = ""
    bf_errors: dict[str, str] = {}
    bf_zone: str = "UTC"  # the zone the backfill's from and to are read in: the schedule's

    async def open_detail(self, schedule_id: str) -> Any:
        self.detail_id, self.bf_result, self.bf_errors = int(schedule_id), "", {}
        try:
            await self._load_detail()
        except JobDeckError as exc:
            return self.failed(exc)
        self.detail_open = True
        return None

    def set_detail_open(self, value: bool) -> None:
        self.detail_open = value

    async def _load_detail(self) -> None:
        client = self.client()
        s = await client.get_schedule(self.detail_id)
        zone = str(s.get("timezone") or "UTC")
        self.detail_name = str(s["name"])
        self.detail_policy = (f"overlap {s.get('overlap')}, catch-up {s.get('catch_up')}"
                              f" (window {s.get('catch_up_window', 0):g}s), jitter {s.get('jitter', 0):g}s"
                              + (f", pauses after {s['pause_after_failures']} failed runs"
                                 if s.get("pause_after_failures") else ""))  # fmt: skip
        jobs = (await client.list_jobs(schedule_id=self.detail_id, limit=HISTORY))["jobs"]
        self.history = [
            {
                "id": str(j["id"]),
                "fire_time": clock(j.get("fire_time"), zone) if j.get("fire_time") else "manual run",
                "state": str(j["state"]),
                "color": STATE_COLOR.get(str(j["state"]), "gray"),
                "duration": _duration(j),
            }
            for j in jobs
        ]
        got = await client.preview(self.detail_id, n=UPCOMING)
        self.upcoming = [{"local": clock(t.get("utc"), zone), "utc": clock(t.get("utc"), "UTC"),
                          "marks": ", ".join(t.get("marks") or [])} for t in got.get("fire_times", [])]  # fmt: skip
        if not self.bf_from and not self.bf_to:  # a day back to now, in the schedule's zone
            now = time.time()
            self.bf_from = datetime.fromtimestamp(now - 86400, ZoneInfo(zone)).strftime("%Y-%m-%dT%H:%M")
            self.bf_to = datetime.fromtimestamp(now, ZoneInfo(zone)).strftime("%Y-%m-%dT%H:%M")
        self.bf_zone = zone

    def set_bf_from(self, value: str) -> None:
        self.bf_from, self.bf_result = value, ""

    def set_bf_to(self, value: str) -> None:
        self.bf_to, self.bf_result = value, ""

    def set_bf_overlap(self, value: str) -> None:
        self.bf_overlap, self.bf_result = value, ""

    def _instant(self, text: str, field: str) -> str | None:
        """A datetime-local value (the schedule's zone) as an ISO instant, or None with the reason set."""
        try:
            local = datetime.fromisoformat(text.strip())
        except ValueError:
            self.bf_errors = {**self.bf_errors, field: f"{field}: a date and time such as 2026-11-30T09:00"}
            return None
        if local.tzinfo is None:
            local = local.replace(tzinfo=ZoneInfo(self.bf_zone))
        return local.isoformat()

    async def backfill(self, dry_run: bool) -> Any:
        """Count (dry run) or make the runs of every past fire time in the range that has none."""
        self.bf_errors, self.bf_result = {}, ""
        start, end = self._instant(self.bf_from, "from"), self._instant(self.bf_to, "to")
        if start is None or end is None:
            return None
        try:
            out = await self.client().backfill(self.detail_id, start, end, self.bf_overlap, dry_run=dry_run)
        except InvalidInput as exc:
            field = (exc.field or "").split(".")[-1]
            self.bf_errors = {field if field in BACKFILL_FIELDS else "from": exc.message}
            return None
        except JobDeckError as exc:
            return self.failed(exc)
        n, existing = int(out["fire_times"]), int(out["existing"])
        if dry_run:
            self.bf_result = (f"would make {out['would_make']} run(s): {n} fire time(s) in the range, "
                              f"{existing} of them have a job already")  # fmt: skip
            return None
        self.bf_result = f"made {out['made']} run(s) ({existing} of {n} fire times had a job already)"
        await self._load_detail()
        return rx.toast.success(f"schedule {self.detail_name}: {out['made']} run(s) backfilled", duration=2000)

    async def run_now_detail(self) -> Any:
        try:
            job = await self.client().schedule_action(self.detail_id, "run")
        except JobDeckError as exc:
            return self.failed(exc)
        await self._load_detail()
        return rx.toast.success(f"job {job['id']} made from {self.detail_name}", duration=2000)

    async def load(self) -> Any:
        return await self._fetch_or_fail()

    # -- the form

    def _timing(self) -> tuple[dict[str, Any], str]:
        """The form's timing as the API takes it (`{}` while its field is blank), or why it cannot be read."""
        if self.s_timing == "interval":
            text = self.s_interval.strip()
            try:
                return ({"interval": float(text)} if text else {}), ""
            except ValueError:
                return {}, "interval: a number of seconds, e.g. 90"
        if self.s_timing == "once":
            text = self.s_at.strip()
            try:
                at = datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(self.s_timezone)) if text else None
            except ValueError:
                return {}, "at: a date and time, e.g. 2027-01-31T09:30"
            return ({"at": at.isoformat()} if at else {}), ""
        return ({"cron": self.s_cron} if self.s_cron.strip() else {}), ""

    async def preview(self) -> None:
        """The next five fire times of the timing in the chosen zone, the exclusions applied
        (an excluded one is marked), or the server's reason why not."""
        fields = ("cron", "interval", "at", "timezone", "exclude_dates", "exclude_cron")
        self.errors = {k: v for k, v in self.errors.items() if k not in fields}
        kind = {"cron": "cron", "interval": "interval", "once": "at"}[self.s_timing]
        given, unreadable = self._timing()
        if unreadable:
            self.errors, self.fire_times = {**self.errors, kind: unreadable}, []
            return
        if not given:
            self.fire_times = []
            return
        timing: dict[str, Any] = {**given, "timezone": self.s_timezone}
        if dates := self._exclude_dates():
            timing["exclude_dates"] = dates
        if self.s_exclude_cron.strip():
            timing["exclude_cron"] = self.s_exclude_cron.strip()
        try:
            got = await self.client().preview_timing(timing, n=5)
        except InvalidInput as exc:
            field = (exc.field or "").split("[")[0]
            self.errors = {**self.errors, field if field in fields else kind: exc.message}
            self.fire_times = []
            return
        except JobDeckError as exc:
            if exc.status in (404, 405):
                self.errors = {**self.errors, kind: "this core cannot preview fire times yet"}
            else:
                self.errors = {**self.errors, kind: exc.message}
            self.fire_times = []
            return
        self.fire_times = [_fire_time(t, self.s_timezone) for t in got.get("fire_times", [])]

    def _exclude_dates(self) -> list[str]:
        return [d for d in self.s_exclude_dates.replace(",", " ").split() if d]

    async def set_previewed(self, name: str, value: str) -> None:
        """Set a field the fire-time preview depends on (PREVIEWED) and preview again."""
        if name == "s_timing":
            value = value if value in TIMINGS else "cron"
        if name in PREVIEWED:
            setattr(self, name, value)
            await self.preview()

    def set_overlap(self, value: str) -> None:
        self.s_overlap = value

    def set_catch_up(self, value: str) -> None:
        self.s_catch_up = value

    def _fill(self, s: dict[str, Any]) -> None:
        """The form's fields from a schedule as the API shows it (defaults for a new one)."""
        job = s.get("job") or {}
        task = job.get("task") or {}
        self.s_name, self.s_cron, self.s_timezone = s.get("name", ""), s.get("cron") or "", s.get("timezone") or "UTC"
        self.s_timing = (
            "cron" if s.get("cron") else "interval" if s.get("interval") else "once" if s.get("at") else "cron"
        )
        self.s_interval = _number_text(s.get("interval"))
        self.s_at = _local_at(s.get("at"), self.s_timezone)
        self.s_command = _command_text(s)
        self.s_queue = str(job.get("queue") or "default")
        kind = task.get("kind") if job else "workflow" if s.get("workflow") else None
        self.s_command_hint = (
            "./nightly.sh"
            if kind in (None, "shell")
            else (f"a {kind} task: kept as it is unless you type a command here")
        )
        self.s_overlap, self.s_catch_up = str(s.get("overlap") or "skip"), str(s.get("catch_up") or "latest")
        self.s_window, self.s_jitter, self.s_pause_after = (
            _number_text(s.get(k)) for k in ("catch_up_window", "jitter", "pause_after_failures")
        )
        self.s_exclude_dates = ", ".join(s.get("exclude_dates") or [])
        self.s_exclude_cron = str(s.get("exclude_cron") or "")

    async def open_new(self) -> None:
        self.editing, self.form_open, self.errors, self._original = 0, True, {}, {}
        self._fill({"cron": "*/5 * * * *"})
        await self.preview()

    async def open_edit(self, schedule_id: str) -> Any:
        try:
            s = await self.client().get_schedule(int(schedule_id))
        except JobDeckError as exc:
            return self.failed(exc)
        self.editing, self.form_open, self.errors, self._original = int(schedule_id), True, {}, s
        self._fill(s)
        await self.preview()
        return None

    def set_form_open(self, value: bool) -> None:
        self.form_open = value

    def _body(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The schedule the form describes (for an edit: only the fields that differ from the
        schedule as read), and the fields that cannot be read."""
        errors: dict[str, str] = {}
        if not self.s_name.strip():
            errors["name"] = "a name is needed"
        try:
            argv = shlex.split(self.s_command)
        except ValueError as exc:
            argv, errors["command"] = [], f"cannot split the command: {exc}"
        orig = self._original
        templated = not self.editing or "workflow" not in orig or orig.get("job") is not None
        was = _command_text(self._original)
        if not argv and "command" not in errors and templated and (not self.editing or self.s_command != was):
            errors["command"] = "a command is needed"
        timing, unreadable = self._timing()
        kind = {"cron": "cron", "interval": "interval", "once": "at"}[self.s_timing]
        if unreadable or not timing:
            errors[kind] = unreadable or {"cron": "a cron field is needed, e.g. */5 * * * *",
                                          "interval": "interval: how many seconds between runs",
                                          "at": "at: when it runs (a date and time)"}[kind]  # fmt: skip
        body: dict[str, Any] = {"name": self.s_name.strip(), **timing, "timezone": self.s_timezone,
                                "overlap": self.s_overlap, "catch_up": self.s_catch_up,
                                "exclude_cron": self.s_exclude_cron.strip(),
                                "exclude_dates": self._exclude_dates()}  # fmt: skip
        for var, field, parse in NUMBERS:
            text = str(getattr(self, var)).strip()
            if text:
                try:
                    body[field] = parse(text)
                except ValueError:
                    errors[field] = f"{field}: a {'whole ' if parse is int else ''}number of " + (
                        "runs" if parse is int else "seconds"
                    )
        if not self.editing:
            body["job"] = {"queue": self.s_queue.strip() or "default", "task": {"kind": "shell", "argv": argv}}
            if not body["exclude_cron"]:
                del body["exclude_cron"]
            return body, errors
        changes = {k: v for k, v in body.items() if v != (orig.get(k) if k != "exclude_cron" else orig.get(k) or "")}
        if "at" in changes and orig.get("at") and _local_at(orig["at"], self.s_timezone) == self.s_at.strip():
            del changes["at"]  # the same minute as read (the form shows minutes; the API answers with seconds)
        job = dict(orig.get("job") or {})
        if not templated:  # a workflow schedule: the form edits its timing and policies, not its workflow
            return changes, errors
        if self.s_command != was or (self.s_queue.strip() or "default") != str(job.get("queue") or "default"):
            if self.s_command != was:  # the task as typed; unchanged text keeps the task as it was (http, python...)
                job["task"] = {"kind": "shell", "argv": argv}
            job["queue"] = self.s_queue.strip() or "default"
            changes["job"] = job
        return changes, errors

    async def save(self) -> Any:
        body, errors = self._body()
        if errors:
            self.errors = errors
            return None
        client = self.client()
        try:
            if self.editing:
                if body:
                    await client.update_schedule(self.editing, body)
            else:
                await client.create_schedule(body)
        except InvalidInput as exc:
            field = (exc.field or "").split(".")[-1].split("[")[0]
            field = "command" if field in ("argv", "task", "job") else field
            self.errors = {field if field in FORM_FIELDS else "name": exc.message}
            return None
        except JobDeckError as exc:
            return self.failed(exc)
        self.form_open = False
        await self.fetch()
        return rx.toast.success(f"schedule {self.s_name.strip()} saved", duration=2000)

    async def act(self, schedule_id: str, action: str) -> Any:
        client = self.client()
        try:
            if action == "delete":
                await client.delete_schedule(int(schedule_id))
            else:
                await client.schedule_action(int(schedule_id), action)
        except JobDeckError as exc:
            return self.failed(exc)
        await self.fetch()
        return rx.toast.success(f"schedule {schedule_id}: {action} done", duration=2000)


def _template_text(s: dict[str, Any]) -> str:
    """What the schedule fires: its job's task, or its workflow (name and size)."""
    wf = s.get("workflow")
    if wf:
        return f"workflow {wf.get('name')} ({len(wf.get('jobs') or [])} jobs)"
    return task_text((s.get("job") or {}).get("task") or {})


def _first_queue(s: dict[str, Any]) -> str:
    jobs = (s.get("workflow") or {}).get("jobs") or []
    return str(jobs[0].get("queue") or "default") if jobs else ""
