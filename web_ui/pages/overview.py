"""Overview: live counters and plotly charts: jobs by outcome, pick-up latency (held by policy vs
waiting for a slot) and the success ratio over the chosen range (from the store), queue depth (from
the shared hub)."""

from __future__ import annotations

import fnmatch
import time
from datetime import datetime
from typing import Any

import plotly.graph_objects as go
import reflex as rx

from core import timetext
from core.client import relay_lag_text
from core.errors import JobDeckError
from web_ui.format import STATE_COLOR
from web_ui.hub import HUB, Change
from web_ui.layout import layout
from web_ui.state import AppState, page_state

CHART_EVERY = 2.0  # seconds between chart redraws in one tab
HISTORY_EVERY = 10.0  # seconds between reads of the store's history by one tab
COUNTERS = ("queued", "running", "scheduled", "paused", "failed", "dead", "succeeded", "cancelled")
OUTCOME_COLORS = {"succeeded": "#30a46c", "failed": "#f76b15", "dead": "#e5484d", "cancelled": "#8b8d98"}


def _layout(fig: go.Figure, y_title: str) -> go.Figure:
    fig.update_layout(
        margin={"l": 50, "r": 10, "t": 10, "b": 40},
        height=260,
        autosize=True,
        legend={"orientation": "h", "y": -0.25},
        yaxis_title=y_title,
        yaxis_rangemode="tozero",
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
    )
    return fig


def _history_axis(history: dict[str, Any], zone: str) -> list[datetime]:
    tz = timetext.zone(zone)
    return [datetime.fromisoformat(b).astimezone(tz).replace(tzinfo=None) for b in history.get("buckets", [])]


def outcomes_figure(history: dict[str, Any], zone: str) -> go.Figure:
    """Finished jobs per interval by outcome over the chosen range (from the store), stacked bars;
    every interval is there, so a quiet stretch reads as zero, not as a gap."""
    axis = _history_axis(history, zone)
    fig = go.Figure()
    for outcome, values in (history.get("outcomes") or {}).items():
        if outcome in OUTCOME_COLORS:
            fig.add_trace(go.Bar(x=axis, y=values, name=outcome, marker_color=OUTCOME_COLORS[outcome]))
    per = f"per {int(history.get('bucket_seconds', 60) // 60) or 1} min" if history else ""
    return _layout(fig.update_layout(barmode="stack", bargap=0.1), f"jobs {per}")


PICKUP_LINES = (  # (class, percentile, legend, colour, dash)
    ("slot", "p50_ms", "waiting for a slot p50", "#0090ff", "solid"),
    ("slot", "p99_ms", "waiting for a slot p99", "#0090ff", "dot"),
    ("held", "p50_ms", "held (paused / limited) p50", "#f76b15", "solid"),
    ("held", "p99_ms", "held (paused / limited) p99", "#f76b15", "dot"),
)


def latency_figure(history: dict[str, Any], zone: str) -> go.Figure:
    """Pick-up latency (ready -> claimed) p50 and p99 per interval over the chosen range (from the
    store), split into jobs their queue held (paused, at its concurrency or rate limit) and jobs
    that waited for a free agent slot; an interval without pick-ups of a class is a gap."""
    pickup = history.get("pickup") or {}
    axis = _history_axis(pickup, zone)
    fig = go.Figure()
    for cls, key, name, color, dash in PICKUP_LINES:
        values = (pickup.get(cls) or {}).get(key) or []
        fig.add_trace(go.Scatter(x=axis, y=values, name=name, mode="lines+markers", connectgaps=False,
                                 line={"color": color, "dash": dash}))  # fmt: skip
    return _layout(fig, "pick-up latency (ms)")


def depth_figure(patterns: list[str]) -> go.Figure:
    """Queue depth of the busiest queues among those matching `patterns` (the user's queues)."""
    times, series = HUB.depth_series(lambda name: any(fnmatch.fnmatchcase(name, p) for p in patterns))
    axis = [datetime.fromtimestamp(t) for t in times]
    fig = go.Figure()
    for name, values in series.items():
        fig.add_trace(go.Scatter(x=axis, y=values, name=name, mode="lines", line_shape="hv"))
    if not series:
        fig.add_trace(go.Scatter(x=axis, y=[0] * len(axis), name="(no queues)", mode="lines"))
    return _layout(fig, "queued jobs")


