"""`jobdeck workflows`: submit a DAG from a JSON file, list workflows, show one as a layered tree,
cancel / pause / resume it (docs/workflows.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import orjson

from core.cli.output import show, table, when
from core.client import JobDeckClient, workflow_layers
from core.errors import InvalidInput

ORDER = ("succeeded", "skipped", "running", "queued", "scheduled", "failed", "blocked", "paused", "dead", "cancelled")
COLUMNS = (
    ("id", 6),
    ("name", 24),
    ("state", 10),
    ("total", 6),
    ("created_at", 24),
    ("finished_at", 24),
    ("progress", 50),
)


def progress(counts: dict[str, int]) -> str:
    return ", ".join(f"{counts[s]} {s}" for s in ORDER if counts.get(s))


def tree(wf: dict[str, Any]) -> str:
    """A workflow and its jobs, layer by layer, each with its state and what it waits for; the
    state, id and parents columns line up whatever a job's depth."""
    refs = {n["id"]: n.get("ref") or str(n["id"]) for n in wf["nodes"]}
    ended = f", finished {when(wf['finished_at'])}" if wf.get("finished_at") else ""
    lines = [f"workflow {wf['id']} {wf['name']}: {wf['state']}{' (paused)' if wf['paused'] else ''} "
             f"- {progress(wf['counts'])}", f"created {when(wf['created_at'])}{ended}"]  # fmt: skip
    rows = [(f"{'  ' * depth}{'└─ ' if depth else '● '}{refs[n['id']]}", n)
            for depth, layer in enumerate(workflow_layers(wf["nodes"])) for n in layer]  # fmt: skip
    width = max((len(label) for label, _ in rows), default=0) + 2
    for label, n in rows:
        waits = f"  <- {', '.join(refs.get(p, str(p)) for p in n['parents'])}" if n["parents"] else ""
        why = f"  ({n['last_error']})" if n.get("last_error") else ""  # a cancelled child: its parent failed
        lines.append(f"{label:<{width}}{n['state']:<10} #{n['id']:<6}{waits}{why}".rstrip())
    return "\n".join(lines)


def load_workflow_file(path: str) -> dict[str, Any]:
    try:
        data = orjson.loads(Path(path).read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise InvalidInput(f"{path}: not a readable JSON file ({exc})", field="file") from None
    if not isinstance(data, dict) or "jobs" not in data:
        raise InvalidInput(f'{path}: expected {{"name": ..., "jobs": [{{"ref": ..., "depends_on": [...], ...}}]}}',
                           field="file")  # fmt: skip
    return data


async def cmd_workflows(c: JobDeckClient, args: argparse.Namespace) -> int:
    action = getattr(args, "workflow_action", None) or "ls"
    if action == "ls":
        page = await c.workflows(state=args.state, limit=args.limit)
        rows = [{**w, "progress": progress(w["counts"])} for w in page["workflows"]]
        show(args, page, lambda _: table(rows, COLUMNS))
    elif action == "submit":
        data = load_workflow_file(args.file)
        out = await c.submit_workflow(str(data.get("name") or args.name or Path(args.file).stem), data["jobs"])
        wf = out["workflow"]
        show(args, out, lambda _: f"workflow {wf['id']} {wf['name']}: {wf['total']} jobs ({progress(wf['counts'])})")
    elif action == "show":
        show(args, await c.get_workflow(args.id), tree)
    else:
        wf = await c.workflow_action(args.id, action)
        show(args, wf, lambda w: f"workflow {w['id']} {w['name']}: {w['state']}{' (paused)' if w['paused'] else ''}")
    return 0


def add_parser(sub: Any) -> None:
    """The `workflows` command and its actions."""
    wfs = sub.add_parser("workflows", help="DAGs of jobs: submit from a JSON file, list, show, cancel, pause, resume")
    wfs.set_defaults(run=cmd_workflows)
    ws = wfs.add_subparsers(dest="workflow_action", metavar="ACTION")
    s = ws.add_parser("ls", help="list workflows, newest first")
    s.add_argument("--state", choices=("running", "succeeded", "failed", "cancelled"))
    s.add_argument("--limit", type=int, default=50)
    s = ws.add_parser("submit", help='submit {"name": ..., "jobs": [{"ref": ..., "depends_on": [refs], ...}]}')
    s.add_argument("file", help="a JSON file (see docs/workflows.md)")
    s.add_argument("--name", help="the workflow's name if the file has none")
    for action in ("show", "cancel", "pause", "resume"):
        ws.add_parser(action, help=f"{action} a workflow").add_argument("id", type=int)
