"""Retention, the archive API and CLI, and backup / restore, on real nodes and processes: old
finished jobs leave the store for the archive and come back; a backup of a live store under load
restores to the same jobs; a PostgreSQL dump restores into a working node."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from core.client import JobDeckClient
from tests.conftest import ROOT, node_settings, spawn_jobdeck, start_node, stop_node, stop_process
from tests.services import create_database
from tests.store.test_archive import DAY, finished_jobs


def jobdeck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "core.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)  # fmt: skip


async def test_old_jobs_go_to_the_archive_and_come_back_through_the_api(tmp_path: Path) -> None:
    settings = node_settings(tmp_path, job_retention_days=30, queue_retention_days={"audit": 0},
                             retention_batch=50, retention_pause_seconds=0)  # fmt: skip
    node, url, task = await start_node(settings, local_agent=False)
    try:
        now = time.time()
        old = await finished_jobs(node.store, 120, "q", now - 45 * DAY)
        kept = await finished_jobs(node.store, 3, "audit", now - 45 * DAY)
        fresh = await finished_jobs(node.store, 2, "q", now - DAY)
        assert await node.retention.run_once() == (120, 120)
        async with JobDeckClient(url) as c:
            listing = await c.archive_files()
            assert [f["file"] for f in listing["files"]] == [f"jobs-{_day(now - 45 * DAY)}.jsonl.gz"], listing
            assert listing["folder"] == str(tmp_path / "archive")
            assert (await c.list_jobs(limit=500))["jobs"].__len__() == len(kept) + len(fresh)
            shown = await c.archived_job(old[7])
            assert shown["job"]["id"] == old[7] and shown["job"]["state"] == "succeeded", shown
            assert shown["attempts"][0]["output"] == f"out {old[7]}"
            assert shown["file"] == listing["files"][0]["file"]
            async with httpx.AsyncClient(base_url=url) as http:
                missing = await http.get(f"/v1/archive/jobs/{fresh[0]}")
                assert missing.status_code == 404 and "in no archive file" in missing.json()["message"], missing.text
                bad = await http.post("/v1/archive/restore", json={"file": "../jobdeck.db"})
                assert bad.status_code == 422 and bad.json()["field"] == "file", bad.text
                gone = await http.post("/v1/archive/restore", json={"file": "jobs-2001-01-01.jsonl.gz"})
                assert gone.status_code == 404 and gone.json()["field"] == "file", gone.text
            done = await c.restore_archive(shown["file"])
            assert done == {"file": shown["file"], "records": 120, "restored": 120, "skipped": 0}, done
            back = await c.get_job(old[7])
            assert back["state"] == "succeeded" and back["id"] == old[7]
            assert (await c.attempts(old[7]))[0]["output"] == f"out {old[7]}"
            again = await c.restore_archive(shown["file"])
            assert (again["restored"], again["skipped"]) == (0, 120)
    finally:
        await stop_node(node, task)


def _day(ts: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(ts))


def test_archive_cli_against_a_running_node(tmp_path: Path) -> None:
    sp = spawn_jobdeck(tmp_path / "data", "server")
    try:
        env = {**os.environ, "JOBDECK_SERVER": sp.url}
        out = jobdeck("archive", "ls", env=env)
        assert out.returncode == 0 and f"archive: {tmp_path / 'data' / 'archive'}" in out.stdout, out
        out = jobdeck("archive", "show", "5", env=env)
        assert out.returncode == 1 and "job 5 is in no archive file" in out.stderr, out
        out = jobdeck("archive", "restore", "nope.gz", env=env)
        assert out.returncode == 1 and "must be an archive file's name" in out.stderr, out
    finally:
        stop_process(sp.proc)


def _counts(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return dict(conn.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall())
    finally:
        conn.close()


async def test_a_backup_of_a_live_store_under_load_restores_to_the_same_jobs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    sp = spawn_jobdeck(data, "up", env={"JOBDECK_LOCAL_SLOTS": "8"})
    backup_file = tmp_path / "backups" / "b1.db"
    try:
        async with JobDeckClient(sp.url) as c:
            stop = asyncio.Event()

            async def load() -> int:
                n = 0
                while not stop.is_set():
                    await c.submit_batch([{"name": "load", "queue": "load", "task": {"kind": "shell",
                                                                                     "command": "true"}}] * 50)  # fmt: skip
                    n += 50
                return n

            loader = asyncio.create_task(load())
            await asyncio.sleep(1.0)  # jobs being submitted, claimed and finished while the copy is made
            out = await asyncio.to_thread(jobdeck, "backup", str(backup_file), "--data-dir", str(data), "--json")
            stop.set()
            submitted = await loader
        assert out.returncode == 0, out.stderr
        facts = json.loads(out.stdout)
        assert 0 < facts["jobs"] <= submitted, (facts, submitted)
        assert _counts(backup_file) == facts["by_state"]
        again = jobdeck("backup", str(backup_file), "--data-dir", str(data))
        assert again.returncode == 1 and "exists already" in again.stderr, again
        running = jobdeck("restore", str(backup_file), "--data-dir", str(data))
        assert running.returncode == 1 and "is running on" in running.stderr, running
    finally:
        stop_process(sp.proc)
    before = _counts(data / "jobdeck.db")
    assert sum(before.values()) >= facts["jobs"], "the store went on after the copy"
    restored = jobdeck("restore", str(backup_file), "--data-dir", str(data))
    assert restored.returncode == 0, restored.stderr
    assert "the store it replaced is kept as" in restored.stdout
    # the restored node serves the backup's jobs: same count, same states (running ones are retried)
    sp = spawn_jobdeck(data, "server")
    try:
        async with JobDeckClient(sp.url) as c:
            stats = await c.stats()
        by_state = {k: v for k, v in stats["by_state"].items() if v}
        assert sum(by_state.values()) == facts["jobs"], (by_state, facts)
        settled = {k: v for k, v in facts["by_state"].items() if k != "running"}
        assert all(by_state.get(k, 0) >= v for k, v in settled.items()), (by_state, facts["by_state"])
    finally:
        stop_process(sp.proc)
    bad = tmp_path / "not-a-store.db"
    bad.write_text("hello")
    out = jobdeck("restore", str(bad), "--data-dir", str(data))
    assert out.returncode == 1 and "is not a JobDeck SQLite store" in out.stderr, out


@pytest.mark.skipif(shutil.which("pg_dump") is None, reason="pg_dump missing (apt-get install postgresql-client)")
async def test_a_postgres_dump_restores_into_a_working_node(tmp_path: Path) -> None:
    """docs/postgres.md's recipe: pg_dump the JobDeck database, pg_restore it into an empty one, start a
    node on it. A database of its own (as a deployment has): the extensions the search index needs
    (pg_trgm, btree_gin) are in the dump with the schema, where a database shared by several test
    schemas would hold them in whichever schema migrated first."""
    source, drop_source = await create_database()
    target, drop = await create_database()
    try:
        node, url, task = await start_node(node_settings(tmp_path / "a", database_url=source), local_agent=False)
        try:
            async with JobDeckClient(url) as c:
                ids = [(await c.submit({"name": f"pg-{i}", "queue": "pg", "task": {"kind": "shell", "command": "true"},
                                        "delay": 3600}))["id"] for i in range(5)]  # fmt: skip
        finally:
            await stop_node(node, task)
        dump = tmp_path / "jobdeck.dump"
        out = subprocess.run(["pg_dump", "--format=custom", f"--file={dump}", source], capture_output=True, text=True,
                             timeout=120)  # fmt: skip
        assert out.returncode == 0, out.stderr
        out = subprocess.run(["pg_restore", "--no-owner", f"--dbname={target}", str(dump)], capture_output=True,
                             text=True, timeout=120)  # fmt: skip
        assert out.returncode == 0, out.stderr
        node, url, task = await start_node(node_settings(tmp_path / "b", database_url=target), local_agent=False)
        try:
            async with JobDeckClient(url) as c:
                jobs = (await c.list_jobs(queue="pg"))["jobs"]
                assert sorted(j["id"] for j in jobs) == ids and {j["state"] for j in jobs} == {"scheduled"}
                assert [j["id"] for j in (await c.list_jobs(q="pg-3"))["jobs"]] == [ids[3]], (
                    "the search index came along"
                )
                made = await c.submit({"name": "after", "queue": "pg", "task": {"kind": "shell", "command": "true"}})
                assert made["id"] > max(ids), "the id sequence came along: no id is handed out twice"
        finally:
            await stop_node(node, task)
    finally:
        await drop()
        await drop_source()


async def test_two_postgres_nodes_list_each_other_s_archive_files(tmp_path: Path, pg_url: str) -> None:
    """Each node archives into its own folder; `archive ls` on either lists both nodes' files (the
    store records each file with its node and folder), and show / restore through the node that
    lacks a file say which node has it."""
    nodes = []
    for name in ("node-a", "node-b"):
        settings = node_settings(tmp_path / name, database_url=pg_url, archive_node=name, job_retention_days=30,
                                 retention_batch=7, retention_pause_seconds=0, retention_interval_seconds=3600)  # fmt: skip
        nodes.append(await start_node(settings, local_agent=False))
    (a, a_url, _), (b, b_url, _) = nodes
    try:
        now = time.time()
        by_a = await finished_jobs(a.store, 30, "q", now - 45 * DAY)
        assert await a.retention.run_once() == (30, 30)
        by_b = await finished_jobs(b.store, 20, "q", now - 40 * DAY)
        assert await b.retention.run_once() == (20, 20)
        file_a, file_b = f"jobs-{_day(now - 45 * DAY)}.jsonl.gz", f"jobs-{_day(now - 40 * DAY)}.jsonl.gz"
        for url, mine in ((a_url, "node-a"), (b_url, "node-b")):
            async with JobDeckClient(url) as c:
                listing = await c.archive_files()
            got = [(f["file"], f["node"], f["jobs"], f["here"]) for f in listing["files"]]
            assert got == [(file_b, "node-b", 20, mine == "node-b"), (file_a, "node-a", 30, mine == "node-a")], got
            assert listing["node"] == mine and {f["folder"] for f in listing["files"]} == {
                str(tmp_path / n / "archive") for n in ("node-a", "node-b")}  # fmt: skip
            assert all(f["bytes"] > 0 for f in listing["files"]), listing
        out = await asyncio.to_thread(jobdeck, "archive", "ls", env={**os.environ, "JOBDECK_SERVER": a_url})
        assert out.returncode == 0 and "node-b" in out.stdout and file_b in out.stdout, out
        async with httpx.AsyncClient(base_url=a_url) as http:
            there = await http.get(f"/v1/archive/jobs/{by_b[3]}")
            assert there.status_code == 404 and f"{file_b} on node node-b" in there.json()["message"], there.text
            put = await http.post("/v1/archive/restore", json={"file": file_b})
            assert put.status_code == 404 and "node node-b" in put.json()["message"], put.text
        async with JobDeckClient(b_url) as c:
            assert (await c.archived_job(by_b[3]))["file"] == file_b
            assert (await c.restore_archive(file_b))["restored"] == 20
        async with JobDeckClient(a_url) as c:
            assert (await c.get_job(by_b[3]))["state"] == "succeeded", "restored through B, seen through A"
            assert (await c.archived_job(by_a[0]))["file"] == file_a
    finally:
        for node, _, task in nodes:
            await stop_node(node, task)


async def test_the_node_s_retention_knows_when_its_claims_run_behind(tmp_path: Path) -> None:
    """Engine.pickup_behind, what the node's retention gives way to: a job claimed 0.3 s after it was due
    (its queue paused meanwhile) says the claims run behind; a second later, with nothing claimed
    since, it says nothing."""
    node, url, task = await start_node(node_settings(tmp_path, job_retention_days=30))
    try:
        assert node.retention.pickup_behind == node.engine.pickup_behind
        async with JobDeckClient(url) as c:
            await c.queue_action("late", "pause")
            job = await c.submit({"queue": "late", "task": {"kind": "python", "function": "agents.builtin:noop"}})
            await asyncio.sleep(0.3)
            await c.queue_action("late", "resume")
            await c.wait_for(job["id"], timeout=30)
            assert node.engine.pickup_behind(0.05) and not node.engine.pickup_behind(1.0)
            await asyncio.sleep(1.1)
            assert not node.engine.pickup_behind(0.05), "a claim more than a second ago says nothing now"
    finally:
        await stop_node(node, task)
