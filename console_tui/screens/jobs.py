"""The Jobs view (and the Dead letters view, a Jobs view held to state:dead): a live table paged
from the server, filtered, sorted, with the job actions on the cursor row or the selection."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.widgets import Input, Static

from console_tui.actions import bindings_for
from console_tui.format import epoch, state_text
from console_tui.operations import bulk_summary, job_action
from console_tui.query import JobQuery
from console_tui.screens.base import Json, View
from console_tui.screens.dialogs import PromptScreen
from console_tui.screens.job_actions import JobActions
from console_tui.widgets.live_table import Column, LiveTable
from core.errors import JobDeckError

PAGE_SIZE = 100  # rows held: two screens; more pages with ] and [
COLUMNS = (Column("sel", " ", 1), Column("id", "ID", 7, "right"), Column("name", "NAME", 26),
           Column("queue", "QUEUE", 12), Column("state", "STATE", 11), Column("priority", "PRI", 5, "right"),
           Column("attempts", "TRIES", 6), Column("age", "AGE", 7), Column("agent", "AGENT", 18))  # fmt: skip
# The server's sorts (GET /v1/jobs?sort=): the order is the server's, so page 2 continues page 1.
SORTS = ("id", "priority", "state", "queue", "duration")


class JobsView(JobActions, View):
    """Jobs, newest first, live."""

    view_name: ClassVar[str] = "jobs"
    title: ClassVar[str] = "Jobs"
    BINDINGS = bindings_for("jobs")
    DEFAULT_CSS = """
    JobsView #bar { height: 1; background: $boost; padding: 0 1; }
    JobsView LiveTable { height: 1fr; }
    JobsView #filter { display: none; }
    JobsView #filter.open { display: block; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id or self.view_name)
        self.query_: JobQuery = JobQuery()
        self.rows: dict[int, Json] = {}
        self.selected: set[int] = set()
        self.cursors: list[int | str | None] = [None]  # the cursor of each page we went through
        self.has_next = False
        self.next_cursor: int | str | None = None
        self.total: int | None = None  # how many jobs match the filter (the server's count)
        self.total_exact = True
        self.sort_by = "id"
        self.sort_reverse = True
        self.loaded = False
        self._bar = Text()
        self.shown_at: dict[int, float] = {}  # job id -> when its row first appeared (the benchmark reads it)

    # -- layout

    def compose(self) -> ComposeResult:
        yield Static("", id="bar")
        yield LiveTable(COLUMNS, id="table")
        yield Input(
            placeholder="filter: state:queued,failed  queue:NAME  tag:TAG  name-prefix   (enter / esc)", id="filter"
        )

    @property
    def table(self) -> LiveTable:
        return self.query_one("#table", LiveTable)

    def focus_main(self) -> None:
        self.table.focus()

    def effective_query(self) -> JobQuery:
        return self.query_

    # -- data

    def _cells(self, job: Json) -> list[Text | str | int]:
        d = self.console.fmt
        return [
            Text("●", style="bold magenta") if job["id"] in self.selected else " ",
            job["id"],
            job.get("name") or "",
            job.get("queue") or "",
            state_text(job["state"], bool(job.get("cancel_requested"))),
            job.get("priority", 0),
            f"{job.get('attempt', 0)}/{job.get('max_attempts', 0)}",
            d.age(job.get("_created")),
            job.get("agent") or "",
        ]

    async def reload(self) -> None:
        params = self.effective_query().params()
        try:
            page = await self.console.client.list_jobs(**params, cursor=self.cursors[-1], limit=PAGE_SIZE,
                                                       sort=self.sort_by, order="desc" if self.sort_reverse else "asc",
                                                       count="true")  # fmt: skip
        except JobDeckError as exc:
            self.console.notify(exc.message, title="cannot list jobs", severity="error")
            return
        jobs = page["jobs"]
        self.has_next = page.get("next_cursor") is not None
        self.next_cursor = page.get("next_cursor")
        self.total, self.total_exact = page.get("total"), bool(page.get("total_exact", True))
        for j in jobs:
            j["_created"] = epoch(j.get("created_at"))
        self._replace_rows({j["id"]: j for j in jobs})
        self.loaded = True

    def _replace_rows(self, rows: dict[int, Json]) -> None:
        self.rows = rows
        self.selected &= set(rows)
        order = sorted(rows, key=self._sort_value, reverse=self.sort_reverse)
        self.table.set_rows((str(i), self._cells(rows[i])) for i in order)
        now = time.monotonic()
        for job_id in rows:
            self.shown_at.setdefault(job_id, now)
        self._update_bar()

    def _cursor_key(self) -> int | None:
        key = self.table.cursor_key
        return int(key) if key is not None else None

    def _sort_value(self, job_id: int) -> Any:
        """A row's place in the server's order (core/store/listing.py), for rows the feed adds."""
        job = self.rows[job_id]
        if self.sort_by == "id":
            return job_id
        if self.sort_by == "priority":
            return (job.get("priority", 0), job_id)
        if self.sort_by == "duration":
            return (_duration(job), job_id)
        return (str(job.get(self.sort_by) or ""), job_id)

    def _cursor_after(self, job_id: int) -> int | str:
        """The server's cursor for the page after the row `job_id` (as next_cursor writes it)."""
        if self.sort_by == "id":
            return job_id
        return f"{self._sort_value(job_id)[0]}:{job_id}"

    def _sort(self) -> None:
        self.table.sort(key=lambda key: self._sort_value(int(key)), reverse=self.sort_reverse)

    def _update_bar(self) -> None:
        flt = self.effective_query().text() or "none"
        page = len(self.cursors)
        arrow = "↓" if self.sort_reverse else "↑"
        count = f"{len(self.rows)} rows"
        if self.total is not None:
            count = f"{len(self.rows)} of {'' if self.total_exact else '~'}{self.total:,}"
        parts = [f"filter: {flt}", f"page {page}{' (more: ])' if self.has_next else ''}", count,
                 f"sort: {self.sort_by} {arrow}"]  # fmt: skip
        if self.selected:
            parts.append(f"{len(self.selected)} selected")
        bar = Text("  ·  ".join(parts), style="bold" if self.selected else "")
        if bar != self._bar:  # an update of a Static lays the whole screen out again: only when it changed
            self._bar = bar
            self.query_one("#bar", Static).update(bar, layout=False)

    # -- live updates

    def apply_events(self, events: list[Json]) -> None:
        if not self.loaded or not self.query("#table"):  # not read yet, or the app is closing: its table is gone
            return
        latest: dict[int, Json] = {}
        created: dict[int, float] = {}
        for e in events:
            job = (e.get("data") or {}).get("job")
            if not isinstance(job, dict) or "id" not in job:
                continue
            latest[job["id"]] = job
            if e.get("type") == "job.created":
                created[job["id"]] = epoch(e.get("ts")) or time.time()
        if not latest:
            return
        self._merge(latest, created)

    def _merge(self, latest: dict[int, Json], created: dict[int, float]) -> None:
        table = self.table
        query = self.effective_query()
        keep = self._cursor_key()
        added = removed = False
        unsure = False
        first_page = len(self.cursors) == 1
        now = time.monotonic()
        with table.changes():  # the cursor's row keeps its place on screen through all of it
            for job_id, summary in latest.items():
                row = self.rows.get(job_id)
                match = query.matches(summary)
                if row is not None:
                    row.update(summary)
                    if match is False and job_id != keep and job_id not in self.selected:
                        table.remove_rows(str(job_id))
                        del self.rows[job_id]
                        removed = True
                        if self.total:
                            self.total -= 1
                    else:
                        table.put(str(job_id), self._cells(row))
                elif job_id in created and first_page:
                    if match is None:
                        unsure = True
                    elif match:
                        if self.total is not None:
                            self.total += 1
                        job = dict(summary, _created=created[job_id])
                        self.rows[job_id] = job
                        table.put(str(job_id), self._cells(job))
                        self.shown_at.setdefault(job_id, now)
                        added = True
            if added:
                self._sort()
                self._trim(keep)
        if added or removed:
            self._update_bar()
        if unsure:
            self.console.reload_soon(self)

    def _trim(self, keep: int | None) -> None:
        """Keep one page: drop the rows sorted last (never the cursor's or a selected one)."""
        extra = len(self.rows) - PAGE_SIZE
        if extra <= 0:
            return
        order = sorted(self.rows, key=self._sort_value, reverse=self.sort_reverse)
        gone: list[int] = []
        for job_id in reversed(order):
            if len(gone) >= extra:
                break
            if job_id != keep and job_id not in self.selected:
                gone.append(job_id)
        for job_id in gone:
            del self.rows[job_id]
        self.table.remove_rows(*(str(i) for i in gone))
        self.has_next = True
        self.next_cursor = None  # the server's cursor named the old last row: page on from ours

    def tick(self) -> None:
        if self.console.fmt.masked or not self.display:
            return
        table = self.table
        age = self.console.fmt.age
        for job_id, job in self.rows.items():
            table.update_cell(str(job_id), "age", age(job.get("_created")))

    # -- selection, filter, sort, pages

    def current(self) -> Json | None:
        job_id = self._cursor_key()
        return self.rows.get(job_id) if job_id is not None else None

    def targets(self) -> list[Json]:
        """The selected jobs, or the one under the cursor."""
        if self.selected:
            return [self.rows[i] for i in sorted(self.selected) if i in self.rows]
        job = self.current()
        return [job] if job else []

    def target_queue(self) -> str | None:
        jobs = self.targets()
        refused = [j["queue"] for j in jobs if not self.console.identity.may_touch(j["queue"])]
        return refused[0] if refused else (jobs[0]["queue"] if jobs else None)

    @on(LiveTable.RowHighlighted)
    def _moved(self, event: LiveTable.RowHighlighted) -> None:
        self.refresh_refusals()

    @on(LiveTable.RowSelected)
    async def _chosen(self, event: LiveTable.RowSelected) -> None:
        await self.action_open()

    def _set_mark(self, job_id: int) -> None:
        self.table.update_cell(str(job_id), "sel", self._cells(self.rows[job_id])[0])

    def action_toggle_select(self) -> None:
        job = self.current()
        if job is None:
            return
        self.selected ^= {job["id"]}
        self._set_mark(job["id"])
        self.table.action_cursor_down()
        self._update_bar()
        self.refresh_refusals()

    def action_select_all(self) -> None:
        if self.selected:
            changed, self.selected = self.selected, set()
        else:
            self.selected = set(self.rows)
            changed = self.selected
        for job_id in changed:
            if job_id in self.rows:
                self._set_mark(job_id)
        if not self.selected:
            self._drop_unmatched(changed)
        self._update_bar()
        self.refresh_refusals()

    def _drop_unmatched(self, job_ids: set[int]) -> None:
        """Rows kept only because they were selected leave once they are not (their change may
        have arrived while they still were)."""
        query, keep = self.effective_query(), self._cursor_key()
        gone = [i for i in job_ids if i in self.rows and i != keep and query.matches(self.rows[i]) is False]
        for job_id in gone:
            del self.rows[job_id]
        self.table.remove_rows(*(str(i) for i in gone))

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = self.query_.text()
        box.add_class("open")
        box.focus()

    @on(Input.Submitted, "#filter")
    async def _filter_entered(self, event: Input.Submitted) -> None:
        try:
            query = JobQuery.parse(event.value)
        except ValueError as exc:
            self.console.notify(str(exc), title="filter", severity="error")
            return
        await self.set_query(query)
        event.input.remove_class("open")
        self.table.focus()

    async def set_query(self, query: JobQuery) -> None:
        """Show the jobs matching `query` (from the first page)."""
        self.query_, self.cursors, self.selected = query, [None], set()
        await self.reload()

    def on_key(self, event: Any) -> None:
        box = self.query_one("#filter", Input)
        if event.key == "escape" and box.has_class("open"):
            box.remove_class("open")
            self.table.focus()
            event.stop()
        elif event.key == "escape" and self.selected:
            self.action_select_all()  # clears
            event.stop()

    async def action_sort(self) -> None:
        self.sort_by = SORTS[(SORTS.index(self.sort_by) + 1) % len(SORTS)]
        self.sort_reverse = self.sort_by in ("id", "priority", "duration")
        await self._resort()

    async def action_sort_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        await self._resort()

    async def _resort(self) -> None:
        """Sorted on the server, from the first page (the cursor stays on its job if it is there)."""
        self.cursors = [None]
        await self.reload()

    async def action_next_page(self) -> None:
        if not self.has_next or not self.rows:
            self.console.notify("this is the last page", timeout=2)
            return
        last = sorted(self.rows, key=self._sort_value, reverse=self.sort_reverse)[-1]
        self.cursors.append(self.next_cursor if self.next_cursor is not None else self._cursor_after(last))
        await self.reload()
        self.table.move_cursor(row=0)

    async def action_prev_page(self) -> None:
        if len(self.cursors) == 1:
            return
        self.cursors.pop()
        await self.reload()
        self.table.move_cursor(row=0)

    # -- actions

    async def action_open(self) -> None:
        job = self.current()
        if job is not None:
            from console_tui.screens.detail import JobDetailScreen

            await self.console.push_screen(JobDetailScreen(job["id"]))

    async def action_new_job(self) -> None:
        from console_tui.screens.new_job import NewJobScreen

        await self.console.push_screen(NewJobScreen(queue=self.query_.queue or "default"))

    async def _act(self, action: str, verb: str, *, priority: int | None = None) -> None:
        jobs = self.targets()
        if not jobs:
            return
        client = self.console.client
        if len(jobs) == 1 or action == "run-now":  # run-now is no bulk action: one call per selected job
            for job in jobs:
                await self.call(job_action(client, job["id"], action, priority), f"{verb}: job {job['id']}")
            return
        result = await self.call(client.bulk(action, ids=[j["id"] for j in jobs], priority=priority))
        if result is not None:
            text, severity = bulk_summary(verb, result)
            self.console.notify(text, severity=severity, timeout=6)  # type: ignore[arg-type]
            self.action_select_all()  # clears the selection once acted on

    def cancel_question(self) -> tuple[str, str] | None:
        jobs = self.targets()
        if not jobs:
            return None
        what = f"job {jobs[0]['id']} ({jobs[0].get('name')})" if len(jobs) == 1 else f"{len(jobs)} selected jobs"
        return f"Cancel {what}?", "A running job is stopped first."

    async def _nudge(self, step: int) -> None:
        client = self.console.client
        for job in self.targets():
            new = int(job.get("priority", 0)) + step
            changed = await self.call(client.set_priority(job["id"], new), f"priority of job {job['id']}: {new}")
            if changed is not None:  # shown now: a second press counts from here, not from the feed's echo
                self._merge({int(job["id"]): changed}, {})

    async def action_priority_set(self) -> None:
        jobs = self.targets()
        if not jobs:
            return
        client = self.console.client

        async def submit(text: str) -> Json:
            try:
                value = int(text.strip())
            except ValueError:
                raise ValueError(f"{text!r} is not a whole number") from None
            if len(jobs) == 1:
                return await client.set_priority(jobs[0]["id"], value)
            result = await client.bulk("priority", ids=[j["id"] for j in jobs], priority=value)
            if result.get("errors") and not result.get("changed"):
                raise ValueError(bulk_summary("priority", result)[0])
            return result

        what = f"job {jobs[0]['id']}" if len(jobs) == 1 else f"{len(jobs)} selected jobs"
        self.console.push_screen(PromptScreen(f"Priority of {what}", "-1000 … 1000, higher runs first", submit,
                                              value=str(jobs[0].get("priority", 0))))  # fmt: skip

    async def action_bulk_filter(self) -> None:
        from console_tui.screens.bulk import BulkScreen

        self.console.push_screen(BulkScreen(self.effective_query()))


def _duration(job: Json) -> float:
    """The last attempt's duration, as the server sorts by it (-1 without a finished attempt)."""
    started, finished = epoch(job.get("started_at")), epoch(job.get("finished_at"))
    return finished - started if started is not None and finished is not None else -1.0


class DeadView(JobsView):
    """The dead-letter set: jobs with no attempts left; `R` replays them."""

    view_name: ClassVar[str] = "dead"
    title: ClassVar[str] = "Dead letters"
    BINDINGS = bindings_for("dead")

    def effective_query(self) -> JobQuery:
        q = self.query_
        return JobQuery(("dead",), q.queue, q.tag, q.name_prefix)

    async def action_retry(self) -> None:
        await self._act("retry", "replayed")
