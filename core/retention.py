"""Retention: finished jobs older than their queue's retention leave the store for the archive.

The archive is the cold tier: one gzip-compressed JSON Lines file per day of finish
(`jobs-2026-11-01.jsonl.gz` in `archive_dir`), one record per job with its attempts and output
(core/store/archive.py). Each round takes a small batch (oldest first), appends it to the day's
file and syncs it to disk, and only then purges the batch from the store, in write operations of
about 10 ms each (core/store/archive.py PURGE_SLICE), with a pause before the next batch: the store's
one writer is never held for long. The first of them also records the files the batch went to (the
store's archive_files: node, folder, file, jobs, ids), so any node lists every node's files (`listing`). A crash
between the append and the purge archives those jobs again next round; a restore skips ids the
store has, so the duplicate is harmless.

Idempotency keys live on their job: a key is remembered while its job is kept, and a second
submit with it after the purge makes a new job. Audit rows (audit_retention_days, a year) and
events (event_retention_hours) are pruned by the engine as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import os
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from core.config import Settings
from core.errors import InvalidInput, NotFound
from core.model import utcnow
from core.relay.relay import node_identity
from core.store.archive import ArchivedFile, ArchiveLine, Cutoffs

log = logging.getLogger("jobdeck.retention")

FILE_NAME = re.compile(r"^jobs-(\d{4}-\d{2}-\d{2})\.jsonl\.gz$")
FILE_PATTERN = r"^jobs-\d{4}-\d{2}-\d{2}\.jsonl\.gz$"
DAY = 86400.0
LEASE = "retention"  # the store's lease row (core/store/relay_cursors.py LEASE_ONLY)
LEASE_SECONDS = 120.0  # renewed before each batch; a batch (read, archive with fsync, purge) takes far less
# Retention is background work: while the node's claims pick jobs up later than PICKUP_BEHIND after they
# were due, the next batch waits, in steps of YIELD_STEP, up to MAX_YIELD a batch (so a node that is
# always behind still purges, at least a batch every MAX_YIELD). The purge's CPU then goes to the
# claims when they need it, not on top of a backlog it helps to build.
PICKUP_BEHIND = 0.05
YIELD_STEP = 0.05
MAX_YIELD = 0.5


def archive_dir(settings: Settings) -> Path:
    """Where the archive files are: `archive_dir`, else DATA_DIR/archive."""
    return Path(settings.archive_dir).expanduser() if settings.archive_dir else settings.data_dir / "archive"


def archive_node(settings: Settings) -> str:
    """This node's name in the store's list of archive files: `archive_node`, else its host name."""
    return settings.archive_node or socket.gethostname()


def cutoffs(settings: Settings, now: float) -> Cutoffs | None:
    """The times before which finished jobs go, or None when every job is kept (retention 0)."""
    if settings.job_retention_days <= 0:
        return None
    per_queue = {q: now - d * DAY if d > 0 else float("-inf") for q, d in settings.queue_retention_days.items()}
    return Cutoffs(now - settings.job_retention_days * DAY, per_queue)


class Archive:
    """The archive folder: append records by day of finish, list the files, read them back."""

    def __init__(self, folder: Path, node: str = "") -> None:
        self.folder = folder
        self.node = node or socket.gethostname()

    def append(self, lines: list[ArchiveLine], node: str = "") -> list[ArchivedFile]:
        """Append the jobs' lines to their days' files and sync them (blocking: run in a thread); what
        was appended to each file, for the store's list of every node's files."""
        by_day: dict[str, list[ArchiveLine]] = {}
        for line in lines:
            by_day.setdefault(line.day, []).append(line)
        self.folder.mkdir(parents=True, exist_ok=True)
        appended = []
        for day, of_day in by_day.items():
            path = self.folder / f"jobs-{day}.jsonl.gz"
            # each append is a gzip member of its own: a file of several members is one valid gzip stream
            with open(path, "ab") as raw:
                with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) as gz:
                    gz.write(b"".join(line.json + b"\n" for line in of_day))
                raw.flush()
                os.fsync(raw.fileno())
                size = raw.tell()
            ids = [line.id for line in of_day]
            appended.append(ArchivedFile(node, str(self.folder), path.name, day, len(of_day), size, min(ids),
                                         max(ids)))  # fmt: skip
        return appended

    def files(self) -> list[dict[str, Any]]:
        """The archive files, newest day first: name, day, size in bytes."""
        if not self.folder.is_dir():
            return []
        out = []
        for p in self.folder.iterdir():
            m = FILE_NAME.match(p.name)
            if m is not None:
                out.append({"file": p.name, "day": m.group(1), "bytes": p.stat().st_size})
        return sorted(out, key=lambda f: str(f["day"]), reverse=True)

    def path(self, name: str) -> Path:
        """An archive file by name (a bare name: no folders, so no path leaves the archive)."""
        if FILE_NAME.match(name) is None:
            raise InvalidInput(f"file: {name!r} is not an archive file name such as jobs-2026-11-01.jsonl.gz "
                               "(see jobdeck archive ls)", field="file")  # fmt: skip
        path = self.folder / name
        if not path.is_file():
            raise NotFound(f"no archive file {name} in {self.folder}", field="file")
        return path

    def records(self, name: str) -> Iterator[dict[str, Any]]:
        """The records of one file, in the order they were archived (blocking)."""
        with gzip.open(self.path(name), "rb") as f:
            for line in f:
                if line.strip():
                    yield orjson.loads(line)

    def find(self, job_id: int, recorded: list[dict[str, Any]] | None = None) -> tuple[str, dict[str, Any]] | None:
        """(file, record): the last archived copy of a job, searching the newest files first (blocking).
        With `recorded` (the store's archive_files rows), a file of this node's whose recorded ids
        (first_job..last_job) leave the job out is not opened: usually one file is read, not all of
        them. A file the store has no row for (written before it kept them) is still searched."""
        ranges = {r["file"]: (r["first_job"], r["last_job"]) for r in recorded or ()
                  if r["node"] == self.node and r["folder"] == str(self.folder)}  # fmt: skip
        for f in self.files():
            first, last = ranges.get(str(f["file"]), (job_id, job_id))
            if not first <= job_id <= last:
                continue
            found = None
            for r in self.records(str(f["file"])):
                if r["job"]["id"] == job_id:
                    found = r
            if found is not None:
                return str(f["file"]), found
        return None


def listing(archive: Archive, recorded: list[dict[str, Any]], local: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every node's archive files (`recorded`: the store's archive_files rows) with this node's own
    (`local`: `archive.files()`, which also has files written before the store recorded them), newest
    day first; `here` says whether this node can read the file (show, restore)."""
    mine = str(archive.folder)
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in recorded:
        here = r["node"] == archive.node and r["folder"] == mine
        out[(r["node"], r["folder"], r["file"])] = {"file": r["file"], "day": r["day"], "bytes": r["bytes"],
                                                   "jobs": r["jobs"], "node": r["node"], "folder": r["folder"],
                                                   "here": here}  # fmt: skip
    for f in local:
        seen = out.get((archive.node, mine, f["file"]))
        if seen is not None:
            seen["bytes"] = f["bytes"]  # the file itself is the fresher figure
            continue
        out[(archive.node, mine, f["file"])] = {**f, "jobs": None, "node": archive.node, "folder": mine, "here": True}
    return sorted(out.values(), key=lambda f: (f["day"], f["node"]), reverse=True)


def elsewhere(archive: Archive, recorded: list[dict[str, Any]], *, file: str | None = None,
              job_id: int | None = None) -> str:  # fmt: skip
    """Which other nodes' files may hold this file name or job id, said for an answer that this node
    has none ("" when no other node has one)."""
    hits = [r for r in recorded if not (r["node"] == archive.node and r["folder"] == str(archive.folder))
            and (file is None or r["file"] == file) and (job_id is None or r["first_job"] <= job_id <= r["last_job"])]  # fmt: skip
    if not hits:
        return ""
    where = ", ".join(sorted({f"{r['file']} on node {r['node']} ({r['folder']})" for r in hits}))
    return f"; another node has {where}: ask that node (JOBDECK_SERVER)"


class Retention:
    """The loop that archives and purges; one per node, and one node at a time holds the lease that
    lets it (the store's `retention` lease row, as the outbox relays hold theirs)."""

    def __init__(self, store: Any, settings: Settings, metrics: Any = None, clock: Any = utcnow,
                 pickup_behind: Callable[[float], bool] | None = None) -> None:  # fmt: skip
        """`pickup_behind(seconds)`: whether the node's claims run that far behind (Engine.pickup_behind);
        the batches give way to them."""
        self.store = store
        self.pickup_behind = pickup_behind
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.archive = Archive(archive_dir(settings), archive_node(settings))
        self.node = self.archive.node
        self.holder = node_identity()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.settings.job_retention_days > 0:
            self._task = asyncio.create_task(self._loop(), name="jobdeck-retention")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            try:
                archived, purged = await self.run_once()
                if archived:
                    log.info("archived %d finished jobs to %s (%d purged)", archived, self.archive.folder, purged)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("a retention round failed; the next one tries again")
            await asyncio.sleep(self.settings.retention_interval_seconds)

    async def run_once(self, max_batches: int | None = None) -> tuple[int, int]:
        """Archive and purge batches until none is left (or `max_batches`): (archived, purged).
        Only while this node holds the store's retention lease: with several nodes, one archives at a
        time, so no batch is written to two archives (or twice to one) before it is purged."""
        lease = await self.store.claim_relay(LEASE, self.holder, LEASE_SECONDS)
        if lease is None:
            return 0, 0  # another node is archiving
        try:
            return await self._rounds(lease, max_batches)
        finally:
            await self.store.release_relay(lease)

    async def _rounds(self, lease: Any, max_batches: int | None) -> tuple[int, int]:
        archived = purged = batches = 0
        while max_batches is None or batches < max_batches:
            cut = cutoffs(self.settings, self.clock())
            if cut is None:
                break
            lease = await self.store.advance_relay(lease, 0, LEASE_SECONDS)  # renewed before each batch
            if lease is None:
                log.warning("the retention lease lapsed (this node stalled for %.0f s); another node goes on",
                            LEASE_SECONDS)  # fmt: skip
                break
            lines = await self.store.archivable_lines(cut, self.settings.retention_batch)
            if not lines:
                break
            files = await asyncio.to_thread(self.archive.append, lines, self.node)
            gone = await self.store.purge_jobs([line.id for line in lines], cut, files)
            archived += len(lines)
            purged += gone
            batches += 1
            if self.metrics is not None:
                self.metrics.retained(len(lines), gone)
            await self._give_way()
        return archived, purged

    async def _give_way(self) -> None:
        """The pause between batches (the writer serves the others), longer while pick-ups run behind."""
        await asyncio.sleep(self.settings.retention_pause_seconds)
        waited = 0.0
        while self.pickup_behind is not None and waited < MAX_YIELD and self.pickup_behind(PICKUP_BEHIND):
            await asyncio.sleep(YIELD_STEP)
            waited += YIELD_STEP
