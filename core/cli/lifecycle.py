"""`jobdeck archive ls | show ID | restore FILE` (through a node's API) and `jobdeck backup PATH` /
`jobdeck restore PATH` (on the embedded store's file, beside or without a running node)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from core.cli.output import show, table
from core.client import JobDeckClient
from core.config import load_settings
from core.errors import InvalidInput

ARCHIVE_COLUMNS = (("file", 28), ("day", 10), ("jobs", 8), ("bytes", 12), ("node", 24), ("here", 5))


async def cmd_archive(c: JobDeckClient, args: argparse.Namespace) -> int:
    action = getattr(args, "archive_action", None) or "ls"
    if action == "show":
        found = await c.archived_job(args.id)

        def human(r: dict[str, Any]) -> str:
            j = r["job"]
            lines = [f"job {j['id']} {j['name']} ({j['queue']}): {j['state']}, finished {j['finished_at']} "
                     f"(archived in {r['file']})"]  # fmt: skip
            for a in r["attempts"]:
                lines.append(f"  attempt {a['attempt']}: {a['outcome']} on {a['agent']}"
                             + (f", error: {a['error']}" if a.get("error") else ""))  # fmt: skip
                if a.get("output"):
                    lines += ["    " + line for line in str(a["output"]).splitlines()[-20:]]
            return "\n".join(lines)

        show(args, found, human)
        return 0
    if action == "restore":
        done = await c.restore_archive(args.file)
        show(args, done, lambda d: f"{d['file']}: {d['restored']} jobs restored, {d['skipped']} already in the store")
        return 0
    listing = await c.archive_files()
    show(args, listing, lambda d: f"archive: {d['folder']} (this node: {d['node']}); every node's files "
                                  "(here: this node reads it):\n" + table(d["files"], ARCHIVE_COLUMNS))  # fmt: skip
    return 0


def _store_path(args: argparse.Namespace) -> Path:
    settings = load_settings(data_dir=args.data_dir)
    if settings.database_url.startswith(("postgresql://", "postgres://")):
        raise InvalidInput("the store is PostgreSQL: back it up with pg_dump or base backups and WAL archiving "
                           "(docs/observability.md, 'Backup and restore')", field="database_url")  # fmt: skip
    return settings.sqlite_path


def _say(args: argparse.Namespace, facts: dict[str, Any], verb: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps(facts))
        return
    states = ", ".join(f"{k} {v}" for k, v in sorted(facts["by_state"].items())) or "no jobs"
    print(f"{verb} {facts['path']}: {facts['jobs']} jobs ({states}), schema version {facts['schema_version']}")
    if facts.get("replaced"):
        print(f"the store it replaced is kept as {facts['replaced']}")


def cmd_backup(args: argparse.Namespace) -> int:
    from core.store.backup import backup

    _say(args, backup(_store_path(args), Path(args.path)), "backed up to")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from core.store.backup import restore

    _say(args, restore(Path(args.path), _store_path(args)), "restored")
    return 0
