"""The migration files a store applies: read from the `migrations` package's data (importlib.resources).

They ship inside the wheel (pyproject's package-data), so an installed JobDeck finds them wherever it
runs from. A missing or empty folder, a file name without its number, a number used twice or a gap in
the numbering is an error at start, never a store without its tables.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

from core.errors import Unavailable

log = logging.getLogger("jobdeck.store")

ENGINES = ("sqlite", "postgres")
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    """One numbered SQL file of one engine."""

    version: int
    name: str
    sql: str


def folder(engine: str) -> Traversable:
    """The package-data folder of `engine`'s migrations (it may not exist: load() says so)."""
    if engine not in ENGINES:
        raise ValueError(f"no such database engine {engine!r}; one of {', '.join(ENGINES)}")
    try:
        return resources.files("migrations").joinpath(engine)
    except ModuleNotFoundError:
        raise Unavailable(_broken("the `migrations` package is not importable")) from None


def load(engine: str, where: Traversable | None = None) -> list[Migration]:
    """Every migration of `engine` (from `where`, default its package folder) in number order;
    Unavailable if the set is missing or malformed."""
    where = folder(engine) if where is None else where
    if not where.is_dir():
        raise Unavailable(_broken(f"its migrations folder migrations/{engine} is missing ({where})"))
    found: dict[int, Migration] = {}
    for entry in where.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _NAME.match(entry.name)
        if match is None:
            raise Unavailable(f"migration file migrations/{engine}/{entry.name} is not named NNNN_what_it_does.sql")
        version = int(match.group(1))
        if version in found:
            raise Unavailable(
                f"migrations/{engine} has two files numbered {version:04d} ({found[version].name}, {entry.name}): "
                "renumber the newer one to the next free number"
            )
        found[version] = Migration(version, entry.name, entry.read_text(encoding="utf-8"))
    if not found:
        raise Unavailable(_broken(f"its migrations folder migrations/{engine} has no NNNN_*.sql files ({where})"))
    versions = sorted(found)
    missing = sorted(set(range(1, versions[-1] + 1)) - set(versions))
    if missing:
        raise Unavailable(
            f"migrations/{engine} skips number(s) {', '.join(f'{v:04d}' for v in missing)}: "
            "number migrations 0001, 0002, ... without gaps"
        )
    return [found[v] for v in versions]


def _broken(what: str) -> str:
    return f"this JobDeck installation is incomplete: {what}; reinstall JobDeck (pip install --force-reinstall jobdeck)"


def report(applied: list[str], version: int) -> None:
    """One log line for the migrations a start applied (each file's name is at DEBUG): a fresh store
    says it was created, an upgraded one from which file to which; nothing when none was due."""
    if not applied:
        return
    if len(applied) == 1:
        log.info("schema: applied migration %s (version %d)", applied[0].removesuffix(".sql"), version)
    else:
        first, last = applied[0].removesuffix(".sql"), applied[-1].removesuffix(".sql")
        log.info("schema: applied %d migrations, %s to %s (version %d)", len(applied), first, last, version)
