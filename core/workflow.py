"""Job dependencies: checking a DAG at submit, and what a job's parents ending does to it.

Pure functions; the stores call them inside the transaction that writes a parent's end, so a
child is released (or cancelled, or skipped) in the same commit as its last parent's result.

A child keeps two numbers the store maintains: `deps_left`, its parents that have not ended
yet, and `dep_failed`, the first parent that ended dead or cancelled. A parent ending takes
one from `deps_left` of each child (and a retry of it adds one back), so releasing a child
costs the same whatever its number of parents, and the row update that does it serialises
nodes finishing parents of one child at once: exactly one of them sees the count reach 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from core.errors import Conflict, InvalidInput, JobDeckError
from core.model import Change, Job, JobState, Policy, _move, iso, sort_key

S = JobState

POLICIES = ("cancel", "run", "skip")
POLICY_HELP = (
    "what this job does when a parent ends dead or cancelled: cancel (default: at once, naming the parent; "
    "its own children follow their policies), run (run once every parent has ended, whatever the outcome), "
    "skip (end as skipped once every parent has ended; a skipped job counts as succeeded for its children)"
)
#: parent states that count as done for a child (skipped: an optional step that did not run)
OK_STATES = frozenset({S.SUCCEEDED.value, S.SKIPPED.value})
FAILED_STATES = frozenset({S.DEAD.value, S.CANCELLED.value})
ENDED_STATES = OK_STATES | FAILED_STATES
MAX_WORKFLOW_JOBS = 10_000
MAX_PARENTS = 10_000
MAX_PARENT_RESULTS_BYTES = 1024 * 1024  # the parents' results a child receives (task.parent_results), as JSON


def parent_results_input(job_id: int, results: Mapping[str, Any]) -> dict[str, Any]:
    """What an assignment carries for a job that asked for its parents' results: the results, or
    the error that fails its attempt when they are over MAX_PARENT_RESULTS_BYTES."""
    size = len(orjson.dumps(results))
    if size > MAX_PARENT_RESULTS_BYTES:
        return {"parent_results_error": f"job {job_id}: its parents' results are {size:,} bytes of JSON, over the "
                f"limit of {MAX_PARENT_RESULTS_BYTES:,}: have the parents return less (a path or a key, not the data)"}  # fmt: skip
    return {"parent_results": dict(results)}


def find_cycle(parents: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A cycle of the graph (ref -> refs it depends on) as a path `a, b, c, a` where a depends on b...,
    or None. Iterative (a 10,000-deep chain does not hit the recursion limit)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(parents, WHITE)
    for root in parents:
        if colour[root] != WHITE:
            continue
        path = [root]
        stack = [iter(parents[root])]
        colour[root] = GREY
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = BLACK
                stack.pop()
                continue
            if nxt not in colour:
                continue  # an unknown ref: validate_workflow names it
            if colour[nxt] == GREY:
                return [*path[path.index(nxt) :], nxt]
            if colour[nxt] == WHITE:
                colour[nxt] = GREY
                path.append(nxt)
                stack.append(iter(parents[nxt]))
    return None


def validate_workflow(jobs: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Check the refs of a workflow's jobs and return, per job, the indices of its parents; raise
    InvalidInput naming the job and the field: a duplicate ref, an unknown ref, a job depending on
    itself, a cycle (spelled out `a -> b -> c -> a`)."""
    if len(jobs) > MAX_WORKFLOW_JOBS:
        raise InvalidInput(f"jobs: a workflow has at most {MAX_WORKFLOW_JOBS} jobs, not {len(jobs)}", field="jobs")
    index: dict[str, int] = {}
    for i, spec in enumerate(jobs):
        ref = spec["ref"]
        if ref in index:
            raise InvalidInput(f"jobs[{i}].ref: {ref!r} is the ref of jobs[{index[ref]}] already; refs are unique "
                               "within a workflow", field=f"jobs[{i}].ref")  # fmt: skip
        index[ref] = i
    out: list[list[int]] = []
    for i, spec in enumerate(jobs):
        deps = spec.get("depends_on")
        if not deps:
            out.append([])
            continue
        try:  # the usual case at a few dict look-ups per edge; a bad ref is named by _refuse_dep
            mine = [index[dep] for dep in deps]
        except KeyError:
            mine = [i]
        if i in mine:
            _refuse_dep(i, spec, index)
        out.append(list(dict.fromkeys(mine)))
    cycle = find_cycle({spec["ref"]: list(spec.get("depends_on") or ()) for spec in jobs}) if _cyclic(out) else None
    if cycle is not None:
        # the path follows depends_on; the cycle reads in run order the other way round
        spelled = " -> ".join(reversed(cycle))
        first = index[cycle[0]]
        raise InvalidInput(f"jobs[{first}].depends_on: the dependencies make a cycle, so none of these jobs could "
                           f"ever start: {spelled}", field=f"jobs[{first}].depends_on")  # fmt: skip
    return out


