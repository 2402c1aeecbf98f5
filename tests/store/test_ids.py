"""Ids the API shows are never handed out twice, on both stores: delete the newest row of each table
whose ids the API exposes, restart the store, create another: its id is new.

SQLite without AUTOINCREMENT gives a new row max(rowid) + 1, and the writer used to hand out
job ids from max(id) + 1, so the newest deleted schedule's (or job's) id came back.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from core.model import build_job
from core.store import audit
from core.store.audit import AuditFilter
from core.store.sqlite import SQLiteStore
from tests.services import execute
from tests.store.conftest import POLICY, StoreKit
from tests.store.test_conformance import NOOP, a_schedule

ACTOR = audit.Actor("token:ada", "ada", "admin", "token", "10.0.0.1", "test")
MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations" / "sqlite"
MIGRATION = 6  # migrations/sqlite/0006_ids_never_reused.sql


def _indexes(conn: sqlite3.Connection) -> set[tuple[str, str]]:
    """(name, definition) of every index on jobs and schedules."""
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
                        "AND tbl_name IN ('jobs', 'schedules')")  # fmt: skip
    return {(name, " ".join(sql.split())) for name, sql in rows}


async def restart(kit: StoreKit, meanwhile: str | None = None) -> Any:
    """Close the store, run `meanwhile` (SQL, e.g. what a purge would delete: no API deletes jobs
    yet) on its data, and open a new store on it: a node restart."""
    await kit.store.close()
    if meanwhile and kit.kind == "sqlite":
        conn = sqlite3.connect(kit.url)
        conn.execute(meanwhile)
        conn.commit()
        conn.close()
    elif meanwhile:
        await execute(kit.url, meanwhile)
    if kit.kind == "sqlite":
        store: Any = SQLiteStore(Path(kit.url), POLICY, on_commit=kit.committed.extend)
    else:
        from core.store.postgres import PostgresStore

        store = PostgresStore(kit.url, POLICY, on_commit=kit.committed.extend)
    await store.open()
    kit.store = store
    return store


async def submit_one(store: Any) -> int:
    [(job, _)] = await store.submit_jobs([build_job({"task": NOOP}, time.time(), POLICY)])
    return int(job.id)


async def test_a_deleted_newest_job_id_is_not_reused_after_a_restart(kit: StoreKit) -> None:
    ids = [await submit_one(kit.store) for _ in range(3)]
    store = await restart(kit, meanwhile=f"DELETE FROM jobs WHERE id = {ids[-1]}")
    new = await submit_one(store)
    assert new > ids[-1], f"expected a job id above {ids[-1]} (the deleted newest), got {new}"


async def test_a_deleted_newest_schedule_id_is_not_reused(kit: StoreKit) -> None:
    first = await kit.store.create_schedule(a_schedule(name="a"))
    newest = await kit.store.create_schedule(a_schedule(name="b"))
    await kit.store.delete_schedule(newest.id)
    again = await kit.store.create_schedule(a_schedule(name="c"))
    assert again.id > newest.id, f"expected a schedule id above {newest.id} (deleted), got {again.id}"
    await kit.store.delete_schedule(again.id)
    store = await restart(kit)
    after = await store.create_schedule(a_schedule(name="d"))
    assert after.id > again.id, f"after a restart: expected a schedule id above {again.id}, got {after.id}"
    assert [s.id for s in await store.list_schedules()] == [first.id, after.id]


async def test_pruned_audit_row_ids_are_not_reused(kit: StoreKit) -> None:
    for at in (100.0, 200.0, 300.0):
        await kit.store.record_audit(audit.AuditScope(ACTOR, "pause_queue", "queue:q").row(at, "ok"))
    [newest, *_] = await kit.store.list_audit(AuditFilter(), None, 10)
    assert await kit.store.prune_audit(1000.0) == 3
    store = await restart(kit)
    await store.record_audit(audit.AuditScope(ACTOR, "pause_queue", "queue:q").row(2000.0, "ok"))
    [entry] = await store.list_audit(AuditFilter(), None, 10)
    assert entry["id"] > newest["id"], f"expected an audit id above {newest['id']}, got {entry['id']}"


async def test_pruned_event_seqs_are_not_reused(kit: StoreKit) -> None:
    for i in range(3):
        await kit.store.record_event("agent.connected", {"i": i})
    last = await kit.store.last_seq()
    await kit.store.prune_events(time.time() + 3600)  # every event is older than that
    assert await kit.store.events_since(0, 10) == []
    store = await restart(kit)
    await store.record_event("agent.connected", {"i": 3})
    [event] = await store.events_since(0, 10)
    assert event.seq == last + 1, f"expected seq {last + 1} after pruning up to {last}, got {event.seq}"


async def test_deleted_newest_channel_rule_and_hook_ids_are_not_reused(kit: StoreKit) -> None:
    """The notification routes show and take these ids (GET /v1/notifications/channels/{id}, ...):
    a deleted newest one's id must not name the next one, across a restart too."""
    s = kit.store

    async def make(kind: str, name: str) -> int:
        if kind == "channel":
            return int((await kit.store.create_channel(name, "webhook", {"url": "http://x/"}, {}))["id"])
        if kind == "rule":
            return int((await kit.store.create_rule(name, {"events": ["job.dead"], "channels": []}))["id"])
        return int((await kit.store.create_hook(name, "none", {}, {"task": NOOP}, 300.0))["id"])

    deleters = {"channel": s.delete_channel, "rule": s.delete_rule, "hook": s.delete_hook}
    newest = {}
    for kind, delete in deleters.items():
        await make(kind, f"{kind}-a")
        newest[kind] = await make(kind, f"{kind}-b")
        await delete(newest[kind])
        again = await make(kind, f"{kind}-c")
        assert again > newest[kind], f"expected a {kind} id above {newest[kind]} (deleted), got {again}"
        await delete(again)
        newest[kind] = again
    await restart(kit)
    for kind in deleters:
        after = await make(kind, f"{kind}-d")
        assert after > newest[kind], f"after a restart: expected a {kind} id above {newest[kind]}, got {after}"


