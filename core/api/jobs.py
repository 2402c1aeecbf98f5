"""Routes for jobs: submit (one or a batch), read, list, and the operator actions."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request

from core.api.access import principal_of, require
from core.api.app import JSON
from core.api.deps import Route, get_engine, parse_time
from core.api.schemas import BULK_MAX, BulkAction, JobBatch, JobCreate, PriorityChange, specs_of
from core.engine import Engine
from core.errors import Forbidden, InvalidInput, JobDeckError
from core.model import ALL_STATES, Job, job_to_dict
from core.store.base import EventFilter, JobFilter
from core.store.listing import next_cursor, parse_order

router = APIRouter(prefix="/v1", tags=["jobs"], route_class=Route)
EngineDep = Annotated[Engine, Depends(get_engine)]


def view(job: Job, engine: Engine) -> dict[str, Any]:
    """A job as the API shows it, with why it waits when no agent can take it."""
    out = job_to_dict(job)
    out["waiting_for"] = engine.hub.waiting_for(job)
    return out


@router.post("/jobs", status_code=201, summary="Submit a job")
async def create_job(body: JobCreate, engine: EngineDep, request: Request) -> JSON:
    """Store a job and return it (200 with the existing job if its idempotency key was used before)."""
    await require(request, "jobs.write", [body.queue])
    job, created = (await engine.submit([body.to_spec()]))[0]
    out = view(job, engine)
    if not created:
        out["deduplicated"] = True  # its idempotency key was used before: this is that job
    return JSON(out, status_code=201 if created else 200)


@router.post("/jobs/batch", status_code=201, summary="Submit up to 10,000 jobs at once")
async def create_jobs(body: JobBatch, engine: EngineDep, request: Request) -> dict[str, Any]:
    """All are stored in one transaction, or none (a bad job is named by its index)."""
    await require(request, "jobs.write", (j.queue for j in body.jobs))
    out = await engine.submit(specs_of(body.jobs))
    return {"ids": [j.id for j, _ in out], "created": sum(1 for _, c in out if c)}


SEARCH_HELP = "search: the id, or text in the name, task (command, URL, function, args) or tags"
SortName = Literal["id", "created", "priority", "state", "queue", "duration"]
SORT_HELP = "created is the id order; duration is the last attempt's (jobs without a finished one count as -1)"


@router.get("/jobs", summary="List jobs: filtered, searched, sorted on the server, paged, counted")
async def list_jobs(
    engine: EngineDep,
    request: Request,
    state: Annotated[str | None, Query(description="comma-separated states")] = None,
    queue: str | None = None,
    name_prefix: str | None = None,
    tag: str | None = None,
    q: Annotated[str | None, Query(max_length=200, description=SEARCH_HELP)] = None,
    created_after: Annotated[str | None, Query(description="ISO 8601")] = None,
    created_before: Annotated[str | None, Query(description="ISO 8601")] = None,
    schedule_id: int | None = None,
    sort: Annotated[SortName, Query(description=SORT_HELP)] = "id",
    order: Literal["asc", "desc"] = "desc",
    cursor: Annotated[str | None, Query(max_length=300, description="next_cursor of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    count: Annotated[bool, Query(description="also return `total`: how many jobs match")] = False,
) -> dict[str, Any]:
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
    jobs = await engine.store.list_jobs(flt, None, limit, ordering)
    out: dict[str, Any] = {"jobs": [view(j, engine) for j in jobs], "next_cursor": next_cursor(jobs, limit, ordering),
                           "sort": sort, "order": order}  # fmt: skip
    if count:
        out["total"], out["total_exact"] = await engine.store.count_jobs(flt)
    return out


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


@router.post("/jobs/bulk", summary="Cancel, pause, resume, retry or re-prioritise many jobs (ids or a filter)")
async def bulk_action(body: BulkAction, engine: EngineDep, request: Request) -> dict[str, Any]:
    """Each job is changed or refused alone; `errors` lists the first 100 refusals with the reason."""
    if body.ids is not None:
        ids = list(dict.fromkeys(body.ids))
    else:
        assert body.filter is not None
        flt = _selection(body.filter.model_dump(), request)
        ids, cursor = [], None
        while len(ids) < BULK_MAX:
            page = await engine.store.list_jobs(flt, cursor, 1000)
            ids += [j.id for j in page]
            if len(page) < 1000:
                break
            cursor = page[-1].id
    if body.dry_run:
        return {"action": body.action, "matched": len(ids), "changed": 0, "errors": [], "error_count": 0,
                "dry_run": True}  # fmt: skip
    p = principal_of(request)

    def check(job: Job) -> None:
        if not p.may("jobs.write", job.queue):
            raise Forbidden(p.refusal("jobs.write", job.queue))

    out = await engine.bulk(body.action, ids, body.priority, None if p.sees_everything else check)
    errors = [{"id": i, "error": r.code, "message": r.message} for i, r in out.items() if isinstance(r, JobDeckError)]
    return {"action": body.action, "matched": len(ids), "changed": len(ids) - len(errors), "errors": errors[:100],
            "error_count": len(errors)}  # fmt: skip


@router.get("/jobs/{job_id}", summary="Get a job")
async def get_job(job_id: int, engine: EngineDep) -> dict[str, Any]:
    return view(await engine.store.get_job(job_id), engine)


@router.get("/jobs/{job_id}/output", summary="The output tail of a job's latest attempt (live while it runs)")
async def get_output(job_id: int, engine: EngineDep) -> dict[str, Any]:
    job = await engine.store.get_job(job_id)
    live = engine.hub.live_output.get((job.id, job.attempt)) if job.state == "running" else None
    if live is not None:
        text = live
    else:
        attempts = await engine.store.list_attempts(job_id)
        text = (attempts[-1].get("output") or "") if attempts else ""
    limit = engine.settings.output_tail_bytes
    return {"job_id": job.id, "attempt": job.attempt, "state": job.state, "running": job.state == "running",
            "output": text, "limit_bytes": limit}  # fmt: skip


@router.get("/jobs/{job_id}/attempts", summary="A job's attempts with their output")
async def get_attempts(job_id: int, engine: EngineDep) -> dict[str, Any]:
    return {"job_id": job_id, "attempts": await engine.store.list_attempts(job_id)}


@router.get("/jobs/{job_id}/events", summary="A job's events, oldest first")
async def get_job_events(job_id: int, engine: EngineDep, limit: Annotated[int, Query(ge=1, le=10_000)] = 1000) -> JSON:
    await engine.store.get_job(job_id)
    events = await engine.store.events_since(0, limit, EventFilter(job_ids=frozenset({job_id})))
    return JSON(b'{"events":[' + b",".join(e.body for e in events) + b"]}")


@router.post("/jobs/{job_id}/cancel", summary="Cancel a job (a running one is stopped first)")
async def cancel_job(job_id: int, engine: EngineDep) -> dict[str, Any]:
    return view(await engine.cancel(job_id), engine)


@router.post("/jobs/{job_id}/pause", summary="Pause a waiting job")
async def pause_job(job_id: int, engine: EngineDep) -> dict[str, Any]:
    return view(await engine.pause(job_id), engine)


@router.post("/jobs/{job_id}/resume", summary="Resume a paused job")
async def resume_job(job_id: int, engine: EngineDep) -> dict[str, Any]:
    return view(await engine.resume(job_id), engine)


@router.post("/jobs/{job_id}/retry", summary="Run a finished job again; replays a dead one")
async def retry_job(job_id: int, engine: EngineDep) -> dict[str, Any]:
    return view(await engine.retry(job_id), engine)


@router.post("/jobs/{job_id}/priority", summary="Set the priority of a waiting job")
async def set_priority(job_id: int, body: PriorityChange, engine: EngineDep) -> dict[str, Any]:
    return view(await engine.set_priority(job_id, body.priority), engine)