def _refuse_dep(i: int, spec: Mapping[str, Any], index: Mapping[str, int]) -> None:
    """Raise InvalidInput naming the first dependency of jobs[i] on itself or on an unknown ref."""
    for k, dep in enumerate(spec["depends_on"]):
        where = f"jobs[{i}].depends_on[{k}]"
        if dep == spec["ref"]:
            raise InvalidInput(f"{where}: job {dep!r} depends on itself", field=where)
        if dep not in index:
            raise InvalidInput(f"{where}: no job with ref {dep!r} in this workflow (refs: "
                               f"{_some(index)})", field=where)  # fmt: skip


def _cyclic(parents: Sequence[Sequence[int]]) -> bool:
    """Whether the graph (job index -> its parents' indices) has a cycle: Kahn's count of the jobs that
    could ever start, a few list operations per edge (find_cycle then spells the cycle out)."""
    waiting = [len(p) for p in parents]
    children: list[list[int]] = [[] for _ in parents]
    for child, mine in enumerate(parents):
        for p in mine:
            children[p].append(child)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    started = 0
    while ready:
        started += 1
        for child in children[ready.pop()]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    return started < len(parents)


def _some(index: Mapping[str, int]) -> str:
    refs = list(index)
    return ", ".join(map(repr, refs[:10])) + (f" and {len(refs) - 10} more" if len(refs) > 10 else "")


def parent_refused(parent: Job) -> str | None:
    """Why a new job may not depend on `parent` (it ended dead or cancelled: the child could never run), or None."""
    if parent.state in FAILED_STATES:
        return f"job {parent.id} ({parent.name}) ended {parent.state}: a job depending on it could never run"
    return None


def decide_release(job: Job, now: float, policy: Policy) -> Change | None:
    """What becomes of a blocked job after its parents' ends were counted: queued (or scheduled, if
    its run_at is later), cancelled naming the failed parent, skipped, or None (it waits on)."""
    if job.state != S.BLOCKED:
        return None
    failed = job.dep_failed
    if failed is not None and job.on_parent_failure == "cancel":
        why = f"parent job {failed} ended dead or cancelled"
        change = _move(job, S.CANCELLED, "cancel", now, finished_at=now, last_error=why, ended_by_parent=failed)
        change.data["reason"] = why
        change.data["parent"] = failed
        return change
    if job.deps_left > 0:
        return None
    if job.ref == RUN_END_REF:
        return decide_run_end(job, now)
    if failed is not None and job.on_parent_failure == "skip":
        why = f"skipped: parent job {failed} ended dead or cancelled"
        change = _move(job, S.SKIPPED, "skip", now, finished_at=now, last_error=why, ended_by_parent=failed)
        change.data.update(reason=why, parent=failed)
        return change
    if job.run_at > now:
        return _move(job, S.SCHEDULED, "release", now)
    # due from now: its pick-up latency (metrics, SLO, history) counts from its release, not its submit
    return _move(job, S.QUEUED, "release", now, run_at=now, sort_key=sort_key(now, job.priority, policy))