async def test_every_sqlite_table_with_an_integer_id_hands_ids_out_once(tmp_path: Path) -> None:
    """Every SQLite table keyed by its rowid (`id INTEGER PRIMARY KEY`) says AUTOINCREMENT, else a
    deleted newest row's id comes back (max(rowid) + 1); a table added by a later migration too."""
    path = tmp_path / "ids.db"
    store = SQLiteStore(path, POLICY, on_commit=lambda events: None)
    await store.open()
    await store.close()
    conn = sqlite3.connect(path)
    tables = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL").fetchall()
    keyed = {}
    # An FTS5 table's own tables (job_search_data, ...) hand out no ids: their rows are the index's
    # pages and the ids of the rows it indexes.
    virtual = [name for name, sql in tables if sql.upper().startswith("CREATE VIRTUAL TABLE")]
    for name, sql in tables:
        if any(name.startswith(v + "_") for v in virtual):
            continue
        pk = [r[1] for r in conn.execute(f"PRAGMA table_info({name})") if r[5]]
        types = {r[1]: r[2].upper() for r in conn.execute(f"PRAGMA table_info({name})")}
        if len(pk) == 1 and types[pk[0]] == "INTEGER":  # a rowid alias
            keyed[name] = "AUTOINCREMENT" in sql.upper()
    conn.close()
    assert {"jobs", "schedules", "events", "audit_log", "workflows", "notify_channels", "notify_rules",
            "notify_hooks", "notify_deliveries"} <= set(keyed), sorted(keyed)  # fmt: skip
    reused = sorted(name for name, auto in keyed.items() if not auto)
    assert not reused, f"tables whose deleted newest id would be handed out again: {reused}"


