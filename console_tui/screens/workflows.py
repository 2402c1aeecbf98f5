"""Workflows: the list (state, progress; pause, resume, cancel the whole workflow) and one workflow
as a layered text tree of its jobs with live states, the job actions working on the selected node."""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from console_tui.actions import bindings_for
from console_tui.format import epoch, state_text
from console_tui.screens.base import Json
from console_tui.screens.dialogs import ConfirmScreen
from console_tui.screens.job_actions import JobActions
from console_tui.screens.tables import TableView
from console_tui.widgets.header import ConsoleHeader
from core.client import workflow_layers
from core.errors import JobDeckError

WF_STYLE = {"running": "bold yellow", "succeeded": "green", "failed": "bold red", "cancelled": "dim"}
ORDER = ("succeeded", "skipped", "running", "queued", "scheduled", "failed", "blocked", "paused", "dead", "cancelled")


def progress(counts: Json) -> str:
    """'3 succeeded · 1 running · 6 blocked'."""
    return " · ".join(f"{counts[s]} {s}" for s in ORDER if counts.get(s))


def tree_rows(nodes: list[Json]) -> list[tuple[int, Json]]:
    """(layer, node) in drawing order: layer after layer, as the web graph lays them out."""
    return [(depth, n) for depth, layer in enumerate(workflow_layers(nodes)) for n in layer]


class WorkflowsView(TableView):
    view_name: ClassVar[str] = "workflows"
    title: ClassVar[str] = "Workflows"
    BINDINGS = bindings_for("workflows")
    COLUMNS = (("id", "ID", 5), ("name", "NAME", 22), ("state", "STATE", 10), ("jobs", "JOBS", 6),
               ("progress", "PROGRESS", 48), ("started", "STARTED", 9))  # fmt: skip

    def key(self, item: Json) -> str:
        return str(item["id"])

    async def fetch(self) -> list[Json]:
        return list((await self.console.client.workflows(limit=200))["workflows"])

    def cells(self, w: Json) -> list[Any]:
        state = Text(w["state"], style=WF_STYLE.get(w["state"], ""))
        if w.get("paused"):
            state.append(" paused", style="bold magenta")
        return [Text(str(w["id"]), justify="right"), w["name"], state, Text(str(w.get("total", 0)), justify="right"),
                progress(w.get("counts") or {}), self.console.fmt.age(epoch(w.get("created_at"))) + " ago"]  # fmt: skip

    def wants(self, event: Json) -> bool:
        t = str(event.get("type", ""))
        return t.startswith("workflow.") or t in ("job.succeeded", "job.dead", "job.cancelled", "job.running")

    def target_queue(self) -> str | None:
        w = self.current()
        return (w.get("queues") or [None])[0] if w else None

    async def _act(self, action: str, verb: str) -> None:
        if w := self.current():
            await self.call(self.console.client.workflow_action(w["id"], action), f"workflow {w['name']} {verb}")
            await self.reload()

    async def action_pause(self) -> None:
        await self._act("pause", "paused")

    async def action_resume(self) -> None:
        await self._act("resume", "resumed")

    async def action_cancel(self) -> None:
        w = self.current()
        if not w:
            return

        async def confirmed(yes: bool | None) -> None:
            if yes:
                await self._act("cancel", "cancelled")

        self.console.push_screen(ConfirmScreen(f"Cancel workflow {w['id']} ({w['name']})?",
                                               "Every job that has not ended is cancelled; running ones are stopped.",
                                               yes="Cancel"), confirmed)  # fmt: skip

    @on(DataTable.RowSelected)
    async def _chosen(self, event: DataTable.RowSelected) -> None:  # enter on a row
        await self.action_open()

    async def action_open(self) -> None:
        if w := self.current():
            await self.console.push_screen(WorkflowScreen(int(w["id"])))


NODE_COLUMNS = (("tree", "JOB", 40), ("state", "STATE", 10), ("id", "ID", 7), ("queue", "QUEUE", 12),
                ("parents", "WAITS FOR", 30), ("why", "WHY", 40))  # fmt: skip