def success_figure(history: dict[str, Any], zone: str) -> go.Figure:
    """The success ratio per interval over the chosen range (none where nothing finished)."""
    fig = go.Figure(go.Scatter(x=_history_axis(history, zone), y=history.get("success_percent") or [],
                               name="success %", mode="lines+markers", connectgaps=False,
                               line={"color": OUTCOME_COLORS["succeeded"]}))  # fmt: skip
    fig.update_yaxes(range=[0, 105])
    return _layout(fig, "succeeded / finished (%)")


@page_state("/")
class OverviewState(AppState):
    """The Overview page."""

    counters: list[dict[str, str]] = []
    throughput: str = "0"
    relays: list[str] = []  # one line per outbox relay (Kafka): its lag
    fig_outcomes: go.Figure = go.Figure()
    fig_latency: go.Figure = go.Figure()
    fig_depth: go.Figure = go.Figure()
    fig_success: go.Figure = go.Figure()
    charts_at: float = 0.0
    range_: str = "1h"  # of the outcome, latency and success charts: 15m, 1h or 24h, read from the store
    history: dict[str, Any] = {}
    history_at: float = 0.0
    slo: list[dict[str, str]] = []  # one row per window (last hour, last day): the SLO panel

    def _counters(self) -> None:
        by_state: dict[str, Any] = (HUB.stats or {}).get("by_state", {})
        self.counters = [
            {"state": s, "count": f"{int(by_state.get(s, 0)):,}", "color": STATE_COLOR.get(s, "gray")} for s in COUNTERS
        ]
        self.throughput = str((HUB.stats or {}).get("jobs_per_second", 0))
        relays = (HUB.stats or {}).get("relays") or {}
        self.relays = [relay_lag_text(name, lag) for name, lag in sorted(relays.items())]

    async def _charts(self) -> None:
        if not self.history or time.monotonic() - self.history_at >= HISTORY_EVERY:
            try:
                self.history = await self.client().stats_history(self.range_)
                self.slo = slo_rows(await self.client().slo())
                self.history_at = time.monotonic()
            except JobDeckError:
                pass  # the header says the core is away; the charts keep what they had
        zone = self.zone_name()
        self.fig_outcomes, self.fig_latency = outcomes_figure(self.history, zone), latency_figure(self.history, zone)
        self.fig_depth, self.fig_success = depth_figure(self.queue_patterns), success_figure(self.history, zone)
        self.charts_at = time.monotonic()

    async def live_refresh(self, changes: list[Change] | None) -> None:
        self._counters()
        if changes is None or time.monotonic() - self.charts_at >= CHART_EVERY:
            await self._charts()

    async def load(self) -> None:
        self._counters()
        await self._charts()

    async def set_range(self, value: str | list[str]) -> None:
        """Show 15 min, 1 h or 24 h of finished jobs and pick-up latency (read from the store at once)."""
        chosen = value[0] if isinstance(value, list) and value else value
        self.range_ = chosen if isinstance(chosen, str) and chosen in ("15m", "1h", "24h") else "1h"
        self.history = {}
        await self._charts()


def slo_rows(slo: dict[str, Any]) -> list[dict[str, str]]:
    """The SLO panel's rows: per window, each pick-up objective's share against its target, success, budget."""

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f} %"

    rows = []
    for w in slo.get("windows", []):
        row = {"window": {"1h": "last hour", "24h": "last day"}.get(w["window"], w["window"]), "jobs": f"{w['jobs']:,}"}
        for p in w["pickup"]:
            mark = "" if p["met"] is None else (" ✓" if p["met"] else " ✗")
            row[f"p{p['percentile']}"] = f"{pct(p['share'])}{mark}"
            row[f"p{p['percentile']}_color"] = {True: "green", False: "red"}.get(p["met"], "gray")
        row["success"] = pct(w["success_ratio"])
        budget = w["error_budget_left"]
        if budget is None:
            row["budget"] = "-"
        elif budget > 0:
            row["budget"] = f"{100 * budget:.0f} % left"
        else:  # "-3233 % left" says nothing: name what was allowed and what was spent
            row["budget"] = f"spent: {w['dead']:,} dead, {w.get('dead_allowed', 0):,.2f} allowed"
        row["budget_color"] = (
            "gray" if budget is None else ("green" if budget > 0.25 else "orange" if budget > 0 else "red")
        )
        rows.append(row)
    return rows