async def test_every_postgres_id_column_is_an_identity(pg_url: str) -> None:
    """PostgreSQL's identity sequences only grow: every bigint `id` primary key is one (event seqs
    come from the event_seq counter, test_pruned_event_seqs_are_not_reused)."""
    import asyncpg

    from core.store.postgres import PostgresStore

    store = PostgresStore(pg_url, POLICY, on_commit=lambda events: None)
    await store.open()
    await store.close()
    conn = await asyncpg.connect(pg_url)
    try:
        rows = await conn.fetch(
            "SELECT c.table_name, c.is_identity, c.column_default FROM information_schema.columns c "
            "JOIN information_schema.key_column_usage k USING (table_schema, table_name, column_name) "
            "JOIN information_schema.table_constraints t USING (table_schema, table_name, constraint_name) "
            "WHERE c.table_schema = current_schema() AND c.column_name = 'id' AND t.constraint_type = 'PRIMARY KEY' "
            "AND c.data_type IN ('bigint', 'integer') AND c.table_name <> 'event_seq'"
        )
    finally:
        await conn.close()
    cols = [(r[0], r[1], r[2] or "") for r in rows]
    assert {"jobs", "schedules", "audit_log", "workflows", "notify_channels", "notify_rules", "notify_hooks"} <= {
        t for t, _, _ in cols
    }, cols
    plain = [t for t, identity, default in cols if identity != "YES" and "nextval" not in default]
    assert not plain, f"id columns without a sequence (an id could be handed out twice): {plain}"


async def test_the_migration_keeps_an_old_database_and_its_ids(tmp_path: Path) -> None:
    """A file from before migration 6 (tables without AUTOINCREMENT) migrates with its rows, ids and
    every index it had."""
    from core.store.sqlite import JOB_COLUMNS, _job_row

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at REAL NOT NULL)")
    for f in sorted(f for f in MIGRATIONS.glob("[0-9]*.sql") if int(f.name[:4]) < MIGRATION):
        for statement in f.read_text().split(";\n"):
            if statement.strip():
                conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (?, 0)", (int(f.name[:4]),))
    job = build_job({"task": NOOP, "name": "old-job"}, time.time(), POLICY)
    job.id = 41
    # the columns that file has (later migrations add more: traceparent, keys, dependencies, ...)
    have = {r[1] for r in conn.execute("PRAGMA table_info(jobs)")}
    row = [(c, v) for c, v in zip(JOB_COLUMNS, _job_row(job), strict=True) if c in have]
    conn.execute(f"INSERT INTO jobs ({', '.join(c for c, _ in row)}) VALUES ({', '.join('?' * len(row))})",
                 [v for _, v in row])  # fmt: skip
    conn.execute("INSERT INTO schedules (id, name, kind, interval, timezone, anchor, job, created_at, updated_at) "
                 "VALUES (7, 'old-schedule', 'interval', 60, 'UTC', 0, '{}', 0, 0)")  # fmt: skip
    old_indexes = _indexes(conn)
    conn.close()
    store = SQLiteStore(path, POLICY, on_commit=lambda events: None)
    await store.open()
    try:
        assert store.schema_version >= MIGRATION
        assert (await store.get_job(41)).name == "old-job"
        assert (await store.get_schedule(7)).name == "old-schedule"
        assert await submit_one(store) == 42
        await store.delete_schedule(7)
        made = await store.create_schedule(a_schedule(name="new"))
        assert made.id == 8, f"expected schedule id 8 after deleting 7, got {made.id}"
        conn = sqlite3.connect(path)
        kept = _indexes(conn)
        conn.close()
        dropped = {(n, sql) for n, sql in old_indexes if n == "jobs_queue_state"}  # by migration 0023, on purpose
        assert old_indexes - dropped <= kept, f"indexes lost by the rebuild: {sorted(old_indexes - dropped - kept)}"
        assert {"jobs_claim", "jobs_schedule_fire", "schedules_next"} <= {name for name, _ in kept}
    finally:
        await store.close()
