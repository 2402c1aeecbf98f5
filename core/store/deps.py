"""Dependencies in the store's transaction: after jobs change, count their ends into their children
and apply the release decisions of core/workflow.py, then bring their workflows up to date.

One algorithm for both stores. It talks to the database through `DepsIO`, whose methods are
coroutines: PostgreSQL's await asyncpg; SQLite's (in the writer thread) never suspend, and
`run_sync` drives them to the end without an event loop.
"""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from typing import Any, Protocol, TypeVar

from core.errors import Conflict
from core.model import Change, Job, JobState, Policy
from core.workflow import (
    FAILED_STATES,
    OK_STATES,
    count_parent_ends,
    decide_after_parents,
    decide_release,
    ended,
    workflow_state,
)

T = TypeVar("T")


def refuse_known_keys(known: Sequence[Any] | None) -> None:
    """A workflow is stored whole or not at all: a job key (id, idempotency key) already stored is a Conflict."""
    if known is not None:
        raise Conflict(f"a job with idempotency key {known[1]!r} exists already (job {known[0]}): the workflow "
                       "was submitted before", field="idempotency_key", job_id=int(known[0]))  # fmt: skip


class DepsIO(Protocol):
    """What settle needs of one store's transaction."""

    def apply(self, job: Job, change: Change) -> Job: ...
    async def flush(self) -> None: ...
    async def edges_from(self, parents: Sequence[int]) -> list[tuple[int, int]]: ...
    async def lock_jobs(self, ids: Sequence[int]) -> dict[int, Job]: ...
    async def write_counts(self, rows: Sequence[tuple[int, int, int | None]]) -> None: ...
    async def failed_parents(self, children: Sequence[int]) -> dict[int, int]: ...
    async def with_parents(self, ids: Sequence[int]) -> set[int]: ...
    async def workflows_to_update(self, ids: Sequence[int]) -> list[tuple[int, str, bool, bool]]: ...
    async def workflow_counts(self, workflow_id: int) -> dict[str, int]: ...
    async def set_workflow_state(self, workflow_id: int, state: str, finished_at: float | None) -> dict[str, Any]: ...


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (SQLite's DepsIO) to its result."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a store coroutine suspended in the SQLite writer")


async def settle(io: DepsIO, moved: list[tuple[Job, str]], now: float, policy: Policy) -> list[Job]:
    """`moved`: the jobs this transaction changed, each with its state before. Round after round
    (a cancel, a skip or a re-arm travels down the graph), until nothing more changes. Returns the
    jobs it changed (a scheduled workflow run's end job among them ends its run)."""
    workflows: set[int] = set()
    changed: list[Job] = []
    while moved:
        deltas: dict[int, int] = {}
        failed: set[int] = set()
        retried: set[int] = set()
        waiting: dict[int, Job] = {}  # jobs that came back to blocked (a resume): decide on them too
        for job, before in moved:
            if job.workflow_id is not None and before != job.state:
                workflows.add(job.workflow_id)
            d = ended(before, job.state)
            if d:
                deltas[job.id] = d
                (failed if d > 0 and job.state in FAILED_STATES else retried if d < 0 else set()).add(job.id)
            elif before in FAILED_STATES and job.state in OK_STATES:  # a late result: dead -> succeeded
                deltas[job.id] = 0  # still ended; what it cancelled waits again, as for a retry
                retried.add(job.id)
            if job.state == JobState.BLOCKED and before != JobState.BLOCKED and d == 0:
                waiting[job.id] = job
        if waiting:  # only jobs with parents (a schedule's buffered run is blocked too, on its own terms)
            keep = await io.with_parents(sorted(waiting))
            waiting = {i: j for i, j in waiting.items() if i in keep}
        children: dict[int, Job] = {}
        was_failed_by: dict[int, int | None] = {}
        if deltas:
            edges = await io.edges_from(sorted(deltas))
            if edges:
                children = await io.lock_jobs(sorted({c for _, c in edges}))
                was_failed_by = {c: j.dep_failed for c, j in children.items()}
                recompute = count_parent_ends(edges, deltas, failed, children)
                if recompute:
                    found = await io.failed_parents(sorted(recompute))
                    for c in recompute:
                        children[c].dep_failed = found.get(c)
                await io.write_counts([(j.id, j.deps_left, j.dep_failed) for j in children.values()])
        waiting.update(children)
        moved = []
        for job in waiting.values():
            before = job.state
            change = decide_after_parents(job, retried, was_failed_by.get(job.id), now, policy)
            if change is not None:
                io.apply(job, change)
                moved.append((job, before))
                changed.append(job)
                if job.state == JobState.BLOCKED and (again := decide_release(job, now, policy)) is not None:
                    io.apply(job, again)  # re-armed with every parent done already (a late result)
        await io.flush()
    if workflows:
        await update_workflows(io, sorted(workflows), now)
    return changed


async def update_workflows(io: DepsIO, ids: Sequence[int], now: float) -> None:
    """A workflow whose last job ended is succeeded, failed or cancelled; one a retry reopened is
    running again. Each change writes a `workflow.<state>` event."""
    for wf_id, state, cancel_requested, has_open in await io.workflows_to_update(ids):
        if has_open and state != "running":
            await io.set_workflow_state(wf_id, "running", None)
        elif not has_open and state == "running":
            counts = await io.workflow_counts(wf_id)
            await io.set_workflow_state(wf_id, workflow_state(counts, cancel_requested), now)