def decide_rearm(job: Job, deps_left: int, dep_failed: int | None, now: float) -> Change:
    """A job a dependency had cancelled or skipped waits again: a parent of it was retried."""
    change = _move(job, S.BLOCKED, "re-arm", now, finished_at=None, last_error=None, deps_left=deps_left,
                   dep_failed=dep_failed, ended_by_parent=None)  # fmt: skip
    change.data["reason"] = "a parent was retried"
    return change


def ended(before: str, after: str) -> int:
    """+1 if a job moved into an ended state, -1 if it left one (a retry), else 0."""
    return (after in ENDED_STATES) - (before in ENDED_STATES)


def workflow_state(counts: Mapping[str, int], cancel_requested: bool) -> str:
    """running while any job has not ended; then cancelled (the workflow was cancelled), failed (a job
    ended dead or cancelled) or succeeded."""
    if any(n and s not in ENDED_STATES for s, n in counts.items()):
        return "running"
    if cancel_requested:
        return "cancelled"
    if counts.get(S.DEAD.value) or counts.get(S.CANCELLED.value):
        return "failed"
    return "succeeded"


def count_parent_ends(
    edges: Sequence[tuple[int, int]], deltas: Mapping[int, int], failed: set[int], children: Mapping[int, Job]
) -> set[int]:
    """Count parents' ends (+1) and retries (-1) into their children's `deps_left` and `dep_failed`;
    return the children whose failed parent was retried (their `dep_failed` must be looked up again)."""
    recompute: set[int] = set()
    for parent, child_id in edges:
        child = children.get(child_id)
        if child is None:
            continue
        d = deltas[parent]
        child.deps_left -= d
        if d > 0 and parent in failed and (child.dep_failed is None or parent < child.dep_failed):
            child.dep_failed = parent
        elif d <= 0 and child.dep_failed == parent:  # retried, or a late success (d == 0)
            recompute.add(child_id)
    return recompute


def decide_after_parents(job: Job, retried: set[int], was_failed_by: int | None, now: float,
                         policy: Policy) -> Change | None:  # fmt: skip
    """After its parents' ends were counted: a job a retried parent had cancelled or skipped waits
    again (not one a person cancelled: `ended_by_parent` says who ended it); a blocked one is
    released, cancelled or skipped (decide_release)."""
    by_parent = job.ended_by_parent is not None
    if job.state in (S.CANCELLED, S.SKIPPED) and by_parent and was_failed_by is not None and was_failed_by in retried:
        return decide_rearm(job, job.deps_left, job.dep_failed, now)
    return decide_release(job, now, policy)


@dataclass(slots=True)
class Deps:
    """The parents of one job being submitted: existing jobs by id, and earlier jobs of the same
    submit by their position in it. `where` names the field in errors (`jobs[3].depends_on`)."""

    ids: list[int] = field(default_factory=list)
    index: list[int] = field(default_factory=list)
    where: str = "depends_on"


def plan_dependencies(
    jobs: Sequence[Job], deps: Sequence[Deps | None], parents: Mapping[int, Job], check: Callable[[Job], None] | None
) -> None:
    """Before a submit writes anything: refuse a missing parent, one that ended dead or cancelled
    (InvalidInput naming the job and field) or one the caller may not see (`check` raises); set each
    job's count of parents not ended yet, and make it blocked if any."""
    for job, dep in zip(jobs, deps, strict=True):
        if dep is None:
            continue
        waiting = len(dep.index)
        for k, pid in enumerate(dep.ids):
            where = f"{dep.where}[{k}]"
            parent = parents.get(pid)
            if parent is None:
                raise InvalidInput(f"{where}: no job with id {pid}", field=where)
            if check is not None:
                try:
                    check(parent)
                except JobDeckError as exc:  # named as the other refusals are: the field, then why
                    raise type(exc)(f"{where}: {exc.message}", field=where, **exc.extra) from None
            why = parent_refused(parent)
            if why is not None:
                raise InvalidInput(f"{where}: {why}", field=where)
            waiting += parent.state not in ENDED_STATES
        job.deps_left = waiting
        if waiting:
            job.state = S.BLOCKED.value