def _slo_row(r: Any) -> rx.Component:
    return rx.table.row(
        rx.table.cell(r["window"]),
        rx.table.cell(r["jobs"]),
        rx.table.cell(rx.text(r["p50"], color_scheme=r["p50_color"])),
        rx.table.cell(rx.text(r["p95"], color_scheme=r["p95_color"])),
        rx.table.cell(rx.text(r["p99"], color_scheme=r["p99_color"])),
        rx.table.cell(r["success"]),
        rx.table.cell(rx.text(r["budget"], color_scheme=r["budget_color"])),
    )


def _slo_panel() -> rx.Component:
    head = ("window", "jobs", "≤ 100 ms (p50: 50 %)", "≤ 500 ms (p95: 95 %)", "≤ 2 s (p99: 99 %)", "success (99 %)",
            "error budget")  # fmt: skip
    return rx.card(
        rx.vstack(
            rx.heading("SLO: pick-up (due → started) and success", size="3", as_="h2"),
            rx.table.root(
                rx.table.header(rx.table.row(*(rx.table.column_header_cell(h) for h in head))),
                rx.table.body(rx.foreach(OverviewState.slo, _slo_row)),
                width="100%",
                id="slo-table",
            ),
            rx.text(
                "Share of the jobs that finished in the window which started within each limit; an objective "
                "is met when the share reaches its percentile.",
                size="1",
                color_scheme="gray",
            ),
            width="100%",
        ),
        width="100%",
    )


def _counter(item: Any) -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.text(item["state"], size="2", color_scheme="gray"),
            rx.text(item["count"], size="6", weight="bold", color_scheme=item["color"], id="count-" + item["state"]),
            spacing="1",
        ),
        min_width="8rem",
    )


def _relay(line: Any) -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.text("event stream", size="2", color_scheme="gray"),
            rx.text(line, size="3", weight="bold", class_name="relay-lag"),
            spacing="1",
        )
    )


def _chart(title: str, fig: Any, chart_id: str) -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.heading(title, size="3", as_="h2"),
            rx.box(
                rx.plotly(data=fig, use_resize_handler=True, config={"displayModeBar": False}),
                width="100%",
                id=chart_id,
                class_name="chart",
            ),
            width="100%",
        ),
        width="100%",
        min_width="0",
    )


def overview_page() -> rx.Component:
    """The Overview page."""
    return layout(
        "Overview",
        rx.hstack(
            rx.foreach(OverviewState.counters, _counter),
            rx.card(
                rx.vstack(
                    rx.text("finished / s (last minute)", size="2", color_scheme="gray"),
                    rx.text(OverviewState.throughput, size="6", weight="bold", id="throughput"),
                    spacing="1",
                )
            ),
            rx.foreach(OverviewState.relays, _relay),
            wrap="wrap",
            spacing="3",
        ),
        _slo_panel(),
        rx.hstack(
            rx.text("Jobs and pick-up latency over", size="2", color_scheme="gray"),
            rx.segmented_control.root(
                rx.segmented_control.item("15 min", value="15m"),
                rx.segmented_control.item("1 h", value="1h"),
                rx.segmented_control.item("24 h", value="24h"),
                value=OverviewState.range_,
                on_change=OverviewState.set_range,
                id="range-picker",
            ),
            rx.text(
                "(from the store; queue depth: since this dashboard started) · times in ",
                AppState.zone_label,
                size="1",
                color_scheme="gray",
                id="chart-zone",
            ),
            align="center",
            spacing="2",
        ),
        rx.grid(
            _chart("Jobs by outcome", OverviewState.fig_outcomes, "chart-outcomes"),
            _chart("Pick-up latency: held by policy vs waiting for a slot", OverviewState.fig_latency, "chart-latency"),
            _chart("Queue depth", OverviewState.fig_depth, "chart-depth"),
            _chart("Success ratio", OverviewState.fig_success, "chart-success"),
            columns=rx.breakpoints(initial="1", lg="2"),
            spacing="4",
            width="100%",
        ),
    )
