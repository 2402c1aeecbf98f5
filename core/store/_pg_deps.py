"""The PostgreSQL store's SQL for dependencies and workflows (the algorithm is core/store/deps.py).

Children are locked (FOR UPDATE, in id order) before their counts are read: two nodes finishing
parents of one child take turns on its row, and the second sees the first's count (a locked
row is read as last committed), so exactly one of them brings it to 0 and releases the child.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from core.model import Change, Job
from core.store import _pg_sql as sql
from core.store._pg_writer import PgTx
from core.store._pg_writes import JobChanges
from core.workflow import ENDED_STATES, WORKFLOW_COLUMNS, Workflow, workflow_summary

if TYPE_CHECKING:
    from core.store._pg_writer import Conn

_ENDED = ", ".join(f"'{s}'" for s in sorted(ENDED_STATES))
SELECT_WORKFLOW = f"SELECT {', '.join(WORKFLOW_COLUMNS)} FROM workflows"
LOCK_PARENTS = f"{sql.SELECT_JOB} WHERE id = ANY($1::bigint[]) ORDER BY id FOR SHARE"
# A workflow whose jobs carry idempotency keys (a hook call's) takes one advisory lock per key, to
# commit, in key order, before looking the keys up: a second submit with a key waits for the first.
LOCK_KEYS = "SELECT pg_advisory_xact_lock(7245, hashtext(k)) FROM unnest($1::text[]) AS k ORDER BY k"
KNOWN_KEY = "SELECT id, idempotency_key FROM jobs WHERE idempotency_key = ANY($1::text[]) ORDER BY id LIMIT 1"


def to_workflow(row: Sequence[Any]) -> Workflow:
    r = list(row)
    r[4] = r[4].split(",") if r[4] else []
    return Workflow(*r)


class PgDeps:
    """core.store.deps.DepsIO in one PostgreSQL write transaction."""

    def __init__(self, tx: PgTx, applier: JobChanges) -> None:
        self.tx, self.c, self.applier = tx, tx.conn, applier

    def apply(self, job: Job, change: Change) -> Job:
        return self.applier.apply(job, change)

    async def flush(self) -> None:
        await self.applier.flush()

    async def edges_from(self, parents: Sequence[int]) -> list[tuple[int, int]]:
        q = "SELECT parent_id, child_id FROM job_deps WHERE parent_id = ANY($1::bigint[])"
        return [(r[0], r[1]) for r in await self.c.fetch(q, list(parents))]

    async def lock_jobs(self, ids: Sequence[int]) -> dict[int, Job]:
        return {j.id: j for j in sql.to_jobs(await self.c.fetch(sql.LOCK_JOBS, list(ids)))}

    async def write_counts(self, rows: Sequence[tuple[int, int, int | None]]) -> None:
        q = ("UPDATE jobs AS j SET deps_left = v.n, dep_failed = v.f FROM unnest($1::bigint[], $2::integer[], "
             "$3::bigint[]) AS v(id, n, f) WHERE j.id = v.id")  # fmt: skip
        await self.c.execute(q, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])

    async def failed_parents(self, children: Sequence[int]) -> dict[int, int]:
        q = ("SELECT d.child_id, min(d.parent_id) FROM job_deps d JOIN jobs p ON p.id = d.parent_id "
             "WHERE d.child_id = ANY($1::bigint[]) AND p.state IN ('dead', 'cancelled') GROUP BY d.child_id")  # fmt: skip
        return {r[0]: r[1] for r in await self.c.fetch(q, list(children))}

    async def with_parents(self, ids: Sequence[int]) -> set[int]:
        rows = await self.c.fetch(
            "SELECT DISTINCT child_id FROM job_deps WHERE child_id = ANY($1::bigint[])", list(ids)
        )
        return {r[0] for r in rows}

    async def workflows_to_update(self, ids: Sequence[int]) -> list[tuple[int, str, bool, bool]]:
        # the workflow's row lock orders nodes ending its last jobs at once: one of them finishes it
        await self.c.execute("SELECT 1 FROM workflows WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE", list(ids))
        q = (f"SELECT w.id, w.state, w.cancel_requested, EXISTS (SELECT 1 FROM jobs j WHERE j.workflow_id = w.id "
             f"AND j.state NOT IN ({_ENDED})) FROM workflows w WHERE w.id = ANY($1::bigint[])")  # fmt: skip
        return [(r[0], r[1], r[2], r[3]) for r in await self.c.fetch(q, list(ids))]

    async def workflow_counts(self, workflow_id: int) -> dict[str, int]:
        return await counts_of(self.c, workflow_id)

    async def set_workflow_state(self, workflow_id: int, state: str, finished_at: float | None) -> dict[str, Any]:
        row = await self.c.fetchrow(
            f"UPDATE workflows SET state = $1, finished_at = $2, updated_at = $3 WHERE id = $4 "
            f"RETURNING {', '.join(WORKFLOW_COLUMNS)}",
            state, finished_at, self.tx.now, workflow_id,
        )  # fmt: skip
        view = workflow_summary(to_workflow(tuple(row)))  # type: ignore[arg-type]
        self.tx.emit(f"workflow.{state}", None, None, {"workflow": view})
        return view


async def counts_of(c: Conn, workflow_id: int) -> dict[str, int]:
    """A workflow's jobs by state."""
    rows = await c.fetch("SELECT state, count(*) FROM jobs WHERE workflow_id = $1 GROUP BY state", workflow_id)
    return {r[0]: int(r[1]) for r in rows}


