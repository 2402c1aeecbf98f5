"""PostgreSQL restarted under load: writes wait and go on, nothing is lost or doubled, and the
event stream stays gap-free with every event handed to on_commit once."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from core.errors import JobDeckError
from core.model import build_job
from core.store.base import JobFilter
from tests.store.conftest import POLICY, StoreKit

pytestmark = pytest.mark.parametrize("kit", ["postgres"], indirect=True)


def _local_cluster(url: str) -> str | None:
    """The version of the local cluster serving `url`, if pg_ctlcluster can restart it."""
    if urlsplit(url).hostname not in ("127.0.0.1", "localhost") or not shutil.which("pg_ctlcluster"):
        return None
    versions = sorted(p.name for p in Path("/etc/postgresql").glob("*") if (p / "main").is_dir())
    return versions[-1] if versions else None


async def test_a_database_restart_under_load_loses_nothing(kit: StoreKit) -> None:
    version = _local_cluster(kit.url)
    if version is None:
        pytest.skip("needs the local PostgreSQL cluster and pg_ctlcluster to restart it")
    store = kit.store
    made: list[int] = []
    failures: list[str] = []
    stop = asyncio.Event()

    async def submit(worker: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            job = build_job({"task": {"kind": "x"}, "idempotency_key": f"w{worker}-{i}"}, time.time(), POLICY)
            try:
                [(stored, _)] = await store.submit_jobs([job])
                made.append(stored.id)
            except JobDeckError as exc:
                failures.append(exc.message)
            await asyncio.sleep(0.005)

    writers = [asyncio.create_task(submit(w)) for w in range(3)]
    await asyncio.sleep(0.5)
    restart = await asyncio.create_subprocess_exec(
        "pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart", "-m", "fast"
    )
    assert await restart.wait() == 0
    await asyncio.sleep(1.5)
    stop.set()
    await asyncio.wait_for(asyncio.gather(*writers), 60)
    assert not failures, f"writes failed during the restart: {failures[:3]}"
    assert len(made) == len(set(made)) > 100
    assert len(await store.list_jobs(JobFilter(), None, 100_000)) == len(made)
    stored = await store.events_since(0, 100_000)
    assert [e.seq for e in stored] == list(range(1, len(made) + 1)), "one job.created per job, seq 1..N"
    assert [e.seq for e in kit.committed] == [e.seq for e in stored], "each committed event went to on_commit once"
