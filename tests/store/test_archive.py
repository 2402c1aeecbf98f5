"""The archive's store operations on both stores: finished jobs past their cutoff are read oldest
first with their attempts, purged only while still finished and past it, and restored with their
ids, attempts and tags (a second restore skips them). The Retention loop over a real archive folder."""

from __future__ import annotations

import asyncio
import gzip
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from core.config import load_settings
from core.model import RunResult, build_job, decide_finish, decide_retry
from core.retention import LEASE, Archive, Retention
from core.store.archive import Cutoffs, record
from core.store.base import ClaimRequest, JobFilter
from tests.store.conftest import POLICY, StoreKit
from tests.store.test_conformance import two_nodes

DAY = 86400.0
NOW = 1_790_000_000.0  # 2026-09-21


async def finished_jobs(store: Any, n: int, queue: str, at: float, outcome: str = "succeeded") -> list[int]:
    """n jobs that ran and ended at time `at` (each with one attempt and its output)."""
    specs = [{"name": f"old-{queue}-{i}", "queue": queue, "tags": ["t1"], "max_attempts": 1,
              "task": {"kind": "shell", "command": "true"}} for i in range(n)]  # fmt: skip
    made = [j for j, _ in await store.submit_jobs([build_job(s, at - 10, POLICY) for s in specs])]
    ids = {j.id for j in made}
    claimed: list[Any] = []
    while len(claimed) < n:
        claimed += [j for j in await store.claim_jobs(ClaimRequest("a1", 10_000, frozenset({queue})), at - 5)
                    if j.id in ids]  # fmt: skip

    def finish(job: Any) -> Any:
        res = RunResult(job.id, job.attempt, outcome, output=f"out {job.id}", exit_code=0, started_at=at - 4,
                        finished_at=at)  # fmt: skip
        return decide_finish(job, res, at, POLICY)

    out = await store.change_jobs(dict.fromkeys([j.id for j in claimed], finish))
    assert all(not isinstance(v, Exception) for v in out.values()), out
    return sorted(ids)


async def test_archivable_jobs_purge_and_restore(kit: StoreKit) -> None:
    store = kit.store
    old = await finished_jobs(store, 30, "q", NOW - 40 * DAY)
    dead = await finished_jobs(store, 5, "q", NOW - 35 * DAY, outcome="failed")  # max_attempts 1: dead
    recent = await finished_jobs(store, 3, "q", NOW - 1 * DAY)
    kept_queue = await finished_jobs(store, 4, "keep", NOW - 40 * DAY)
    waiting = [j.id for j, _ in await store.submit_jobs([build_job({"name": "w", "queue": "q", "task": {
        "kind": "shell", "command": "true"}}, NOW - 50 * DAY, POLICY)])]  # fmt: skip
    cut = Cutoffs(NOW - 30 * DAY, {"keep": NOW - 90 * DAY})

    first = await store.archivable_jobs(cut, 20)
    assert [r["job"]["id"] for r in first] == old[:20], "oldest first, at most the limit"
    rec = first[0]
    assert rec["job"]["state"] == "succeeded" and rec["job"]["tags"] == ["t1"]
    assert [a["output"] for a in rec["attempts"]] == [f"out {old[0]}"] and rec["attempts"][0]["outcome"] == "succeeded"
    everything = await store.archivable_jobs(cut, 1000)
    assert {r["job"]["id"] for r in everything} == set(old + dead), "not recent, not the kept queue, not waiting"
    assert {r["job"]["state"] for r in everything} == {"succeeded", "dead"}

    # a job retried after the read is not purged
    await store.change_jobs({old[0]: lambda job: decide_retry(job, NOW, POLICY)})
    gone = await store.purge_jobs([r["job"]["id"] for r in everything], cut)
    assert gone == len(everything) - 1
    left = {j.id for j in await store.list_jobs(JobFilter(), None, 1000)}
    assert left == {old[0], *recent, *kept_queue, *waiting}, left
    assert await store.list_jobs(JobFilter(tag="t1"), None, 1000) != []
    tagged = [j.id for j in await store.list_jobs(JobFilter(tag="t1"), None, 1000)]
    # a tag's count reads job_tags alone: a purged job's tag row left behind would be counted
    assert await store.count_jobs(JobFilter(tag="t1")) == (len(tagged), True), f"tag rows left for {tagged}"

    restorable = [r for r in everything if r["job"]["id"] != old[0]]
    assert await store.restore_jobs(restorable) == len(restorable)
    back = await store.get_job(old[1])
    assert back.state == "succeeded" and back.finished_at == NOW - 40 * DAY and back.tags == ["t1"]
    assert [a["output"] for a in await store.list_attempts(old[1])] == [f"out {old[1]}"]
    assert {j.id for j in await store.list_jobs(JobFilter(tag="t1"), None, 1000)} >= set(old[1:])
    assert await store.restore_jobs(everything) == 0, "ids in the store are skipped (old[0] too: it was retried)"
    assert (await store.get_job(old[0])).state == "queued", "the restore did not overwrite the retried job"


