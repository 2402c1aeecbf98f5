"""The Event log: every change as it commits, newest at the bottom, filtered by `/` text."""

from __future__ import annotations

from collections import deque
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.widgets import Input, RichLog, Static

from console_tui.actions import bindings_for
from console_tui.format import STATE_STYLES, epoch
from console_tui.screens.base import Json, View
from core.errors import JobDeckError

KEEP = 2000
HISTORY = 200  # events committed before the view first opens that it shows too


def event_line(e: Json, clock_time: str, *, compact: bool = False) -> Text:
    """One event as one line: time, seq, type, job, queue, what changed."""
    data = e.get("data") or {}
    job = data.get("job") or {}
    kind = str(e.get("type", ""))
    state = kind.removeprefix("job.")
    detail = ""
    if data.get("error"):
        detail = str(data["error"])[:120]
    elif kind == "job.priority" and job:
        detail = f"{data.get('from')} → {job.get('priority')}"
    elif data.get("agent"):
        detail = str(data["agent"] if isinstance(data["agent"], str) else data["agent"].get("name"))
    elif job.get("name"):
        detail = str(job["name"])
    elif data.get("schedule"):
        detail = str(data["schedule"].get("name"))
    if compact:  # one job's events: no job id or queue, they are all the same
        return Text.assemble((f"{clock_time} ", "dim"), (f"{kind:<22}", STATE_STYLES.get(state, "bold")), detail)
    return Text.assemble(
        (f"{clock_time} ", "dim"),
        (f"{e.get('seq') or '-':>8} ", "dim"),
        (f"{kind:<22}", STATE_STYLES.get(state, "bold")),
        (f"{'#' + str(e['job_id']) if e.get('job_id') else '':>9} ", ""),
        (f"{e.get('queue') or '':<14}", "cyan"),
        detail,
    )


def merge_by_seq(history: list[Json], live: list[Json]) -> list[Json]:
    """Both lists in seq order, each event once; an event without a seq (ephemeral) stays after the
    event it followed in `live`."""
    keyed: list[tuple[tuple[int, int], Json]] = []
    last = 0
    for e in live:
        if e.get("seq") is None:
            keyed.append(((last, 1), e))
        else:
            last = int(e["seq"])
            keyed.append(((last, 0), e))
    have = {e["seq"] for e in live if e.get("seq") is not None}
    keyed += [((int(e["seq"]), 0), e) for e in history if e.get("seq") is not None and e["seq"] not in have]
    keyed.sort(key=lambda pair: pair[0])
    return [e for _, e in keyed]


class EventsView(View):
    view_name: ClassVar[str] = "events"
    title: ClassVar[str] = "Events"
    BINDINGS = bindings_for("events")
    DEFAULT_CSS = """
    EventsView #bar { height: 1; background: $boost; padding: 0 1; }
    EventsView RichLog { height: 1fr; padding: 0 1; }
    EventsView #filter { display: none; }
    EventsView #filter.open { display: block; }
    """

    def __init__(self) -> None:
        super().__init__(id=self.view_name)
        self.events: deque[Json] = deque(maxlen=KEEP)
        self.text = ""
        self.unshown: list[Json] = []
        self.newest = 0  # the highest seq kept: the feed can hand over again what the history read already had
        self.history_loaded = False

    def compose(self) -> ComposeResult:
        yield Static("", id="bar")
        yield RichLog(id="log", max_lines=KEEP, wrap=False, auto_scroll=True)
        yield Input(placeholder="show events whose line contains … (enter / esc)", id="filter")

    def focus_main(self) -> None:
        self.query_one("#log", RichLog).focus()

    def _line(self, e: Json) -> Text:
        return event_line(e, self.console.fmt.clock_time(epoch(e.get("ts"))))

    def _passes(self, line: Text) -> bool:
        return not self.text or self.text.lower() in line.plain.lower()

    def apply_events(self, events: list[Json]) -> None:
        events = [e for e in events if e.get("seq") is None or e["seq"] > self.newest]
        self.newest = max([self.newest, *(e["seq"] for e in events if e.get("seq") is not None)])
        self.events.extend(events)
        if not self.display:
            self.unshown.extend(events)
            del self.unshown[:-KEEP]
            return
        self._write(events)

    def _write(self, events: list[Json]) -> None:
        lines = [line for line in map(self._line, events) if self._passes(line)]
        if lines:
            self.query_one("#log", RichLog).write(Text("\n").join(lines))
        self._bar()

    def _bar(self) -> None:
        shown = f"filter: {self.text}" if self.text else "all events"
        self.query_one("#bar", Static).update(f"{shown}  ·  last {len(self.events)} kept  ·  newest at the bottom")

    async def _load_history(self) -> None:
        """Read the last HISTORY events from the server and merge them under the live ones, by seq."""
        since = max(0, self.console.connection.last_seq - HISTORY)
        try:
            history = [e async for e in self.console.client.events(since=since, until_caught_up=True, reconnect=False)]
        except JobDeckError as exc:
            self.console.notify(exc.message, title="could not read the recent events", severity="error", timeout=8)
            return
        self.history_loaded = True
        self.events = deque(merge_by_seq(history, list(self.events)), maxlen=KEEP)
        self.newest = max([self.newest, *(e["seq"] for e in history if e.get("seq") is not None)])

    async def reload(self) -> None:
        if not self.history_loaded:
            await self._load_history()
        log = self.query_one("#log", RichLog)
        log.clear()
        self.unshown = []
        self._write(list(self.events))

    def on_show(self) -> None:
        if self.unshown:
            pending, self.unshown = self.unshown, []
            self._write(pending)
        self._bar()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = self.text
        box.add_class("open")
        box.focus()

    @on(Input.Submitted, "#filter")
    async def _filter_entered(self, event: Input.Submitted) -> None:
        self.text = event.value.strip()
        event.input.remove_class("open")
        await self.reload()
        self.focus_main()