def edges_of(jobs: Sequence[Job], deps: Sequence[Deps | None]) -> list[tuple[int, int]]:
    """(parent id, child id) of every dependency, once the jobs have their ids."""
    out: list[tuple[int, int]] = []
    for job, dep in zip(jobs, deps, strict=True):
        if dep is not None:
            out += [(pid, job.id) for pid in dict.fromkeys(dep.ids)]
            out += [(jobs[i].id, job.id) for i in dict.fromkeys(dep.index)]
    return out


@dataclass(slots=True)
class Workflow:
    """A workflow as stored: its jobs carry its id. Times are Unix seconds."""

    id: int
    name: str
    state: str  # running | succeeded | failed | cancelled
    total: int
    queues: list[str]  # of its jobs (who may see and change it)
    cancel_requested: bool
    paused: bool
    created_at: float
    updated_at: float
    finished_at: float | None = None


WORKFLOW_COLUMNS = ("id", "name", "state", "total", "queues", "cancel_requested", "paused", "created_at", "updated_at",
                    "finished_at")  # fmt: skip
WORKFLOW_STATES = ("running", "succeeded", "failed", "cancelled")


def workflow_summary(wf: Workflow) -> dict[str, Any]:
    """What a workflow event carries."""
    return {"id": wf.id, "name": wf.name, "state": wf.state, "total": wf.total, "queues": wf.queues,
            "paused": wf.paused, "cancel_requested": wf.cancel_requested}  # fmt: skip


def workflow_to_dict(wf: Workflow, counts: Mapping[str, int]) -> dict[str, Any]:
    """The public view of a workflow (the API's JSON), with its jobs counted by state."""
    return {
        **workflow_summary(wf),
        "created_at": iso(wf.created_at),
        "updated_at": iso(wf.updated_at),
        "finished_at": iso(wf.finished_at),
        "counts": dict(counts),
    }


#: the job states each workflow action takes, and the flag it sets
WORKFLOW_ACTIONS: dict[str, tuple[frozenset[str], str, bool]] = {
    "cancel": (frozenset({"blocked", "scheduled", "queued", "running", "failed", "paused"}), "cancel_requested", True),
    "pause": (frozenset({"blocked", "scheduled", "queued", "failed"}), "paused", True),
    "resume": (frozenset({"paused"}), "paused", False),
}


def check_workflow_action(wf: Workflow, action: str) -> None:
    """Raise Conflict, naming the state, unless `action` applies to the workflow now."""
    if wf.state != "running":
        raise Conflict(f"cannot {action} workflow {wf.id}: it is {wf.state}", state=wf.state)
    if action == "pause" and wf.paused:
        raise Conflict(f"cannot pause workflow {wf.id}: it is paused already", state="paused")
    if action == "resume" and not wf.paused:
        raise Conflict(f"cannot resume workflow {wf.id}: it is not paused", state="running")
    if wf.cancel_requested:
        raise Conflict(f"cannot {action} workflow {wf.id}: it is being cancelled", state="cancelling")


# ---------------------------------------------------------------- a schedule that fires a workflow

#: The ref of a scheduled workflow run's end job (a ref no user can give: REF_PATTERN starts otherwise).
RUN_END_REF = ":run"
RUN_END_TASK = {"kind": "python", "function": "agents.builtin:noop"}


def run_end_spec(schedule_name: str, template: Mapping[str, Any], run_at: float | None) -> dict[str, Any]:
    """The job a workflow schedule's fire time makes: its run's *end job*. It waits on every job of the
    workflow and ends in place once all have ended, whatever their outcome, with the workflow's outcome
    (decide_run_end), so the run counts as going for the overlap policy exactly while its workflow does
    and its outcome counts for pause_after_failures. A buffered run is the end job alone until it may
    start. `run_at` (the fire time plus jitter) is when the workflow's first jobs may start."""
    return {"name": f"{schedule_name}: end of run", "queue": template.get("queue") or "default",
            "task": dict(RUN_END_TASK), "max_attempts": 1, "on_parent_failure": "run", "run_at": run_at,
            "ref": RUN_END_REF}  # fmt: skip