async def test_archive_lines_are_the_records_encoded(kit: StoreKit) -> None:
    """archivable_lines (SQLite: built in SQL) reads back as archivable_jobs' records: every field, its
    type (a float keeps its microseconds), labels, JSON task and result, attempts in order."""
    store = kit.store
    await finished_jobs(store, 3, "q", NOW - 40 * DAY + 0.1234567)
    base = build_job({"name": 'odd "name"\nwith é', "queue": "q", "tags": ["x", "ü"], "labels": {"gpu": "a100", "zone": "eu"},
                      "max_attempts": 2, "task": {"kind": "python", "function": "m:f", "kwargs": {"n": [1, 2.5, None]}}},
                     NOW - 41 * DAY, POLICY)  # fmt: skip
    at = NOW - 40 * DAY + 1 / 3
    job = {**record(base, [])["job"], "id": 10**6, "state": "dead", "attempt": 2, "started_at": at - 1.5,
           "finished_at": at, "updated_at": at, "result": {"ok": False, "why": "é\u0001"}, "last_error": "boom",
           "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01", "timeout": 12.0}  # fmt: skip
    attempts = [{"attempt": n, "agent": "a1", "claimed_at": at - 9 + n, "started_at": at - 8 + n,
                 "finished_at": at - 7 + n, "outcome": "failed", "error": f"e{n}", "exit_code": n,
                 "output": f"out {n}", "result": [n] if n == 2 else None} for n in (2, 1)]  # fmt: skip
    assert await store.restore_jobs([{"job": job, "attempts": attempts}]) == 1
    cut = Cutoffs(NOW - 30 * DAY)
    records = await store.archivable_jobs(cut, 100)
    lines = await store.archivable_lines(cut, 100)
    assert [line.id for line in lines] == [r["job"]["id"] for r in records] and len(lines) == 4
    assert [orjson.loads(line.json) for line in lines] == records
    for line, r in zip(lines, records, strict=True):
        assert line.day == time.strftime("%Y-%m-%d", time.gmtime(r["job"]["finished_at"]))
        assert {k: type(v) for k, v in orjson.loads(line.json)["job"].items()} == {
            k: type(v) for k, v in r["job"].items()}, "the same types"  # fmt: skip
    mine = next(orjson.loads(line.json) for line in lines if line.id == 10**6)
    assert mine["job"]["finished_at"] == at and mine["job"]["labels"] == {"gpu": "a100", "zone": "eu"}
    assert [a["attempt"] for a in mine["attempts"]] == [1, 2] and mine["attempts"][1]["result"] == [2]


async def _pg_searchable(kit: StoreKit, ids: list[int]) -> list[int] | None:
    """Which of `ids` the PostgreSQL search index holds (SQLite's contentless FTS5 index cannot say: None)."""
    if kit.kind == "sqlite":
        return None
    async with kit.store._pool.acquire() as c:
        return [r[0] for r in await c.fetch("SELECT job_id FROM job_search WHERE job_id = ANY($1::bigint[]) "
                                            "ORDER BY job_id", ids)]  # fmt: skip


