"""The migration files ship as package data and a broken set stops a node at start, saying why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import Unavailable
from core.store import schema
from tests.conftest import ROOT, free_port


def test_each_engine_has_a_numbered_set_from_the_package() -> None:
    for engine in schema.ENGINES:
        found = schema.load(engine)
        assert [m.version for m in found] == list(range(1, len(found) + 1)), [m.name for m in found]
        assert found[0].name == "0001_initial.sql" and "CREATE TABLE" in found[0].sql
    assert Path(str(schema.folder("sqlite"))) == ROOT / "migrations" / "sqlite"


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (None, "its migrations folder migrations/sqlite is missing"),
        ([], "has no NNNN_*.sql files"),
        (["0001_a.sql", "0001_b.sql"], "two files numbered 0001 (0001_a.sql, 0001_b.sql): renumber the newer one"),
        (["0001_a.sql", "0003_c.sql"], "skips number(s) 0002"),
        (["0001_a.sql", "2_b.sql"], "2_b.sql is not named NNNN_what_it_does.sql"),
    ],
)
def test_a_broken_set_of_files_is_an_error(tmp_path: Path, files: list[str] | None, expected: str) -> None:
    where = tmp_path / "sqlite"
    if files is not None:
        where.mkdir()
        for name in files:
            (where / name).write_text("CREATE TABLE t (x INTEGER);\n")
    with pytest.raises(Unavailable) as caught:
        schema.load("sqlite", where)
    assert expected in caught.value.message, f"expected {expected!r} in {caught.value.message!r}"


def test_a_node_without_its_migrations_refuses_to_start(tmp_path: Path) -> None:
    # An install that lost its package data: an empty `migrations` package ahead of the real one.
    fake = tmp_path / "site" / "migrations"
    (fake / "sqlite").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    code = f"import sys; sys.path.insert(0, {str(fake.parent)!r}); from core.cli import main; sys.exit(main())"
    out = subprocess.run(
        [sys.executable, "-c", code, "up", "--no-web", "--data-dir", str(tmp_path / "data"), "--port", str(free_port())],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert (
        "error: this JobDeck installation is incomplete: its migrations folder migrations/sqlite has no" in out.stderr
    )
    assert "Traceback" not in out.stderr, out.stderr
    db = tmp_path / "data" / "jobdeck.db"
    assert not db.exists() or _tables(db) == set(), "a broken install must write nothing"


def _tables(db: Path) -> set[str]:
    import sqlite3

    with sqlite3.connect(db) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
