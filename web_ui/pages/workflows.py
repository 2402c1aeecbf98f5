"""Workflows: the list (state, counts, pause / resume / cancel) and a workflow's detail with its DAG
drawn as an SVG graph, in layers, each node coloured by its job's state and updated live; a click
on a node opens the job."""

from __future__ import annotations

import html
from typing import Any

import reflex as rx

from core import timetext
from core.client import workflow_layers
from core.errors import JobDeckError, NotFound
from web_ui.format import ago, clock, when
from web_ui.hub import Change, touched
from web_ui.layout import layout
from web_ui.state import AppState, page_state

DETAIL_ROUTE = "/workflows/[workflow_ref]"  # not [workflow_id]: see job_detail.ROUTE
WF_COLOR = {"running": "amber", "succeeded": "green", "failed": "red", "cancelled": "gray"}
# fill, text: one pair per job state (the dashboard's state colours, as SVG needs them)
FILL = {
    "blocked": ("#e8e8ec", "#1c2024"), "scheduled": ("#cde2ff", "#0d3a7a"), "queued": ("#b8eaf5", "#0b4a5a"),
    "running": ("#ffd98a", "#4f3422"), "succeeded": ("#b5e8c6", "#193b2d"), "failed": ("#ffcfa8", "#582d1d"),
    "dead": ("#ffb8b8", "#641723"), "cancelled": ("#d9d9e0", "#60646c"), "paused": ("#e2d4ff", "#402060"),
    "skipped": ("#f0f0f3", "#80838d"),
}  # fmt: skip
NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 150, 36, 18, 56, 12
MAX_PER_LAYER = 40  # wider layers show their first nodes and a "+N more" box


def counts_text(counts: dict[str, int]) -> str:
    """'3 succeeded · 1 running · 6 blocked', most advanced first."""
    order = ("succeeded", "skipped", "running", "queued", "scheduled", "failed", "blocked", "paused", "dead",
             "cancelled")  # fmt: skip
    return " · ".join(f"{counts[s]} {s}" for s in order if counts.get(s))


def dag_svg(nodes: list[dict[str, Any]]) -> str:
    """The graph as one SVG document: layers top to bottom, an edge from each parent to its child."""
    layers = workflow_layers(nodes)
    pos: dict[int, tuple[float, float]] = {}
    boxes: list[str] = []
    width = 0.0
    for depth, layer in enumerate(layers):
        shown = layer if len(layer) <= MAX_PER_LAYER else layer[: MAX_PER_LAYER - 1]
        y = PAD + depth * (NODE_H + GAP_Y)
        for k, n in enumerate(shown):
            x = PAD + k * (NODE_W + GAP_X)
            pos[n["id"]] = (x, y)
            fill, ink = FILL.get(n["state"], ("#eee", "#111"))
            label = html.escape(str(n.get("ref") or n["name"]))[:22]
            why = f" · {n['last_error']}" if n.get("last_error") else ""
            title = html.escape(f"{n.get('ref') or ''} · job {n['id']} · {n['state']} · {n['name']}{why}")
            boxes.append(
                f'<a href="/jobs/{n["id"]}" class="dag-node" id="dag-node-{n["id"]}" data-state="{n["state"]}">'
                f"<title>{title}</title>"
                f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="6" fill="{fill}" stroke="{ink}" '
                f'stroke-width="1"/><text x="{x + 8}" y="{y + 15}" font-size="12" fill="{ink}">{label}</text>'
                f'<text x="{x + 8}" y="{y + 29}" font-size="10" fill="{ink}">{n["state"]} · #{n["id"]}</text></a>'
            )
        if len(shown) < len(layer):
            x = PAD + len(shown) * (NODE_W + GAP_X)
            boxes.append(f'<g class="dag-more"><rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="6" '
                         f'fill="none" stroke="#8b8d98" stroke-dasharray="4 3"/><text x="{x + 8}" y="{y + 22}" '
                         f'font-size="12" fill="#60646c">+{len(layer) - len(shown):,} more</text></g>')  # fmt: skip
        width = max(width, PAD * 2 + (len(shown) + (len(shown) < len(layer))) * (NODE_W + GAP_X))
    edges = []
    for n in nodes:
        if n["id"] not in pos:
            continue
        cx, cy = pos[n["id"]]
        for p in n["parents"]:
            if p in pos:
                px, py = pos[p]
                edges.append(f'<line x1="{px + NODE_W / 2}" y1="{py + NODE_H}" x2="{cx + NODE_W / 2}" y2="{cy}" '
                             'stroke="#8b8d98" stroke-width="1" marker-end="url(#arrow)"/>')  # fmt: skip
    height = PAD * 2 + len(layers) * (NODE_H + GAP_Y) - GAP_Y
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" id="dag" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="workflow graph" '
        'style="font-family: system-ui, sans-serif">'
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="6" markerHeight="6" orient="auto">'
        '<path d="M0,0 L8,4 L0,8 z" fill="#8b8d98"/></marker></defs>' + "".join(edges) + "".join(boxes) + "</svg>"
    )


