"""One store fixture for the conformance suite: every test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from core.model import Policy
from core.store.base import Event
from core.store.sqlite import SQLiteStore
from tests.services import create_database, execute, postgres_problem, run_sync, with_database

POLICY = Policy(aging_seconds_per_priority=60.0, lease_seconds=30.0)


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A throw-away PostgreSQL database for this test session (tests use a fresh schema in it)."""
    problem = postgres_problem()
    if problem:
        pytest.skip(problem)
    url, drop = run_sync(create_database())
    try:
        yield url
    finally:
        run_sync(drop())


@dataclass
class StoreKit:
    """A store under test, the events it handed to on_commit, and a way to open more of the same kind
    on the same data (several PostgreSQL stores are several nodes)."""

    kind: str
    url: str
    store: Any
    committed: list[Event] = field(default_factory=list)
    _extra: list[Any] = field(default_factory=list)

    async def another(self, on_commit: Any = None) -> Any:
        """A second node's store on the same database (PostgreSQL only)."""
        from core.store.postgres import PostgresStore

        assert self.kind == "postgres", "only PostgreSQL is shared between nodes"
        store = PostgresStore(self.url, POLICY, on_commit=on_commit or (lambda events: None))
        await store.open()
        self._extra.append(store)
        return store

    async def close(self) -> None:
        for s in [*self._extra, self.store]:
            await s.close()


@pytest.fixture
def pg_url(pg_database: str) -> Iterator[str]:
    """A URL whose connections work in a fresh, empty schema of the session's database."""
    schema = f"s_{uuid.uuid4().hex[:12]}"
    run_sync(execute(pg_database, f"CREATE SCHEMA {schema}"))
    yield with_database(pg_database, pg_database.rsplit("/", 1)[-1], search_path=schema)
    run_sync(execute(pg_database, f"DROP SCHEMA {schema} CASCADE"))


@pytest.fixture(params=["sqlite", "postgres"])
async def kit(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreKit]:
    """The store under test, opened on empty data."""
    committed: list[Event] = []
    if request.param == "sqlite":
        url = str(tmp_path / "jobdeck.db")
        store: Any = SQLiteStore(Path(url), POLICY, on_commit=committed.extend)
    else:
        from core.store.postgres import PostgresStore

        url = request.getfixturevalue("pg_url")
        store = PostgresStore(url, POLICY, on_commit=committed.extend)
    await store.open()
    k = StoreKit(request.param, url, store, committed)
    try:
        yield k
    finally:
        await k.close()