async def test_restored_jobs_are_counted_and_found_by_a_search(kit: StoreKit) -> None:
    """A restore puts jobs back into the counts (/v1/stats, /v1/queues) and into the search index
    (SQLite: when their ids are below what it holds; the insert does both, sqlite/0023. PostgreSQL:
    the insert's trigger marks their text pending, postgres/0024, the indexer writes it; the delete's
    trigger of postgres/0023 takes a purged job's text out)."""
    from tests.store.test_job_counts import assert_counts_agree
    from tests.store.test_job_lists import _search_index_filled

    store = kit.store
    old = await finished_jobs(store, 6, "q", NOW - 40 * DAY)
    await store.submit_jobs([build_job({"name": "newer", "queue": "q", "task": {"kind": "shell", "command": "true"}},
                                       NOW, POLICY)])  # fmt: skip
    await _search_index_filled(store)
    assert await _pg_searchable(kit, old) in (old, None)
    records = await store.archivable_jobs(Cutoffs(NOW - 30 * DAY), 100)
    assert await store.purge_jobs([r["job"]["id"] for r in records], Cutoffs(NOW - 30 * DAY)) == len(old)
    assert await _pg_searchable(kit, old) in ([], None), "a purged job's text left in the search index"
    assert await store.restore_jobs(records) == len(old)
    await _search_index_filled(store)  # PostgreSQL: their text is written after the commit
    assert await _pg_searchable(kit, old) in (old, None)
    await assert_counts_agree(store, "after a restore")
    found = [j.id for j in await store.list_jobs(JobFilter(search="old-q-3"), None, 100)]
    assert found == [old[3]], f"a search for a restored job's name found {found}, expected [{old[3]}]"


async def test_the_retention_loop_archives_by_day_and_purges(kit: StoreKit, tmp_path: Path) -> None:
    store = kit.store
    day_a = await finished_jobs(store, 7, "q", NOW - 40 * DAY)
    day_b = await finished_jobs(store, 5, "q", NOW - 39 * DAY)
    recent = await finished_jobs(store, 2, "q", NOW - 2 * DAY)
    settings = load_settings(environ={}, data_dir=tmp_path, job_retention_days=30, retention_batch=4,
                             retention_pause_seconds=0)  # fmt: skip
    retention = Retention(store, settings, clock=lambda: NOW)
    assert await retention.run_once() == (12, 12)
    archive = Archive(tmp_path / "archive")
    files = archive.files()
    assert [f["day"] for f in files] == ["2026-08-13", "2026-08-12"], files
    ids = {f["file"]: [r["job"]["id"] for r in archive.records(f["file"])] for f in files}
    assert ids == {"jobs-2026-08-12.jsonl.gz": day_a, "jobs-2026-08-13.jsonl.gz": day_b}
    # every line is JSON in a gzip stream of several members (one per batch), readable by any gzip reader
    raw = gzip.decompress((tmp_path / "archive" / "jobs-2026-08-12.jsonl.gz").read_bytes()).splitlines()
    assert [orjson.loads(line)["job"]["id"] for line in raw] == day_a
    assert {j.id for j in await store.list_jobs(JobFilter(), None, 100)} == set(recent)
    assert archive.find(day_b[2]) == ("jobs-2026-08-13.jsonl.gz", next(
        r for r in archive.records("jobs-2026-08-13.jsonl.gz") if r["job"]["id"] == day_b[2]))  # fmt: skip
    assert await retention.run_once() == (0, 0), "nothing left to do"
    recorded = [(f["file"], f["day"], f["jobs"], f["first_job"], f["last_job"], f["node"], f["folder"])
                for f in await store.archive_files()]  # fmt: skip
    folder = str(tmp_path / "archive")
    assert recorded == [
        ("jobs-2026-08-13.jsonl.gz", "2026-08-13", 5, day_b[0], day_b[-1], retention.node, folder),
        ("jobs-2026-08-12.jsonl.gz", "2026-08-12", 7, day_a[0], day_a[-1], retention.node, folder),
    ], "the store knows each file, its node and folder, how many jobs went in (over 3 batches of 4) and their ids"
    assert {f["bytes"] for f in await store.archive_files()} == {f["bytes"] for f in files}
    opened: list[str] = []
    records = archive.records
    archive.records = lambda name: (opened.append(name), records(name))[1]  # type: ignore[method-assign]
    want = next(r for r in records("jobs-2026-08-12.jsonl.gz") if r["job"]["id"] == day_a[3])
    assert archive.find(day_a[3], await store.archive_files()) == ("jobs-2026-08-12.jsonl.gz", want)
    assert opened == ["jobs-2026-08-12.jsonl.gz"], "show reads the one file whose recorded ids hold the job"
    assert archive.find(recent[0], await store.archive_files()) is None and opened == ["jobs-2026-08-12.jsonl.gz"]
    unrecorded = {**want, "job": {**want["job"], "id": 10**9}}  # a file written before the store kept rows
    (tmp_path / "archive" / "jobs-2026-08-11.jsonl.gz").write_bytes(gzip.compress(orjson.dumps(unrecorded) + b"\n"))
    opened.clear()
    assert archive.find(10**9, await store.archive_files()) == ("jobs-2026-08-11.jsonl.gz", unrecorded)
    assert opened == ["jobs-2026-08-11.jsonl.gz"], "a file with no row is searched; the recorded ones are not opened"
    opened.clear()
    assert archive.find(day_b[0], []) is not None and len(opened) == 1, "no rows: the newest files first, as before"


