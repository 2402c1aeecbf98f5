"""Where a 10,000-job workflow submit's time goes: `python -m bench.workflow_stages [--store postgres] [--rounds N]`.

An in-process node (no agent) takes the bench's fan-out/fan-in workflow (a root, N-2 jobs that
wait for it, a sink that waits for them all) and a plain N-job batch, each through the whole app
(ASGI, no socket) and stage by stage: JSON parse, body validation, specs, the DAG check, building
the jobs, the store's transaction (each statement timed; COMMIT apart), handing the events to the
bus, and the response. A diagnosis, not a figure for the table: it wraps the stores' connections.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.store import DEFAULT_PG_URL
from bench.workload import noop_job
from core.api.schemas import JobBatch, WorkflowCreate, specs_of
from core.config import load_settings
from core.model import Policy, build_job
from core.node import Node
from core.store import _pg_writer, _sqlite_writer
from core.workflow import Deps, validate_workflow, workflow_to_dict

N = 10_000
Spans = defaultdict[str, list[tuple[float, float]]]  # (wall, CPU of the thread) per call


def _fan(n: int) -> list[dict[str, Any]]:
    middle = [{"ref": f"m{i}", "depends_on": ["root"], **noop_job("fan")} for i in range(n - 2)]
    sink = {"ref": "sink", "depends_on": [m["ref"] for m in middle], **noop_job("fan")}
    return [{"ref": "root", **noop_job("fan")}, *middle, sink]


def _key(sql: str) -> str:
    words = " ".join(sql.split()).replace("INSERT OR IGNORE INTO", "INSERT INTO").split()
    if words[:1] == ["WITH"] and "INSERT INTO" in " ".join(words):
        i = words.index("INTO")
        return f"WITH..INSERT INTO {words[i + 1]}"
    if words[:2] == ["INSERT", "INTO"] or words[:2] == ["DELETE", "FROM"]:
        return " ".join(words[:3])
    if words[:1] == ["UPDATE"]:
        return " ".join(words[:2])
    return " ".join(words[:4])[:48]


class _TimedSQLite:
    """The writer's connection, each statement's time added to `spans` under its first words."""

    def __init__(self, conn: Any, spans: Spans) -> None:
        self._conn, self._spans = conn, spans

    def _timed(self, fn: Callable[..., Any], sql: str, *args: Any) -> Any:
        t, c = time.perf_counter(), time.thread_time()
        try:
            return fn(sql, *args)
        finally:
            self._spans[f"sql {_key(sql)}"].append((time.perf_counter() - t, time.thread_time() - c))

    def execute(self, sql: str, *args: Any) -> Any:
        return self._timed(self._conn.execute, sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        return self._timed(self._conn.executemany, sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _TimedPg:
    """A pooled asyncpg connection, each statement timed as above (COPY under its table)."""

    def __init__(self, conn: Any, spans: Spans) -> None:
        self._conn, self._spans = conn, spans

    def _wrap(self, name: str) -> Callable[..., Any]:
        fn = getattr(self._conn, name)

        async def timed(first: str, *args: Any, **kw: Any) -> Any:
            t, c = time.perf_counter(), time.thread_time()
            try:
                return await fn(first, *args, **kw)
            finally:
                key = f"COPY {first}" if name == "copy_records_to_table" else _key(first)
                self._spans[f"sql {key}"].append((time.perf_counter() - t, time.thread_time() - c))

        return timed

    def __getattr__(self, name: str) -> Any:
        if name in ("execute", "executemany", "fetch", "fetchrow", "fetchval", "copy_records_to_table"):
            return self._wrap(name)
        return getattr(self._conn, name)


@contextlib.contextmanager
def _timer(spans: Spans, name: str) -> Iterator[None]:
    t, c = time.perf_counter(), time.thread_time()
    try:
        yield
    finally:
        spans[name].append((time.perf_counter() - t, time.thread_time() - c))


def _instrument(spans: Spans) -> None:
    connect = _sqlite_writer.connect

    def timed_connect(path: Path, **kw: Any) -> Any:
        conn = connect(path, **kw)
        return (
            conn
            if kw.get("readonly") or threading.current_thread().name.endswith("checkpoint")
            else _TimedSQLite(conn, spans)
        )

    _sqlite_writer.connect = timed_connect  # type: ignore[assignment]
    pg_init = _pg_writer.PgTx.__init__

    def timed_pg_init(self: Any, conn: Any, now: float) -> None:
        pg_init(self, _TimedPg(conn, spans), now)

    _pg_writer.PgTx.__init__ = timed_pg_init  # type: ignore[method-assign]
    for cls in (_sqlite_writer.Tx, _pg_writer.PgTx):
        emit = cls.emit

        def timed_emit(self: Any, *args: Any, _emit: Any = emit) -> None:
            t, c = time.perf_counter(), time.thread_time()
            _emit(self, *args)
            spans["tx.emit (event bodies)"].append((time.perf_counter() - t, time.thread_time() - c))

        cls.emit = timed_emit  # type: ignore[method-assign]
    pg_transaction = _pg_writer.PgWriter._transaction

    async def timed_transaction(self: Any, batch: Any) -> Any:
        with _timer(spans, "store transaction (whole)"):
            return await pg_transaction(self, batch)

    _pg_writer.PgWriter._transaction = timed_transaction  # type: ignore[method-assign]
    sqlite_commit = _sqlite_writer.Writer._commit

    def timed_commit(self: Any, *args: Any) -> Any:
        with _timer(spans, "store transaction (whole)"):
            return sqlite_commit(self, *args)

    _sqlite_writer.Writer._commit = timed_commit  # type: ignore[method-assign]


@contextlib.asynccontextmanager
async def _node(store: str, pg_url: str) -> AsyncIterator[Node]:
    env: dict[str, str] = {}
    schema = f"wf_stages_{os.getpid()}"
    admin = None
    if store == "postgres":
        import asyncpg

        admin = await asyncpg.connect(pg_url)
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE; CREATE SCHEMA "{schema}"')
        env["JOBDECK_DATABASE_URL"] = f"{pg_url}?search_path={schema}"
    node = Node(load_settings(environ=env, data_dir=Path(tempfile.mkdtemp(prefix="wf-stages-")), port=0))
    await node.start()
    try:
        yield node
    finally:
        await node.stop()
        if admin is not None:
            await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            await admin.close()


async def _stages(node: Node, spans: Spans, n: int, i: int) -> None:
    """The route's steps one by one (as core/api/workflows.py runs them), each timed."""
    engine = node.engine
    body = orjson.dumps({"name": f"fan-{i}", "jobs": _fan(n)})
    with _timer(spans, "parse JSON (orjson)"):
        data = orjson.loads(body)
    with _timer(spans, "validate body (pydantic)"):
        wf_body = WorkflowCreate.model_validate(data)
    with _timer(spans, "specs() (pydantic dump)"):
        specs = wf_body.specs()
    with _timer(spans, "DAG check (validate_workflow)"):
        parents = validate_workflow(specs)
    now = engine.clock()
    policy: Policy = engine.policy
    with _timer(spans, "build_job x n"):
        jobs = [build_job(s, now, policy) for s in specs]
    spans_before = {k: len(v) for k, v in spans.items()}
    with _timer(spans, "store.submit_workflow (await)"):
        wf = await engine.store.submit_workflow(wf_body.name, jobs, [Deps(index=p) if p else None for p in parents])
    del spans_before
    with _timer(spans, "response (dict + orjson)"):
        counts: dict[str, int] = {}
        for j in jobs:
            counts[j.state] = counts.get(j.state, 0) + 1
        orjson.dumps({"workflow": workflow_to_dict(wf, counts), "ids": {j.ref: j.id for j in jobs}})


