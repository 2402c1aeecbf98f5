"""The SQLite store's SQL for dependencies and workflows (the algorithm is core/store/deps.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from core.model import Change, Job
from core.store._sqlite_writer import Tx
from core.store.base import JobChanges
from core.workflow import ENDED_STATES, WORKFLOW_COLUMNS, Workflow, workflow_summary

_CHUNK = 500
_ENDED = ", ".join(f"'{s}'" for s in sorted(ENDED_STATES))
SELECT_WORKFLOW = f"SELECT {', '.join(WORKFLOW_COLUMNS)} FROM workflows"


def _chunks(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), _CHUNK):
        yield items[i : i + _CHUNK]


def _marks(n: int) -> str:
    return ", ".join("?" * n)


def to_workflow(row: Sequence[Any]) -> Workflow:
    r = list(row)
    r[4] = r[4].split(",") if r[4] else []
    r[5], r[6] = bool(r[5]), bool(r[6])
    return Workflow(*r)


class SQLiteDeps:
    """core.store.deps.DepsIO in one SQLite write transaction (nothing here suspends)."""

    def __init__(self, tx: Tx, applier: JobChanges[Tx], load: Callable[[sqlite3.Connection, Sequence[int]],
                 dict[int, Job]], flush: Callable[[], None]) -> None:  # fmt: skip
        self.tx, self.c, self.applier, self._load, self._flush = tx, tx.conn, applier, load, flush

    def apply(self, job: Job, change: Change) -> Job:
        return self.applier.apply(job, change)

    async def flush(self) -> None:
        self._flush()

    async def edges_from(self, parents: Sequence[int]) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for chunk in _chunks(parents):
            q = f"SELECT parent_id, child_id FROM job_deps WHERE parent_id IN ({_marks(len(chunk))})"
            out += self.c.execute(q, tuple(chunk)).fetchall()
        return out

    async def lock_jobs(self, ids: Sequence[int]) -> dict[int, Job]:
        return self._load(self.c, ids)  # the one writer is the lock

    async def write_counts(self, rows: Sequence[tuple[int, int, int | None]]) -> None:
        self.c.executemany(
            "UPDATE jobs SET deps_left = ?, dep_failed = ? WHERE id = ?", [(n, f, i) for i, n, f in rows]
        )

    async def failed_parents(self, children: Sequence[int]) -> dict[int, int]:
        out: dict[int, int] = {}
        for chunk in _chunks(children):
            q = (f"SELECT d.child_id, min(d.parent_id) FROM job_deps d JOIN jobs p ON p.id = d.parent_id "
                 f"WHERE d.child_id IN ({_marks(len(chunk))}) AND p.state IN ('dead', 'cancelled') GROUP BY d.child_id")  # fmt: skip
            out.update(self.c.execute(q, tuple(chunk)).fetchall())
        return out

    async def with_parents(self, ids: Sequence[int]) -> set[int]:
        out: set[int] = set()
        for chunk in _chunks(ids):
            q = f"SELECT DISTINCT child_id FROM job_deps WHERE child_id IN ({_marks(len(chunk))})"
            out.update(r[0] for r in self.c.execute(q, tuple(chunk)))
        return out

    async def workflows_to_update(self, ids: Sequence[int]) -> list[tuple[int, str, bool, bool]]:
        q = (f"SELECT w.id, w.state, w.cancel_requested, EXISTS (SELECT 1 FROM jobs j WHERE j.workflow_id = w.id "
             f"AND j.state NOT IN ({_ENDED})) FROM workflows w WHERE w.id IN ({_marks(len(ids))})")  # fmt: skip
        return [(r[0], r[1], bool(r[2]), bool(r[3])) for r in self.c.execute(q, tuple(ids))]

    async def workflow_counts(self, workflow_id: int) -> dict[str, int]:
        return counts_of(self.c, workflow_id)

    async def set_workflow_state(self, workflow_id: int, state: str, finished_at: float | None) -> dict[str, Any]:
        self.c.execute("UPDATE workflows SET state = ?, finished_at = ?, updated_at = ? WHERE id = ?",
                       (state, finished_at, self.tx.now, workflow_id))  # fmt: skip
        wf = to_workflow(self.c.execute(f"{SELECT_WORKFLOW} WHERE id = ?", (workflow_id,)).fetchone())
        view = workflow_summary(wf)
        self.tx.emit(f"workflow.{state}", None, None, {"workflow": view})
        return view


def counts_of(c: sqlite3.Connection, workflow_id: int) -> dict[str, int]:
    """A workflow's jobs by state."""
    q = "SELECT state, count(*) FROM jobs WHERE workflow_id = ? GROUP BY state"
    return dict(c.execute(q, (workflow_id,)).fetchall())


def insert_workflow(tx: Tx, name: str, total: int, queues: list[str]) -> Workflow:
    """A new running workflow; its event goes before its jobs'."""
    now = tx.now
    cur = tx.conn.execute(
        "INSERT INTO workflows (name, state, total, queues, created_at, updated_at) VALUES (?, 'running', ?, ?, ?, ?)",
        (name, total, ",".join(queues), now, now),
    )
    wf = Workflow(int(cur.lastrowid or 0), name, "running", total, queues, False, False, now, now)
    tx.emit("workflow.created", None, None, {"workflow": workflow_summary(wf)})
    return wf


def insert_edges(tx: Tx, edges: Sequence[tuple[int, int]]) -> None:
    tx.conn.executemany("INSERT OR IGNORE INTO job_deps (parent_id, child_id) VALUES (?, ?)", edges)


def job_edges(c: sqlite3.Connection, job_id: int) -> tuple[list[int], list[int]]:
    """(parent ids, child ids) of a job."""
    parents = [
        r[0] for r in c.execute("SELECT parent_id FROM job_deps WHERE child_id = ? ORDER BY parent_id", (job_id,))
    ]
    children = [
        r[0] for r in c.execute("SELECT child_id FROM job_deps WHERE parent_id = ? ORDER BY child_id", (job_id,))
    ]
    return parents, children


def graph(c: sqlite3.Connection, workflow_id: int) -> list[dict[str, Any]]:
    """Every job of a workflow as a node: id, ref, name, state, queue, why it ended badly (last_error),
    parent ids (in id order)."""
    nodes = {r[0]: {"id": r[0], "ref": r[1], "name": r[2], "state": r[3], "queue": r[4],
             "last_error": r[5], "parents": []}
             for r in c.execute("SELECT id, ref, name, state, queue, last_error FROM jobs WHERE workflow_id = ? ORDER BY id",
                                (workflow_id,))}  # fmt: skip
    q = "SELECT d.parent_id, d.child_id FROM job_deps d JOIN jobs j ON j.id = d.child_id WHERE j.workflow_id = ?"
    for parent, child in c.execute(q, (workflow_id,)):
        nodes[child]["parents"].append(parent)
    return list(nodes.values())


def parent_results(c: sqlite3.Connection, child_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """child id -> {parent's ref (or id): its result}."""
    out: dict[int, dict[str, Any]] = {i: {} for i in child_ids}
    for chunk in _chunks(child_ids):
        q = (f"SELECT d.child_id, p.id, p.ref, p.result FROM job_deps d JOIN jobs p ON p.id = d.parent_id "
             f"WHERE d.child_id IN ({_marks(len(chunk))})")  # fmt: skip
        for child, pid, ref, result in c.execute(q, tuple(chunk)):
            out[child][ref or str(pid)] = None if result is None else orjson.loads(result)
    return out