async def insert_workflow(tx: PgTx, name: str, total: int, queues: list[str]) -> Workflow:
    """A new running workflow; its event goes before its jobs'."""
    now = tx.now
    wf_id = await tx.conn.fetchval(
        "INSERT INTO workflows (name, state, total, queues, created_at, updated_at) "
        "VALUES ($1, 'running', $2, $3, $4, $4) RETURNING id",
        name, total, ",".join(queues), now,
    )  # fmt: skip
    wf = Workflow(int(wf_id), name, "running", total, queues, False, False, now, now)
    tx.emit("workflow.created", None, None, {"workflow": workflow_summary(wf)})
    return wf


async def insert_edges(tx: PgTx, edges: Sequence[tuple[int, int]]) -> None:
    """Insert dependency edges. Every caller's edges are new (each has a job inserted by the same
    transaction) and given once, so a big set goes in by COPY (20,000 edges: 2-3x faster than the
    unnest insert, whose ON CONFLICT is then never needed)."""
    if len(edges) >= sql.COPY_FROM:
        await tx.conn.copy_records_to_table("job_deps", records=edges, columns=["parent_id", "child_id"])
        return
    await tx.conn.execute(
        "INSERT INTO job_deps (parent_id, child_id) SELECT * FROM unnest($1::bigint[], $2::bigint[]) ON CONFLICT DO NOTHING",
        [p for p, _ in edges], [c for _, c in edges],
    )  # fmt: skip


async def job_edges(c: Conn, job_id: int) -> tuple[list[int], list[int]]:
    """(parent ids, child ids) of a job."""
    parents = await c.fetch("SELECT parent_id FROM job_deps WHERE child_id = $1 ORDER BY parent_id", job_id)
    children = await c.fetch("SELECT child_id FROM job_deps WHERE parent_id = $1 ORDER BY child_id", job_id)
    return [r[0] for r in parents], [r[0] for r in children]


async def graph(c: Conn, workflow_id: int) -> list[dict[str, Any]]:
    """Every job of a workflow as a node: id, ref, name, state, queue, why it ended badly (last_error),
    parent ids (in id order)."""
    rows = await c.fetch(
        "SELECT id, ref, name, state, queue, last_error FROM jobs WHERE workflow_id = $1 ORDER BY id", workflow_id
    )
    nodes = {
        r[0]: {"id": r[0], "ref": r[1], "name": r[2], "state": r[3], "queue": r[4], "last_error": r[5], "parents": []}
        for r in rows
    }
    q = "SELECT d.parent_id, d.child_id FROM job_deps d JOIN jobs j ON j.id = d.child_id WHERE j.workflow_id = $1"
    for parent, child in await c.fetch(q, workflow_id):
        nodes[child]["parents"].append(parent)
    return list(nodes.values())


async def list_workflows(c: Conn, state: str | None, before_id: int | None,
                         limit: int) -> list[tuple[Workflow, dict[str, int]]]:  # fmt: skip
    """Workflows newest first, with their jobs counted by state."""
    rows = await c.fetch(f"{SELECT_WORKFLOW} WHERE ($1::text IS NULL OR state = $1) AND ($2::bigint IS NULL OR id < $2) "
                         "ORDER BY id DESC LIMIT $3", state, before_id, limit)  # fmt: skip
    return [(to_workflow(tuple(r)), await counts_of(c, r[0])) for r in rows]


async def parent_results(c: Conn, child_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """child id -> {parent's ref (or id): its result}."""
    out: dict[int, dict[str, Any]] = {i: {} for i in child_ids}
    q = ("SELECT d.child_id, p.id, p.ref, p.result FROM job_deps d JOIN jobs p ON p.id = d.parent_id "
         "WHERE d.child_id = ANY($1::bigint[])")  # fmt: skip
    for child, pid, ref, result in await c.fetch(q, list(child_ids)):
        out[child][ref or str(pid)] = sql.loads(result)
    return out
