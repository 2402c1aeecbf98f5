"""`jobdeck` on PostgreSQL as a user runs it: migrate, start, refuse a bad database clearly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from core.client import JobDeckClient
from tests.conftest import ROOT, free_port, spawn_jobdeck
from tests.services import execute, run_sync

MIGRATIONS = sorted(int(p.name.split("_")[0]) for p in (ROOT / "migrations" / "postgres").glob("[0-9]*.sql"))


def jobdeck(*args: str, url: str, tmp_path: Path) -> subprocess.Popen[str]:
    env = {"JOBDECK_DATABASE_URL": url, "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "core.cli", *args, "--data-dir", str(tmp_path)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_migrate_applies_each_file_once_even_when_nodes_start_together(pg_url: str, tmp_path: Path) -> None:
    procs = [jobdeck("migrate", url=pg_url, tmp_path=tmp_path) for _ in range(3)]
    outputs = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
        assert f"schema version {MIGRATIONS[-1]}" in out, out
    # one node applied them all and said so in one line; the others found nothing to do and said nothing
    reports = [line for _, err in outputs for line in err.splitlines() if "schema: applied" in line]
    assert len(reports) == 1, reports
    assert f"applied {len(MIGRATIONS)} migrations, 0001_initial to {MIGRATIONS[-1]:04d}_" in reports[0], reports

    async def versions() -> list[int]:
        import asyncpg

        conn = await asyncpg.connect(pg_url)
        try:
            return [r[0] for r in await conn.fetch("SELECT version FROM schema_version ORDER BY version")]
        finally:
            await conn.close()

    assert run_sync(versions()) == MIGRATIONS


def test_an_unreachable_database_is_one_clear_line_with_the_password_hidden(tmp_path: Path) -> None:
    url = f"postgresql://jobdeck:s3cret@127.0.0.1:{free_port()}/jobdeck"
    for command in (("migrate",), ("server", "--port", "0")):
        p = jobdeck(*command, url=url, tmp_path=tmp_path)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 1, (out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, f"expected one line, got:\n{err}"
        assert lines[0].startswith("error: cannot connect to the database at postgresql://jobdeck:***@127.0.0.1:")
        assert "s3cret" not in out + err and "Traceback" not in err


def test_a_database_newer_than_the_code_is_refused(pg_url: str, tmp_path: Path) -> None:
    p = jobdeck("migrate", url=pg_url, tmp_path=tmp_path)
    assert p.wait(60) == 0
    run_sync(execute(pg_url, "INSERT INTO schema_version VALUES (99, 0)"))
    p = jobdeck("server", "--port", "0", url=pg_url, tmp_path=tmp_path)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 1
    assert f"schema is version 99 but this JobDeck knows only up to {MIGRATIONS[-1]}" in err, err
    assert "Traceback" not in err


async def test_a_node_on_postgresql_runs_jobs(pg_url: str, tmp_path: Path) -> None:
    sp = spawn_jobdeck(tmp_path / "data", env={"JOBDECK_DATABASE_URL": pg_url})
    try:
        async with JobDeckClient(sp.url) as c:
            ids = (await c.submit_batch([{"task": {"kind": "shell", "argv": ["echo", str(i)]}} for i in range(20)]))[
                "ids"
            ]
            jobs = [await c.wait_for(i, timeout=30) for i in ids]
            assert {j["state"] for j in jobs} == {"succeeded"}
            assert (await c.attempts(ids[3]))[0]["output"] == "3\n"
        assert "store postgresql://postgres@127.0.0.1:" in sp.output()
    finally:
        sp.proc.terminate()
        sp.proc.wait(15)