def _row(wf: dict[str, Any], zone: str) -> dict[str, str]:
    return {
        "id": str(wf["id"]),
        "name": wf["name"],
        "state": wf["state"],
        "color": WF_COLOR.get(wf["state"], "gray"),
        "paused": "1" if wf.get("paused") else "",
        "counts": counts_text(wf.get("counts") or {}),
        "total": str(wf.get("total", 0)),
        "created": clock(wf.get("created_at"), zone),
        "created_ago": ago(wf.get("created_at")),
        "finished": clock(wf.get("finished_at"), zone) if wf.get("finished_at") else "",
        "finished_ago": ago(wf.get("finished_at")),
        "took": _took(wf.get("created_at"), wf.get("finished_at")),
    }


def _took(start: Any, end: Any) -> str:
    """From submit to the last job's end ('4m05s'); '' while it runs."""
    a, b = when(start), when(end)
    return "" if a is None or b is None else timetext.duration(b - a)


class _WorkflowActions(AppState):
    """Cancel, pause and resume, shared by the list and the detail."""

    async def fetch(self) -> None:
        raise NotImplementedError

    async def act(self, workflow_id: str, action: str) -> Any:
        try:
            await self.client().workflow_action(int(workflow_id), action)
        except JobDeckError as exc:
            return self.failed(exc)
        await self.fetch()
        return rx.toast.success(f"workflow {workflow_id}: {action} done", duration=2000)


@page_state("/workflows")
class WorkflowsState(_WorkflowActions):
    """The Workflows page."""

    workflows: list[dict[str, str]] = []
    state_filter: str = ""

    async def fetch(self) -> None:
        page = await self.client().workflows(state=self.state_filter or None, limit=200)
        zone = self.zone_name()
        self.workflows = [_row(wf, zone) for wf in page["workflows"]]

    async def set_filter(self, value: str) -> None:
        self.state_filter = "" if value == "all" else value
        await self.fetch()

    async def live_refresh(self, changes: list[Change] | None) -> None:
        if touched(changes, "workflow.", "job."):
            await self.fetch()

    async def load(self) -> Any:
        return await self._fetch_or_fail()


