"""Routes for jobs: submit (one or a batch), read, list, and the operator actions."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request

from core.api.access import principal_of, require
from core.api.app import JSON
from core.api.deps import Route, get_engine, parse_time
from core.api.fields import ID_MAX, NO_NUL, JobIdPath, QueryText, QueryTime, StatesQuery
from core.api.openapi import errors
from core.api.responses import AttemptList, BatchCreated, BulkResult, EventPage, JobOutput, JobPage, JobView
from core.api.schemas import BulkAction, JobBatch, JobCreate, PriorityChange, specs_of
from core.engine import Engine
from core.errors import Forbidden, InvalidInput, JobDeckError
from core.model import ALL_STATES, Job, job_to_dict
from core.store.base import EventFilter, JobFilter
from core.store.listing import next_cursor, parse_order

router = APIRouter(prefix="/v1", tags=["jobs"], route_class=Route)
EngineDep = Annotated[Engine, Depends(get_engine)]


async def view(job: Job, engine: Engine) -> dict[str, Any]:
    """A job as the API shows it, with why it waits when it cannot start (see Engine.waiting_for)
    and the link to its trace (trace_url_template)."""
    out = dict(job_to_dict(job), waiting_for=(await engine.waiting_for([job]))[job.id])
    template = engine.settings.trace_url_template
    if template and out["trace_id"]:
        out["trace_url"] = template.replace("{trace_id}", out["trace_id"])
    return out


@router.post(
    "/jobs",
    status_code=201,
    summary="Submit a job",
    response_model=JobView,
    responses={
        200: {
            "model": JobView,
            "description": "no new job: the one that had its idempotency key, or holds its unique key "
            "(deduplicated: true, deduplicated_by names which)",
        }
    },
)
async def create_job(body: JobCreate, engine: EngineDep, request: Request) -> JSON:
    """Store a job and return it (201), or answer 200 with the job that already had its idempotency
    key or holds its unique key (`deduplicated: true`, `deduplicated_by`)."""
    await require(request, "jobs.write", [body.queue])
    job, created = (await engine.submit([body.to_spec()], _parent_check(request)))[0]
    out = await view(job, engine)
    if not created:
        out["deduplicated"] = True
        same_key = body.idempotency_key is not None and job.idempotency_key == body.idempotency_key
        out["deduplicated_by"] = "idempotency_key" if same_key else "unique"
    return JSON(out, status_code=201 if created else 200)


@router.post("/jobs/batch", status_code=201, summary="Submit up to 10,000 jobs at once", response_model=BatchCreated)
async def create_jobs(body: JobBatch, engine: EngineDep, request: Request) -> JSON:
    """All are stored in one transaction, or none (a bad job is named by its index)."""
    await require(request, "jobs.write", (j.queue for j in body.jobs))
    out = await engine.submit(specs_of(body.jobs), _parent_check(request), batch=True)
    return JSON({"ids": [j.id for j, _ in out], "created": sum(1 for _, c in out if c)}, status_code=201)


def _parent_check(request: Request) -> Callable[[Job], None] | None:
    """A job may wait only for jobs its submitter can see (a team: jobs of its own queues)."""
    p = principal_of(request)
    if p.sees_everything:
        return None

    def check(parent: Job) -> None:
        if not p.may("jobs.read", parent.queue):
            raise Forbidden(f"job {parent.id} is in queue {parent.queue!r}, which {p.name} may not see")

    return check


SEARCH_HELP = "search: the id, or text in the name, task (command, URL, function, args) or tags"
SortName = Literal["id", "created", "priority", "state", "queue", "duration"]
SORT_HELP = "created is the id order; duration is the last attempt's (jobs without a finished one count as -1)"


@router.get("/jobs", summary="List jobs: filtered, searched, sorted on the server, paged, counted",
            response_model=JobPage)  # fmt: skip
async def list_jobs(
    engine: EngineDep,
    request: Request,
    state: StatesQuery = None,
    queue: QueryText = None,
    name_prefix: QueryText = None,
    tag: QueryText = None,
    q: Annotated[str | None, Query(max_length=200, pattern=NO_NUL, description=SEARCH_HELP)] = None,
    created_after: QueryTime = None,
    created_before: QueryTime = None,
    schedule_id: Annotated[int | None, Query(ge=1, le=ID_MAX)] = None,
    sort: Annotated[SortName, Query(description=SORT_HELP)] = "id",
    order: Literal["asc", "desc"] = "desc",
    cursor: Annotated[
        str | None, Query(max_length=300, pattern=NO_NUL, description="next_cursor of the previous page")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    count: Annotated[bool, Query(description="also return `total`: how many jobs match")] = False,
) -> JSON:
    """Filter by state, queue, name prefix, tag, search text and creation time; sort by a column
    (each served by an index, a page at a time); page with `cursor`. With `count=true`, `total` is
    the number of matches and `total_exact` says whether it was counted (True) or estimated."""
    states = parse_states(state, "state")
    flt = JobFilter(
        states=states,
        queue=queue,
        name_prefix=name_prefix,
        tag=tag,
        created_after=parse_time(created_after, "created_after"),
        created_before=parse_time(created_before, "created_before"),
        schedule_id=schedule_id,
        queue_patterns=visible_queues(request),
        search=(q or "").strip() or None,
    )
    ordering = parse_order(sort, order, cursor)
    _check_cursor(ordering.after)
    jobs = await engine.store.list_jobs(flt, None, limit, ordering)
    why = await engine.waiting_for(jobs)
    out: dict[str, Any] = {"jobs": [dict(job_to_dict(j), waiting_for=why[j.id]) for j in jobs], "next_cursor": next_cursor(jobs, limit, ordering),
                           "sort": sort, "order": order}  # fmt: skip
    if count:
        out["total"], out["total_exact"] = await engine.store.count_jobs(flt)
    return JSON(out)


def _check_cursor(after: tuple[Any, int] | None) -> None:
    """A cursor's numbers must fit the stores (64-bit integers, finite floats), or SQL would fail."""
    if after is None:
        return
    value, last_id = after
    bad_number = isinstance(value, int) and abs(value) > ID_MAX
    if not 0 <= last_id <= ID_MAX or bad_number or (isinstance(value, float) and not math.isfinite(value)):
        raise InvalidInput("cursor: not a cursor of this list; pass the next_cursor of the page before", field="cursor")


