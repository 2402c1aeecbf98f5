"""One store fixture for the conformance suite: every test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from core.model import Policy
from core.store.base import Event
from core.store.sqlite import SQLiteStore

POLICY = Policy(aging_seconds_per_priority=60.0, lease_seconds=30.0)


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
