"""The archive of finished jobs (core/retention.py): its files, one archived job, and a restore
of a file's jobs into the store. Admins only: the archive holds every queue's jobs."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import Field

from core.api.app import JSON
from core.api.deps import Route, get_engine
from core.api.fields import PATTERN_WORDS, JobIdPath
from core.api.openapi import errors
from core.api.responses import ArchivedJob, ArchiveList, ArchiveRestored
from core.api.schemas import _Strict
from core.engine import Engine
from core.errors import InvalidInput, NotFound
from core.model import Job, job_to_dict
from core.retention import FILE_PATTERN, Archive, elsewhere, listing
from core.store.archive import from_record

router = APIRouter(tags=["archive"], route_class=Route)
EngineDep = Annotated[Engine, Depends(get_engine)]
RESTORE_BATCH = 1000
PATTERN_WORDS[FILE_PATTERN] = "must be an archive file's name such as jobs-2026-11-01.jsonl.gz (see jobdeck archive ls)"


class RestoreBody(_Strict):
    """Which archive file to put back."""

    file: str = Field(pattern=FILE_PATTERN, description="an archive file's name, e.g. jobs-2026-11-01.jsonl.gz")


def _archive(request: Request) -> Archive:
    archive: Archive = request.app.state.archive
    return archive


async def _recorded(engine: Engine) -> list[dict[str, Any]]:
    files = getattr(engine.store, "archive_files", None)
    return await files() if files is not None else []


@router.get("/v1/archive", summary="Every node's archive files of finished jobs, newest day first",
            response_model=ArchiveList)  # fmt: skip
async def list_archive(request: Request, engine: EngineDep) -> JSON:
    archive = _archive(request)
    local = await asyncio.to_thread(archive.files)
    files = listing(archive, await _recorded(engine), local)
    return JSON({"folder": str(archive.folder), "node": archive.node, "files": files})


@router.get("/v1/archive/jobs/{job_id:id}", summary="One archived job with its attempts (searches the newest files first)",
            response_model=ArchivedJob)  # fmt: skip
async def show_archived(job_id: JobIdPath, request: Request, engine: EngineDep) -> JSON:
    archive = _archive(request)
    recorded = await _recorded(engine)  # which files hold which ids: the one file to read, not every file
    hit = await asyncio.to_thread(archive.find, job_id, recorded)
    if hit is None:
        other = elsewhere(archive, recorded, job_id=job_id)
        raise NotFound(f"job {job_id} is in no archive file of this node (node {archive.node}, {archive.folder})"
                       f"{other or ' (jobdeck archive ls)'}", field="job_id")  # fmt: skip
    name, rec = hit
    job, attempts = from_record(rec)
    return JSON({"file": name, "job": job_to_dict(job), "attempts": attempts})


@router.post("/v1/archive/restore", summary="Put a file's archived jobs back into the store (ids kept; ones present skipped)",
             response_model=ArchiveRestored, responses=errors(404))  # fmt: skip
async def restore_archive(body: RestoreBody, request: Request, engine: EngineDep) -> JSON:
    archive = _archive(request)
    try:
        records = await asyncio.to_thread(lambda: list(archive.records(body.file)))
    except NotFound as e:
        other = elsewhere(archive, await _recorded(engine), file=body.file)
        raise NotFound(e.message + other, field="file") from None
    for i, r in enumerate(records):
        try:
            job = from_record(r)[0]
            if not isinstance(job, Job) or not isinstance(job.id, int):
                raise TypeError("id")
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(f"file: line {i + 1} of {body.file} is not an archived job ({exc}): nothing was "
                               "restored", field="file") from None  # fmt: skip
    restored = 0  # in batches, so the writer is not held; a restore that stops half-way can simply run again
    for i in range(0, len(records), RESTORE_BATCH):
        restored += await engine.store.restore_jobs(records[i : i + RESTORE_BATCH])  # type: ignore[attr-defined]
    return JSON({"file": body.file, "records": len(records), "restored": restored, "skipped": len(records) - restored})