class WorkflowScreen(JobActions, Screen[None]):
    """One workflow, layer by layer; escape goes back. Its jobs' events redraw it live."""

    view_name: ClassVar[str] = "workflow"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", "Back"), *bindings_for("workflow")]
    DEFAULT_CSS = """
    WorkflowScreen #wf-summary { height: auto; padding: 0 1; background: $boost; }
    WorkflowScreen DataTable { height: 1fr; }
    """

    def __init__(self, workflow_id: int) -> None:
        super().__init__()
        self.workflow_id = workflow_id
        self.wf: Json = {}
        self.nodes: dict[str, Json] = {}
        self.stale = False

    def compose(self) -> ComposeResult:
        yield ConsoleHeader(f"Workflow {self.workflow_id}")
        yield Static("loading …", id="wf-summary")
        table: DataTable[Any] = DataTable(id="nodes", cursor_type="row", zebra_stripes=True)
        for key, label, width in NODE_COLUMNS:
            table.add_column(label, key=key, width=width)
        yield table
        yield Footer()

    async def on_mount(self) -> None:
        self.query_one("#nodes", DataTable).focus()
        since = (await self.call(self.console.client.health()) or {}).get("last_seq")
        await self.reload()
        self.run_worker(self._follow(since), exclusive=True, group="workflow-feed")
        self.set_interval(0.2, self._maybe_reload)

    async def _follow(self, since: int | None) -> None:
        ids = {int(k) for k in self.nodes}
        with contextlib.suppress(JobDeckError):
            async for e in self.console.client.events(since=since, types=["job.*", "workflow.*"]):
                wf = (e.get("data") or {}).get("workflow") or {}
                if e.get("job_id") in ids or wf.get("id") == self.workflow_id:
                    self.stale = True

    async def _maybe_reload(self) -> None:
        if self.stale:
            self.stale = False
            await self.reload()

    async def reload(self) -> None:
        wf = await self.call(self.console.client.get_workflow(self.workflow_id))
        if wf is None:
            return
        self.wf = wf
        table = self.query_one("#nodes", DataTable)
        refs = {n["id"]: n.get("ref") or str(n["id"]) for n in wf["nodes"]}
        rows = tree_rows(wf["nodes"])
        new: dict[str, Json] = {}
        for depth, n in rows:
            key = str(n["id"])
            new[key] = n
            label = Text("  " * depth + ("└─ " if depth else "● "), style="dim")
            label.append(str(n.get("ref") or n["name"]))
            cells = [label, state_text(n["state"]), Text(str(n["id"]), justify="right"), n["queue"],
                     ", ".join(refs.get(p, str(p)) for p in n["parents"]),
                     Text(n.get("last_error") or "", style="dim", no_wrap=True, overflow="ellipsis")]  # fmt: skip
            if key in self.nodes:
                for (col, _, _), value in zip(NODE_COLUMNS, cells, strict=True):
                    table.update_cell(key, col, value)
            else:
                table.add_row(*cells, key=key)
        for gone in set(self.nodes) - set(new):
            table.remove_row(gone)
        self.nodes = new
        state = Text.assemble(("workflow ", ""), (f"#{wf['id']} {wf['name']}  ", "bold"),
                              (wf["state"], WF_STYLE.get(wf["state"], "")))  # fmt: skip
        if wf.get("paused"):
            state.append("  paused", style="bold magenta")
        state.append(f"  ·  {progress(wf.get('counts') or {})}")
        self.query_one("#wf-summary", Static).update(state)
        self.refresh_refusals()

    def current(self) -> Json | None:
        table = self.query_one("#nodes", DataTable)
        if not table.row_count:
            return None
        with contextlib.suppress(Exception):
            return self.nodes.get(str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value))
        return None

    def target_queue(self) -> str | None:
        n = self.current()
        return str(n["queue"]) if n else None

    def action_back(self) -> None:
        self.console.pop_screen()

    async def _act(self, action: str, verb: str) -> None:
        if n := self.current():
            await self.call(self.console.client.job_action(n["id"], action), f"job {n['id']} ({n.get('ref')}) {verb}")
            await self.reload()

    def cancel_question(self) -> tuple[str, str] | None:
        n = self.current()
        if not n:
            return None
        return (f"Cancel job {n['id']} ({n.get('ref')})?",
                "Jobs waiting for it are cancelled too (unless their policy says run or skip).")  # fmt: skip

    @on(DataTable.RowSelected)
    async def _chosen(self, event: DataTable.RowSelected) -> None:  # enter on a node
        await self.action_open()

    async def action_open(self) -> None:
        if n := self.current():
            from console_tui.screens.detail import JobDetailScreen

            await self.console.push_screen(JobDetailScreen(int(n["id"])))