async def test_retention_batches_give_way_while_pickups_run_behind(
    kit: StoreKit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the node's claims run behind (Engine.pickup_behind), each batch waits up to MAX_YIELD before
    the next, asking again every YIELD_STEP; once they keep up, only the configured pause."""
    import core.retention as retention_module

    monkeypatch.setattr(retention_module, "MAX_YIELD", 0.2)
    monkeypatch.setattr(retention_module, "YIELD_STEP", 0.05)
    await finished_jobs(kit.store, 12, "q", NOW - 40 * DAY)
    settings = load_settings(environ={}, data_dir=tmp_path, job_retention_days=30, retention_batch=4,
                             retention_pause_seconds=0)  # fmt: skip
    asked: list[float] = []

    def behind(seconds: float) -> bool:
        asked.append(seconds)
        return True

    began = time.monotonic()
    assert await Retention(kit.store, settings, clock=lambda: NOW, pickup_behind=behind).run_once() == (12, 12)
    took = time.monotonic() - began
    assert took >= 3 * 0.2, f"3 batches, each waited for the claims: {took:.2f} s"
    assert len(asked) == 3 * 4 and set(asked) == {retention_module.PICKUP_BEHIND}, asked
    await finished_jobs(kit.store, 12, "q", NOW - 40 * DAY)
    began = time.monotonic()
    assert await Retention(kit.store, settings, clock=lambda: NOW, pickup_behind=lambda s: False).run_once() == (12, 12)
    assert time.monotonic() - began < 3 * 0.2, "keeping up: no wait beyond the pause"


@two_nodes
async def test_two_nodes_never_archive_the_same_batch(kit: StoreKit, tmp_path: Path) -> None:
    """Both nodes run a retention round at once, each to its own archive folder: one holds the
    store's retention lease and archives everything, the other archives nothing; no job is in both."""
    other = await kit.another()
    old = await finished_jobs(kit.store, 40, "q", NOW - 40 * DAY)
    rounds = []
    for name, store in (("a", kit.store), ("b", other)):
        settings = load_settings(environ={}, data_dir=tmp_path / name, job_retention_days=30, retention_batch=5,
                                 retention_pause_seconds=0.01)  # fmt: skip
        rounds.append(Retention(store, settings, clock=lambda: NOW))
    done = await asyncio.gather(*(r.run_once() for r in rounds))
    assert sorted(done) == [(0, 0), (40, 40)], done
    archived = [[r["job"]["id"] for f in Archive(tmp_path / n / "archive").files()
                 for r in Archive(tmp_path / n / "archive").records(f["file"])] for n in "ab"]  # fmt: skip
    assert sorted(archived[0] + archived[1]) == old, "every job archived once, by one node"
    lease = await other.claim_relay(LEASE, "someone-else", 60)
    assert lease is not None, "the lease was released at the end of the round"
    await finished_jobs(kit.store, 3, "q", NOW - 40 * DAY)
    assert await rounds[0].run_once() == (0, 0), "while another node holds the lease, this one waits"
    await other.release_relay(lease)
    assert await rounds[0].run_once() == (3, 3)
    assert [p.name for p in await kit.store.relay_positions()] == [], "the lease is not shown as a relay"


async def test_slo_counts_of_the_jobs_finished_in_a_window(kit: StoreKit) -> None:
    store = kit.store
    await finished_jobs(store, 4, "q", NOW - 100)  # each started 6 s after it was due
    await finished_jobs(store, 2, "q", NOW - 90, outcome="failed")
    await finished_jobs(store, 3, "q", NOW - 2 * DAY)
    counts = await store.slo_counts(NOW - 3600)
    assert counts == {"started": 6, "under_100": 0, "under_500": 0, "under_2000": 0, "succeeded": 4, "dead": 2}
    assert (await store.slo_counts(NOW - 3 * DAY))["started"] == 9


async def test_an_idempotency_key_lives_as_long_as_its_job_then_makes_a_new_one(kit: StoreKit) -> None:
    """The documented retention of idempotency keys (docs/workflows.md): job_retention_days, per queue."""
    store = kit.store
    spec = {"name": "once", "queue": "q", "idempotency_key": "invoice-7", "max_attempts": 1,
            "task": {"kind": "shell", "command": "true"}}  # fmt: skip
    [(first, created)] = await store.submit_jobs([build_job(spec, NOW - 40 * DAY, POLICY)])
    [claimed] = await store.claim_jobs(ClaimRequest("a1", 10, frozenset({"q"})), NOW - 40 * DAY)
    await store.change_jobs({claimed.id: lambda j: decide_finish(j, RunResult(j.id, 1, "succeeded"), NOW - 40 * DAY,
                                                                 POLICY)})  # fmt: skip
    [(again, created_again)] = await store.submit_jobs([build_job(spec, NOW, POLICY)])
    assert created and (again.id, created_again) == (first.id, False), "while its job is stored the key answers"
    cut = Cutoffs(NOW - 30 * DAY, {})
    assert await store.purge_jobs([r["job"]["id"] for r in await store.archivable_jobs(cut, 10)], cut) == 1
    [(fresh, created_fresh)] = await store.submit_jobs([build_job(spec, NOW, POLICY)])
    assert created_fresh and fresh.id != first.id, "once retention purged its job, the key makes a new job"


def test_a_purge_delete_takes_the_jobs_that_fit_in_what_is_left_of_its_slice() -> None:
    from core.store import archive

    pace = archive.Pace()
    began = time.perf_counter()
    assert pace.next(began, 0) == 10, "before anything is measured: 10 jobs"
    pace.took(10, archive.PURGE_SLICE / 100)  # 0.01 of the slice a job: room for 100, but at most twice the last
    assert pace.next(time.perf_counter(), 0) == 20
    pace.took(20, archive.PURGE_SLICE * 2)  # one job costs a tenth of the slice
    assert pace.next(time.perf_counter(), 0) <= 10
    assert pace.next(time.perf_counter() - archive.PURGE_SLICE, 5) == 0, "a spent slice takes no more"
    assert pace.next(time.perf_counter() - archive.PURGE_SLICE, 0) == 1, "an operation's first DELETE always runs"


async def test_a_purge_holds_the_sqlite_writer_about_a_slice_however_dear_a_job_is(tmp_path: Path) -> None:
    """Each DELETE of a purge takes the jobs that fit in what is left of its write operation's slice,
    at the cost the last one measured: when a job costs 2 ms to delete, no transaction deletes more
    than 10 (the first DELETE's share, before anything was measured). The old fixed chunk of 100 jobs
    per DELETE held the writer 100 x 2 ms in one transaction."""
    from core.store.sqlite import SQLiteStore

    statements: list[str] = []
    store = SQLiteStore(tmp_path / "jobdeck.db", POLICY, on_commit=lambda events: None, trace=statements.append)
    await store.open()
    try:
        old = await finished_jobs(store, 60, "q", NOW - 40 * DAY)

        def dear_deletes(tx: Any) -> None:  # on the writer's connection: a job costs at least 2 ms to delete
            tx.conn.create_function("dear", 0, lambda: time.sleep(0.002))
            tx.conn.execute("CREATE TEMP TRIGGER dear_delete AFTER DELETE ON jobs BEGIN SELECT dear(); END")

        await store._write(dear_deletes)
        statements.clear()
        assert await store.purge_jobs(old, Cutoffs(NOW - 30 * DAY)) == len(old)
    finally:
        await store.close()
    per_tx: list[set[str]] = []  # each transaction's job ids deleted (the trace repeats a statement per row it returns)
    for s in statements:
        if s.startswith("BEGIN"):
            per_tx.append(set())
        elif s.startswith("DELETE FROM jobs WHERE id IN ("):
            per_tx[-1].update(s.split("(", 1)[1].split(")", 1)[0].split(", "))
    sizes = [len(ids) for ids in per_tx if ids]
    assert sum(sizes) == len(old), sizes
    assert max(sizes) <= 10, f"jobs deleted per transaction: {sizes}"


async def test_a_purge_gives_way_after_one_delete_when_another_write_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A purge operation stops after its first DELETE once another write is queued for the writer (a
    submit or a claim waits one DELETE, not the rest of the slice). The slice is made long enough for
    every job, so without giving way all 60 go in one transaction (DELETEs of 10, 20 and 30); here each
    deleted row queues a write from the event loop first, and no transaction runs a second DELETE."""
    from core.store import archive
    from core.store.sqlite import SQLiteStore

    monkeypatch.setattr(archive, "PURGE_SLICE", 30.0)
    statements: list[str] = []
    store = SQLiteStore(tmp_path / "jobdeck.db", POLICY, on_commit=lambda events: None, trace=statements.append)
    await store.open()
    loop = asyncio.get_running_loop()
    queued: list[asyncio.Future[Any]] = []

    async def queue_a_write() -> None:
        queued.append(store._write(lambda tx: None))

    try:
        old = await finished_jobs(store, 60, "q", NOW - 40 * DAY)

        def write_waits(tx: Any) -> None:  # on the writer's connection: a deleted job queues another write
            tx.conn.create_function("queue_write", 0,
                                    lambda: asyncio.run_coroutine_threadsafe(queue_a_write(), loop).result(5))  # fmt: skip
            tx.conn.execute("CREATE TEMP TRIGGER write_waits AFTER DELETE ON jobs BEGIN SELECT queue_write(); END")

        await store._write(write_waits)
        statements.clear()
        assert await store.purge_jobs(old, Cutoffs(NOW - 30 * DAY)) == len(old)
        await asyncio.gather(*queued)
    finally:
        await store.close()
    per_tx: list[set[str]] = []  # each transaction's DELETE statements on jobs
    for s in statements:
        if s.startswith("BEGIN"):
            per_tx.append(set())
        elif s.startswith("DELETE FROM jobs WHERE id IN ("):
            per_tx[-1].add(s)
    deletes = [len(d) for d in per_tx if d]
    assert len(queued) == len(old) and len(deletes) >= 3, deletes
    assert max(deletes) == 1, f"DELETE statements per transaction: {deletes}"
