"""The audit log in both stores: written with the change or not at all, append-only, pruned by age."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from core.errors import Conflict
from core.model import build_job, decide_cancel, decide_pause
from core.store import audit
from core.store.audit import AuditFilter
from tests.store.conftest import POLICY, StoreKit

ACTOR = audit.Actor("token:olive", "olive", "operator", "token", "10.0.0.7", "curl/8")


async def _job(kit: StoreKit, now: float) -> Any:
    spec = {"name": "charge", "queue": "payments", "task": {"kind": "shell", "command": "true"}}
    return (await kit.store.submit_jobs([build_job(spec, now, POLICY)]))[0][0]


async def test_a_change_and_its_audit_row_commit_together(kit: StoreKit) -> None:
    job = await _job(kit, 1000.0)
    audit.set_acting(ACTOR, "cancel_job", f"job:{job.id}")
    try:
        await kit.store.change_jobs({job.id: lambda j: decide_cancel(j, 1001.0, POLICY)})
    finally:
        audit._CURRENT.set(None)
    [entry] = await kit.store.list_audit(AuditFilter(), None, 10)
    assert (entry["actor"], entry["role"], entry["ip"], entry["action"], entry["target"], entry["outcome"]) == (
        "olive", "operator", "10.0.0.7", "cancel_job", f"job:{job.id}", "ok"
    )  # fmt: skip
    assert entry["before"][f"job:{job.id}"]["state"] == "queued"
    assert entry["after"][0]["type"] == "job.cancelled" and entry["after"][0]["data"]["job"]["state"] == "cancelled"


async def test_a_refused_change_leaves_no_row(kit: StoreKit) -> None:
    job = await _job(kit, 1000.0)
    await kit.store.change_jobs({job.id: lambda j: decide_cancel(j, 1001.0, POLICY)})
    audit.set_acting(ACTOR, "pause_job", f"job:{job.id}")
    try:  # pausing a cancelled job is refused inside the transaction: nothing is written
        out = await kit.store.change_jobs({job.id: lambda j: decide_pause(j, 1002.0, POLICY)})
    finally:
        audit._CURRENT.set(None)
    assert isinstance(out[job.id], Conflict)
    assert await kit.store.list_audit(AuditFilter(), None, 10) == [], "nothing changed: no 'ok' entry"


async def test_the_log_is_append_only_and_pruned_by_age(kit: StoreKit) -> None:
    for at in (100.0, 200.0, 300.0):
        await kit.store.record_audit(audit.AuditScope(ACTOR, "pause_queue", "queue:payments").row(at, "refused", "no"))
    if kit.kind == "sqlite":
        conn = sqlite3.connect(kit.url)
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("UPDATE audit_log SET actor = 'someone else'")
        conn.close()
    else:
        import asyncpg

        conn = await asyncpg.connect(kit.url)
        try:
            with pytest.raises(asyncpg.RaiseError, match="append-only"):
                await conn.execute("UPDATE audit_log SET actor = 'someone else'")
        finally:
            await conn.close()
    assert await kit.store.prune_audit(250.0) == 2
    entries = await kit.store.list_audit(AuditFilter(actor="olive"), None, 10)
    assert [(e["at"][:4], e["actor"]) for e in entries] == [("1970", "olive")] and len(entries) == 1
    assert await kit.store.list_audit(AuditFilter(outcome="ok"), None, 10) == []


async def test_the_relay_reads_entries_in_id_order_and_skips_none_that_commits_late(kit: StoreKit) -> None:
    """audit_after (what the Kafka audit relay reads): committed entries after an id, oldest first.
    On PostgreSQL an identity id can commit after a larger one: while an entry's transaction is
    open, the read returns nothing rather than the larger id past it (that would skip it)."""
    row = audit.AuditScope(ACTOR, "pause_queue", "queue:payments").row(100.0, "refused", "no")
    for _ in range(3):
        await kit.store.record_audit(row)
    assert [e["id"] for e in await kit.store.audit_after(0, 10)] == [1, 2, 3]
    assert [e["id"] for e in await kit.store.audit_after(1, 1)] == [2]
    assert (await kit.store.audit_after(2, 10))[0]["target"] == "queue:payments"
    if kit.kind != "postgres":
        return  # one writer: ids commit in order
    import asyncpg

    from core.store.postgres import AUDIT_SHARED, INSERT_AUDIT

    slow = await asyncpg.connect(kit.url)
    try:
        tx = slow.transaction()
        await tx.start()
        await slow.execute(AUDIT_SHARED)  # as the store's insert does
        await slow.execute(INSERT_AUDIT, *row)  # id 4, not committed yet
        await kit.store.record_audit(row)  # id 5 commits first
        assert await kit.store.audit_after(3, 10) == [], "id 5 is not read past the open id 4"
        await tx.commit()
    finally:
        await slow.close()
    assert [e["id"] for e in await kit.store.audit_after(3, 10)] == [4, 5]
