"""Routes for workflows: submit a DAG of jobs in one call, list and read them, cancel, pause, resume."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from core.api.access import principal_of, require
from core.api.app import JSON
from core.api.deps import Route, get_engine
from core.api.fields import ID_MAX, WorkflowIdPath
from core.api.openapi import errors
from core.api.responses import WorkflowCreated, WorkflowDetail, WorkflowPage, WorkflowStateName, WorkflowView
from core.api.schemas import WorkflowCreate
from core.engine import Engine
from core.workflow import Workflow, workflow_to_dict

router = APIRouter(prefix="/v1", tags=["workflows"], route_class=Route)
EngineDep = Annotated[Engine, Depends(get_engine)]


@router.post("/workflows", status_code=201, summary="Submit a workflow: up to 10,000 jobs and their dependencies",
             response_model=WorkflowCreated, responses=errors(409))  # fmt: skip
async def create_workflow(body: WorkflowCreate, engine: EngineDep, request: Request) -> JSON:
    """All jobs and edges are stored in one transaction, or none. A cycle is refused with the cycle
    spelled out (`a -> b -> c -> a`); an unknown ref or a job depending on itself is a 422 naming
    the job (`jobs[3].depends_on[0]`). A 409 names the job whose unique key is held (or given twice)
    or whose idempotency key is stored already."""
    await require(request, "jobs.write", (j.queue for j in body.jobs))
    wf, jobs = await engine.submit_workflow(body.name, body.specs())
    counts: dict[str, int] = {}
    for j in jobs:
        counts[j.state] = counts.get(j.state, 0) + 1
    return JSON({"workflow": workflow_to_dict(wf, counts), "ids": {j.ref: j.id for j in jobs}}, status_code=201)


def _visible(request: Request, wf: Workflow) -> bool:
    p = principal_of(request)
    return p.sees_everything or all(p.may("jobs.read", q) for q in wf.queues)


@router.get("/workflows", summary="List workflows, newest first", response_model=WorkflowPage)
async def list_workflows(
    engine: EngineDep,
    request: Request,
    state: WorkflowStateName | None = None,
    cursor: Annotated[int | None, Query(ge=1, le=ID_MAX, description="next_cursor of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> JSON:
    """Each with its jobs counted by state. A team sees the workflows whose jobs are all in its queues."""
    rows = await engine.store.list_workflows(state, cursor, limit)
    out: list[dict[str, Any]] = [workflow_to_dict(wf, counts) for wf, counts in rows if _visible(request, wf)]
    nxt = rows[-1][0].id if len(rows) == limit else None
    return JSON({"workflows": out, "next_cursor": nxt})


@router.get("/workflows/{workflow_id:id}", summary="Get a workflow with its graph", response_model=WorkflowDetail)
async def get_workflow(workflow_id: WorkflowIdPath, engine: EngineDep) -> JSON:
    """Its state and counts, and every job as a node with its parents (to draw the DAG)."""
    wf, counts = await engine.store.get_workflow(workflow_id)
    return JSON({**workflow_to_dict(wf, counts), "nodes": await engine.store.workflow_graph(workflow_id)})


async def _act(engine: Engine, workflow_id: int, action: str) -> JSON:
    await engine.change_workflow(workflow_id, action)
    wf, counts = await engine.store.get_workflow(workflow_id)
    return JSON(workflow_to_dict(wf, counts))


@router.post("/workflows/{workflow_id:id}/cancel", summary="Cancel every job of a workflow that has not ended",
             response_model=WorkflowView, responses=errors(409))  # fmt: skip
async def cancel_workflow(workflow_id: WorkflowIdPath, engine: EngineDep) -> JSON:
    """Running jobs are asked to stop; the workflow ends cancelled once they have. 409 if it has ended."""
    return await _act(engine, workflow_id, "cancel")


@router.post("/workflows/{workflow_id:id}/pause", summary="Pause every waiting job of a workflow",
             response_model=WorkflowView, responses=errors(409))  # fmt: skip
async def pause_workflow(workflow_id: WorkflowIdPath, engine: EngineDep) -> JSON:
    """Running jobs finish; nothing else starts until resumed. 409 naming the state if it has ended."""
    return await _act(engine, workflow_id, "pause")


@router.post("/workflows/{workflow_id:id}/resume", summary="Resume a paused workflow",
             response_model=WorkflowView, responses=errors(409))  # fmt: skip
async def resume_workflow(workflow_id: WorkflowIdPath, engine: EngineDep) -> JSON:
    """Its paused jobs go back where they were; a blocked one whose parents are done is queued. 409 if not paused."""
    return await _act(engine, workflow_id, "resume")