@page_state(DETAIL_ROUTE)
class WorkflowDetailState(_WorkflowActions):
    """A workflow's detail: its graph, counts and actions."""

    workflow_id: int = 0
    found: bool = True
    wf: dict[str, str] = {}
    svg: str = ""
    _job_ids: set[int] = set()

    def _id_from_url(self) -> int:
        tail = self.router.url.path.rstrip("/").rsplit("/", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    async def fetch(self) -> None:
        try:
            wf = await self.client().get_workflow(self.workflow_id)
        except NotFound:
            self.found, self.wf, self.svg = False, {}, ""
            return
        self.found = True
        self.wf = _row(wf, self.zone_name())
        self._job_ids = {n["id"] for n in wf["nodes"]}
        self.svg = dag_svg(wf["nodes"])

    async def live_refresh(self, changes: list[Change] | None) -> None:
        if changes is None or any(c.job_id in self._job_ids or c.type.startswith("workflow.") for c in changes):
            await self.fetch()

    async def load(self) -> Any:
        self.workflow_id = self._id_from_url()
        return await self._fetch_or_fail()


def _actions(row: Any, state: Any) -> rx.Component:
    running = row["state"] == "running"
    return rx.hstack(
        rx.cond(
            row["paused"] != "",
            rx.button("Resume", size="1", variant="soft", on_click=state.act(row["id"], "resume"),
                      disabled=~running, class_name="wf-resume"),
            rx.button("Pause", size="1", variant="soft", on_click=state.act(row["id"], "pause"),
                      disabled=~running, class_name="wf-pause"),
        ),
        rx.button("Cancel", size="1", variant="soft", color_scheme="red", on_click=state.act(row["id"], "cancel"),
                  disabled=~running, class_name="wf-cancel"),
        spacing="1",
    )  # fmt: skip


def _list_row(row: Any) -> rx.Component:
    return rx.table.row(
        rx.table.row_header_cell(rx.link(row["id"], href="/workflows/" + row["id"])),
        rx.table.cell(rx.link(row["name"], href="/workflows/" + row["id"])),
        rx.table.cell(
            rx.hstack(
                rx.badge(row["state"], color_scheme=row["color"]),
                rx.cond(row["paused"] != "", rx.badge("paused", color_scheme="purple"), rx.fragment()),
                spacing="1",
            )
        ),
        rx.table.cell(row["total"]),
        rx.table.cell(row["counts"]),
        rx.table.cell(rx.tooltip(rx.text(row["created_ago"]), content=row["created"])),
        rx.table.cell(
            rx.cond(
                row["finished"] != "", rx.tooltip(rx.text(row["finished_ago"]), content=row["finished"]), rx.text("")
            )
        ),
        rx.table.cell(row["took"], class_name="wf-took"),
        rx.table.cell(_actions(row, WorkflowsState)),
        id="wf-row-" + row["id"],
    )


def workflows_page() -> rx.Component:
    """The Workflows page."""
    heads = ("Id", "Name", "State", "Jobs", "Progress", "Started", "Ended", "Took", "Actions")
    return layout(
        "Workflows",
        rx.hstack(
            rx.text("State", size="2"),
            rx.select(
                ["all", "running", "succeeded", "failed", "cancelled"],
                default_value="all",
                on_change=WorkflowsState.set_filter,
                id="wf-state-filter",
                size="1",
            ),
            align="center",
        ),
        rx.table.root(
            rx.table.header(rx.table.row(*(rx.table.column_header_cell(h) for h in heads))),
            rx.table.body(rx.foreach(WorkflowsState.workflows, _list_row)),
            width="100%",
            id="workflows-table",
        ),
        rx.cond(
            WorkflowsState.workflows.length() == 0,
            rx.callout(
                "No workflows yet: POST /v1/workflows (see docs/workflows.md).", icon="info", color_scheme="gray"
            ),
            rx.fragment(),
        ),
    )


def _legend() -> rx.Component:
    return rx.hstack(
        *(rx.hstack(rx.box(width="0.8rem", height="0.8rem", background=fill, border=f"1px solid {ink}",
                           border_radius="3px"), rx.text(state, size="1"), spacing="1", align="center")
          for state, (fill, ink) in FILL.items()),
        spacing="3", wrap="wrap",
    )  # fmt: skip


def workflow_detail_page() -> rx.Component:
    """A workflow's detail (`/workflows/ID`)."""
    s = WorkflowDetailState
    return layout(
        "Workflow " + s.workflow_id.to_string(),
        rx.link("← all workflows", href="/workflows", size="2"),
        rx.cond(
            s.found,
            rx.vstack(
                rx.hstack(
                    rx.heading(s.wf["name"], size="4", as_="h2"),
                    rx.badge(s.wf["state"], color_scheme=s.wf["color"], id="wf-state"),
                    rx.cond(s.wf["paused"] != "", rx.badge("paused", color_scheme="purple"), rx.fragment()),
                    rx.spacer(),
                    _actions(s.wf, s),
                    width="100%",
                    align="center",
                ),
                rx.text(s.wf["counts"], size="2", id="wf-counts"),
                rx.text(
                    "Started ",
                    s.wf["created"],
                    rx.cond(s.wf["finished"] != "", " · ended " + s.wf["finished"], ""),
                    size="1",
                    color_scheme="gray",
                ),
                _legend(),
                rx.box(
                    rx.html(s.svg),
                    overflow="auto",
                    width="100%",
                    max_height="75vh",
                    id="dag-box",
                    border=f"1px solid {rx.color('gray', 5)}",
                    border_radius="8px",
                ),
                width="100%",
                spacing="3",
            ),
            rx.callout("No workflow with this id.", icon="info", color_scheme="gray"),
        ),
    )