def parse_states(value: str | None, field: str) -> tuple[str, ...]:
    """A comma-separated list of job states, or a 422 naming the field and the unknown state."""
    states = tuple(s for s in (value or "").split(",") if s)
    bad = [s for s in states if s not in ALL_STATES]
    if bad:
        raise InvalidInput(f"{field}: unknown state {bad[0]!r}; use one of {', '.join(ALL_STATES)}", field=field)
    return states


def visible_queues(request: Request) -> tuple[str, ...]:
    """The queue patterns the caller sees; () when it sees every queue."""
    p = principal_of(request)
    return () if p.sees_everything else (p.queues or ("\x00none",))  # no team: a pattern nothing matches


def _selection(flt: dict[str, Any], request: Request) -> JobFilter:
    return JobFilter(states=parse_states(flt.get("state"), "filter.state"), queue=flt.get("queue"), name_prefix=flt.get("name_prefix"), tag=flt.get("tag"),
                     queue_patterns=visible_queues(request))  # fmt: skip


DRY_RUN_COUNT_MS = 1000  # how long a dry run may count on PostgreSQL before it reads the ids instead
SELECT_PAGE = 20_000  # ids read per page when a filter selects the jobs of a bulk action


async def _matching_ids(engine: Engine, flt: JobFilter) -> list[int]:
    """Every job the filter matches now, however many (newest first, a page at a time)."""
    ids: list[int] = []
    cursor = None
    while True:  # ids only, from the indexes: 700,000 matches in well under a second
        page = await engine.store.list_job_ids(flt, cursor, SELECT_PAGE)
        ids += page
        if len(page) < SELECT_PAGE:
            return ids
        cursor = page[-1]


@router.post("/jobs/bulk", summary="Cancel, pause, resume, retry or re-prioritise many jobs (ids or a filter)",
             response_model=BulkResult)  # fmt: skip
async def bulk_action(body: BulkAction, engine: EngineDep, request: Request) -> JSON:
    """Each job is changed or refused alone; `errors` lists the first 100 refusals with the reason.
    A filter takes every job it matches, in transactions of a few thousand jobs each."""
    matched: int | None = None
    if body.ids is not None:
        ids = list(dict.fromkeys(body.ids))
    else:
        assert body.filter is not None
        selection = _selection(body.filter.model_dump(), request)
        if body.dry_run:  # an exact count from the indexes when the store has one (a tag's key range: 0.1 s
            n, exact = await engine.store.count_jobs(selection, DRY_RUN_COUNT_MS)  # for 700,000), else the ids
            matched = n if exact else None
        ids = [] if matched is not None else await _matching_ids(engine, selection)
    if body.dry_run:
        return JSON({"action": body.action, "matched": len(ids) if matched is None else matched, "changed": 0,
                     "errors": [], "error_count": 0, "dry_run": True})  # fmt: skip
    p = principal_of(request)

    def check(job: Job) -> None:
        if not p.may("jobs.write", job.queue):
            raise Forbidden(p.refusal("jobs.write", job.queue))

    out = await engine.bulk(body.action, ids, body.priority, None if p.sees_everything else check)
    errors = [{"id": i, "error": r.code, "message": r.message} for i, r in out.items() if isinstance(r, JobDeckError)]
    return JSON({"action": body.action, "matched": len(ids), "changed": len(ids) - len(errors),
                 "errors": errors[:100], "error_count": len(errors)})  # fmt: skip


