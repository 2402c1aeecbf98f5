"""Where the nodes of a benchmark keep their jobs: the embedded SQLite file of each node's data
dir, or a PostgreSQL database that one or more nodes share (with Redis between them).

On PostgreSQL every case gets a schema of its own, created before its nodes start and dropped
after they stop, so no case sees the jobs (or the event seq) of another and each starts from
empty tables, as a fresh SQLite data dir does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

from bench.report import (
    BATCH_SUBMIT_FLOOR,
    CONCURRENT_SUBMIT_FLOOR,
    E2E_FLOOR,
    PG_BATCH_SUBMIT_FLOOR,
    PG_E2E_FLOOR,
    PG_PICKUP_P99_FLOOR,
    PG_PICKUP_P99_NODES_FLOOR,
    PG_SINGLE_SUBMIT_FLOOR,
    PICKUP_P99_FLOOR,
    SINGLE_SUBMIT_FLOOR,
    Floor,
)

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
_schemas = itertools.count(1)


@dataclass(frozen=True)
class Floors:
    """The floors a store is held to (the PostgreSQL ones are lower: a network hop, and MVCC)."""

    batch_submit: Floor
    e2e: Floor | None  # None: shown without a verdict (the issue sets it for one node only)
    pickup_p99: Floor
    single_submit: Floor  # POST /v1/jobs, one keep-alive client
    concurrent_submit: Floor = CONCURRENT_SUBMIT_FLOOR  # 16 clients


SQLITE_FLOORS = Floors(BATCH_SUBMIT_FLOOR, E2E_FLOOR, PICKUP_P99_FLOOR, SINGLE_SUBMIT_FLOOR)
PG_FLOORS = Floors(PG_BATCH_SUBMIT_FLOOR, PG_E2E_FLOOR, PG_PICKUP_P99_FLOOR, PG_SINGLE_SUBMIT_FLOOR)


@dataclass(frozen=True)
class Backend:
    """One column of the printed table: a store, and how many nodes share it."""

    kind: Literal["sqlite", "postgres"] = "sqlite"
    nodes: int = 1
    database_url: str = DEFAULT_PG_URL  # postgres only: the database the schemas are made in
    redis_url: str = DEFAULT_REDIS_URL  # postgres with 2+ nodes: their event bus

    @property
    def label(self) -> str:
        if self.kind == "sqlite":
            return "sqlite"
        return f"pg, {self.nodes} node" + ("s" if self.nodes > 1 else "")

    @property
    def floors(self) -> Floors:
        if self.kind == "sqlite":
            return SQLITE_FLOORS
        return (
            PG_FLOORS
            if self.nodes == 1
            else dataclasses.replace(PG_FLOORS, e2e=None, pickup_p99=PG_PICKUP_P99_NODES_FLOOR)
        )

    @contextlib.asynccontextmanager
    async def fresh(self, case: str) -> AsyncIterator[dict[str, str]]:
        """The environment of the nodes of one case: a fresh store for them, removed afterwards
        (SQLite: each node's fresh data dir already is one; nothing to add)."""
        if self.kind == "sqlite":
            yield {}
            return
        import asyncpg  # only a PostgreSQL run needs it

        schema = f"bench_{re.sub(r'[^a-z0-9]+', '_', case.lower())}_{os.getpid()}_{next(_schemas)}"
        conn = await asyncpg.connect(self.database_url)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE; CREATE SCHEMA "{schema}"')
            sep = "&" if "?" in self.database_url else "?"
            env = {"JOBDECK_DATABASE_URL": f"{self.database_url}{sep}search_path={schema}"}
            if self.nodes > 1:
                env["JOBDECK_REDIS_URL"] = self.redis_url
            try:
                yield env
            finally:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()


SQLITE = Backend()