def _print(title: str, spans: Spans, rounds: int) -> None:
    print(f"{title}  wall / CPU of its thread (PG: the server's work is wall only), ms per round")
    for name, values in sorted(spans.items(), key=lambda kv: -sum(w for w, _ in kv[1])):
        wall, cpu = sum(w for w, _ in values) / rounds, sum(c for _, c in values) / rounds
        print(f"  {1000 * wall:8.1f} {1000 * cpu:8.1f}  {name}  ({len(values) / rounds:g} calls/round)")


async def main(store: str, pg_url: str, n: int, rounds: int, app_only: bool = False) -> None:
    spans: Spans = defaultdict(list)
    _instrument(spans)
    async with _node(store, pg_url) as node:
        transport = httpx.ASGITransport(app=node.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            await client.post("/v1/jobs", json=noop_job("warm"))
            whole: dict[str, list[float]] = {"POST /v1/workflows": [], "POST /v1/jobs/batch": []}
            for i in range(rounds):
                wf_body = orjson.dumps({"name": f"fan-{i}", "jobs": _fan(n)})
                batch_body = orjson.dumps({"jobs": [noop_job("plain") for _ in range(n)]})
                t = time.perf_counter()
                r = await client.post(
                    "/v1/jobs/batch", content=batch_body, headers={"content-type": "application/json"}
                )
                whole["POST /v1/jobs/batch"].append(time.perf_counter() - t)
                assert r.status_code == 201, r.text[:300]
                t = time.perf_counter()
                r = await client.post("/v1/workflows", content=wf_body, headers={"content-type": "application/json"})
                whole["POST /v1/workflows"].append(time.perf_counter() - t)
                assert r.status_code == 201, r.text[:300]
            spans.clear()
            for i in range(0 if app_only else rounds):
                await _stages(node, spans, n, i)
            stage_spans = Spans(list, spans)
            spans.clear()
            for _ in range(0 if app_only else rounds):
                batch = JobBatch.model_validate({"jobs": [noop_job("plain") for _ in range(n)]})
                with _timer(spans, "specs_of (pydantic dump)"):
                    specs = specs_of(batch.jobs)
                with _timer(spans, "engine.submit (build + store)"):
                    await node.engine.submit(specs, batch=True)
    print(f"{store}, {n:,} jobs, {rounds} rounds; load {os.getloadavg()[0]:.2f}")
    for name, values in whole.items():
        print(f"  {name} through the app: " + ", ".join(f"{v:.2f}" for v in values) + " s"
              f" (median {statistics.median(values):.2f})")  # fmt: skip
    _print("workflow, step by step (mean per round):", stage_spans, rounds)
    _print("batch (mean per round):", spans, rounds)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    p.add_argument("--pg-url", default=DEFAULT_PG_URL)
    p.add_argument("--jobs", type=int, default=N)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--app-only", action="store_true", help="only the POSTs through the app (to profile them)")
    a = p.parse_args()
    asyncio.run(main(a.store, a.pg_url, a.jobs, a.rounds, a.app_only))
