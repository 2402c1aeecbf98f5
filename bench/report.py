"""Figures, floors, percentiles, machine facts, and the table they are printed in."""

from __future__ import annotations

import math
import os
import platform
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class Floor:
    """The figure the design promises: `value op limit` must hold."""

    op: Literal[">=", "<="]
    limit: float

    def passes(self, value: float) -> bool:
        return value >= self.limit if self.op == ">=" else value <= self.limit

    def __str__(self) -> str:
        return f"{self.op} {_number(self.limit)}"


# The floors of the brief, in one place.
BATCH_SUBMIT_FLOOR = Floor(">=", 30_000)
E2E_FLOOR = Floor(">=", 5_000)
PICKUP_P99_FLOOR = Floor("<=", 2.0)  # ms at a steady 200 jobs/s (issue 18; issue 3 had 10)
SINGLE_SUBMIT_FLOOR = Floor(">=", 2_000)  # req/s, POST /v1/jobs from one keep-alive client (issue 18)
CONCURRENT_SUBMIT_FLOOR = Floor(">=", 8_000)  # req/s from 16 concurrent clients (issue 18, both stores)
AGENT_NOOP_FLOOR = Floor(">=", 3_000)  # jobs/s through one remote agent process
AGENT_RSS_FLOOR = Floor("<=", 500)  # MB, peak RSS of one agent process running 10,000 sleeping jobs
# On PostgreSQL (issue 3): batch submit and e2e no-op on one node; pick-up at 200 jobs/s.
PG_BATCH_SUBMIT_FLOOR = Floor(">=", 20_000)
PG_E2E_FLOOR = Floor(">=", 3_000)
PG_PICKUP_P99_FLOOR = Floor("<=", 4.0)  # one node; issue 3 had 15
PG_PICKUP_P99_NODES_FLOOR = Floor("<=", 6.0)  # two nodes (issue 18)
PG_SINGLE_SUBMIT_FLOOR = Floor(">=", 1_500)


@dataclass
class Figure:
    """One printed measurement. `value` None means it could not be measured (see `note`)."""

    bench: str
    measure: str
    value: float | None
    unit: str
    floor: Floor | None = None
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.value is None:
            return "ERROR" if self.floor is not None else "-"
        if self.floor is None:
            return ""
        return "ok" if self.floor.passes(self.value) else "BELOW" if self.floor.op == ">=" else "ABOVE"


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values (p in 0..100)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _number(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _value(f: Figure | None) -> str:
    return "" if f is None else "-" if f.value is None else _number(f.value)


def _judged(f: Figure | None) -> str:
    return "" if f is None or f.floor is None else f"{f.floor} {f.verdict}"


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> str:
    """A fixed-width table; the last column (the notes) is not padded."""
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header) - 1)]

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=False))]
        return "  ".join(parts) + "  " + cells[-1]

    rule = "-" * (sum(widths) + 2 * len(widths) + len(header[-1]))
    return "\n".join([line(header), rule, *(line(r).rstrip() for r in rows)])


def render_table(figures: Sequence[Figure]) -> str:
    """A fixed-width table; notes go in the last column, unwrapped."""
    header = ("benchmark", "measure", "value", "unit", "floor", "verdict", "notes")
    rows = [(f.bench, f.measure, _value(f), f.unit, "" if f.floor is None else str(f.floor), f.verdict, f.note)
            for f in figures]  # fmt: skip
    return _grid(header, rows, right={2})


def render_columns(columns: Sequence[tuple[str, Sequence[Figure]]]) -> str:
    """Several runs of the same benchmarks side by side: one row per (benchmark, measure), a value
    and a floor verdict per run; the notes of each run in the last column, labelled."""
    by_key: dict[tuple[str, str], dict[str, Figure]] = {}
    for label, figures in columns:
        for f in figures:
            by_key.setdefault((f.bench, f.measure), {})[label] = f
    labels = [label for label, _ in columns]
    header = ["benchmark", "measure", "unit"]
    for label in labels:
        header += [label, "floor"]
    rows = []
    for (bench, measure), runs in by_key.items():
        unit = next(iter(runs.values())).unit
        row = [bench, measure, unit]
        for label in labels:
            row += [_value(runs.get(label)), _judged(runs.get(label))]
        notes = [f"[{label}] {runs[label].note}" for label in labels if label in runs and runs[label].note]
        rows.append([*row, " | ".join(notes)])
    return _grid([*header, "notes"], rows, right={3 + 2 * i for i in range(len(labels))})


def _filesystem_of(path: Path) -> str:
    try:
        out = subprocess.run(["df", "-T", str(path)], capture_output=True, text=True, timeout=5, check=True).stdout
        fields = out.splitlines()[-1].split()
        return f"{fields[1]} ({fields[0]})"
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def load_average() -> str:
    """The 1, 5 and 15 minute load averages: on a shared machine, how noisy the run was."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1, 5, 15 min)"


def code_revision() -> str:
    """The commit measured, and whether the engine's files differ from it (others may be editing)."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=5, check=True).stdout

    try:
        head = git("log", "-1", "--format=%h %s").strip()
        dirty = git("status", "--porcelain", "--", "core", "agents", "migrations").strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    head = head if len(head) <= 72 else head[:71] + "…"
    return head + (" + uncommitted changes in core/agents/migrations" if dirty else "")


def machine_facts(tmp_root: Path) -> list[tuple[str, str]]:
    """What the figures depend on."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [
        ("nproc", f"{affinity} usable of {os.cpu_count()}"),
        ("python", f"{platform.python_implementation()} {sys.version.split()[0]}"),
        ("sqlite", sqlite3.sqlite_version),
        ("platform", platform.platform()),
        ("data dirs", f"{tmp_root} on {_filesystem_of(tmp_root)}"),
        ("code", code_revision()),
        ("load before", load_average()),
    ]


def render_facts(title: str, facts: Sequence[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in facts)
    return "\n".join([title, *(f"  {k.ljust(width)}  {v}" for k, v in facts)])