def decide_run_end(job: Job, now: float) -> Change:
    """A scheduled workflow run's end job, once every job of its workflow ended: it ends in place
    with the workflow's outcome (no agent runs it), so the schedule sees the run's outcome: cancelled
    if its workflow was cancelled (`cancel_requested`), dead if a job of it ended dead or cancelled
    (a failed run for pause_after_failures), else succeeded."""
    if job.cancel_requested:
        why = f"workflow {job.workflow_id} was cancelled"
        change = _move(job, S.CANCELLED, "end run", now, finished_at=now, last_error=why, cancel_requested=False)
        change.data["reason"] = why
        return change
    if job.dep_failed is not None:
        why = f"workflow {job.workflow_id} failed: job {job.dep_failed} ended dead or cancelled"
        return _move(job, S.DEAD, "end run", now, finished_at=now, last_error=why)
    return _move(job, S.SUCCEEDED, "end run", now, finished_at=now, last_error=None)


def decide_workflow_job(action: str, decide: Callable[[Job], Change], now: float) -> Callable[[Job], Change]:
    """`decide` for each job a workflow action takes, except that cancelling leaves a scheduled run's
    end job waiting, marked: it ends (cancelled) once every other job really stopped, so the schedule
    sees the run going until then (cancel_previous starts the next run only after that)."""
    if action != "cancel":
        return decide

    def per_job(job: Job) -> Change:
        if job.ref == RUN_END_REF and job.state == S.BLOCKED:
            return Change({"cancel_requested": True, "updated_at": now}, "job.cancel_requested", {"from": job.state})
        return decide(job)

    return per_job


def run_started(job: Job, workflow_id: int, jobs: int, now: float) -> Change:
    """A buffered workflow run may start: its workflow was made around its end job, which now waits
    on the workflow's `jobs` (still blocked; for the overlap policy the run is going)."""
    if job.state != S.BLOCKED or job.ref != RUN_END_REF:
        raise Conflict(f"job {job.id} is not a buffered workflow run", state=job.state, job_id=job.id)
    return Change({"workflow_id": workflow_id, "deps_left": jobs, "updated_at": now}, "job.run_started",
                  {"from": job.state, "workflow_id": workflow_id})  # fmt: skip


def is_buffered_run(job: Job) -> bool:
    """A workflow schedule's run that waits for the runs before it: its end job alone, blocked, with
    no workflow yet (the workflow is made when the run may start)."""
    return job.ref == RUN_END_REF and job.workflow_id is None and job.state == S.BLOCKED


def workflow_run(template: Mapping[str, Any], end: Job, now: float, policy: Policy) -> tuple[str, list[Job], list[Deps | None]]:  # fmt: skip
    """The workflow a fire time submits around its end job `end` (the schedule's template, checked when
    it was saved): (its name, its jobs with `end` last, each job's parents as indices)."""
    from core.model import build_job

    wf = template["workflow"]
    specs = [dict(spec) for spec in wf["jobs"]]
    for spec in specs:
        if not spec.get("depends_on") and end.run_at > now and spec.get("run_at") is None:
            spec["run_at"] = end.run_at  # the jitter: the first jobs start at the run's time
    parents = validate_workflow(specs)
    jobs = [build_job(spec, now, policy) for spec in specs]
    for j in jobs:
        j.traceparent = end.traceparent  # the firing's trace (or the operator's request) covers the whole run
    end.ref = RUN_END_REF
    deps: list[Deps | None] = [Deps(index=p) if p else None for p in parents]
    return str(wf["name"]), [*jobs, end], [*deps, Deps(index=list(range(len(jobs))))]