@router.get("/jobs/{job_id:id}", summary="Get a job", response_model=JobView)
async def get_job(job_id: JobIdPath, engine: EngineDep) -> JSON:
    out = await view(await engine.store.get_job(job_id), engine)
    out["parents"], out["children"] = await engine.store.job_edges(job_id)
    return JSON(out)


@router.get("/jobs/{job_id:id}/output", summary="The output tail of a job's latest attempt (live while it runs)",
            response_model=JobOutput)  # fmt: skip
async def get_output(job_id: JobIdPath, engine: EngineDep) -> JSON:
    job = await engine.store.get_job(job_id)
    live = engine.hub.live_output.get((job.id, job.attempt)) if job.state == "running" else None
    if live is not None:
        text = live
    else:
        attempts = await engine.store.list_attempts(job_id)
        text = (attempts[-1].get("output") or "") if attempts else ""
    limit = engine.settings.output_tail_bytes
    return JSON({"job_id": job.id, "attempt": job.attempt, "state": job.state, "running": job.state == "running",
                 "output": text, "limit_bytes": limit})  # fmt: skip


@router.get("/jobs/{job_id:id}/attempts", summary="A job's attempts with their output", response_model=AttemptList)
async def get_attempts(job_id: JobIdPath, engine: EngineDep) -> JSON:
    return JSON({"job_id": job_id, "attempts": await engine.store.list_attempts(job_id)})


@router.get("/jobs/{job_id:id}/events", summary="A job's events, oldest first", response_model=EventPage)
async def get_job_events(
    job_id: JobIdPath, engine: EngineDep, limit: Annotated[int, Query(ge=1, le=10_000)] = 1000
) -> JSON:
    await engine.store.get_job(job_id)
    events = await engine.store.events_since(0, limit, EventFilter(job_ids=frozenset({job_id: id})))
    return JSON(b'{"events":[' + b",".join(e.body for e in events) + b"]}")


@router.post("/jobs/{job_id:id}/cancel", summary="Cancel a job (a running one is stopped first)", response_model=JobView,
             responses=errors(409))  # fmt: skip
async def cancel_job(job_id: JobIdPath, engine: EngineDep) -> JSON:
    return JSON(await view(await engine.cancel(job_id), engine))


@router.post("/jobs/{job_id:id}/pause", summary="Pause a waiting job", response_model=JobView, responses=errors(409))
async def pause_job(job_id: JobIdPath, engine: EngineDep) -> JSON:
    return JSON(await view(await engine.pause(job_id), engine))


@router.post("/jobs/{job_id:id}/resume", summary="Resume a paused job", response_model=JobView, responses=errors(409))
async def resume_job(job_id: JobIdPath, engine: EngineDep) -> JSON:
    return JSON(await view(await engine.resume(job_id), engine))


@router.post("/jobs/{job_id:id}/retry", summary="Run a finished job again; replays a dead one", response_model=JobView,
             responses=errors(409))  # fmt: skip
async def retry_job(job_id: JobIdPath, engine: EngineDep) -> JSON:
    return JSON(await view(await engine.retry(job_id), engine))


@router.post("/jobs/{job_id:id}/run-now", summary="Queue a scheduled or delayed job now (keeps its priority)",
             response_model=JobView, responses=errors(409))  # fmt: skip
async def run_job_now(job_id: JobIdPath, engine: EngineDep) -> JSON:
    """For a job waiting for its `run_at`: a delay, a schedule's fire time (or its jitter), a retry's
    backoff. Any other state is a 409 naming it."""
    return JSON(await view(await engine.run_now(job_id), engine))


@router.post("/jobs/{job_id:id}/priority", summary="Set the priority of a waiting job", response_model=JobView,
             responses=errors(409))  # fmt: skip
async def set_priority(job_id: JobIdPath, body: PriorityChange, engine: EngineDep) -> JSON:
    return JSON(await view(await engine.set_priority(job_id, body.priority), engine))
