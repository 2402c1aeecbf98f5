"""Screenshots of the console's main screens for the README, from a real `jobdeck up` with some demo
work: `python -m tests.console_tui.screenshots [--out docs/img]`.

Each screen is saved as SVG by Textual and converted with `rsvg-convert -w 1300` (needs
`apt-get install -y librsvg2-bin fonts-firacode`; without a monospace font the columns drift)."""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from console_tui.app import ConsoleApp
from core.client import JobDeckClient
from tests.conftest import ROOT, ServerProcess, spawn_agent, spawn_jobdeck, until
from tests.demo_extras import webhook_receiver, workflow_and_alerts

SIZE = (130, 34)
WIDTH = 1300  # pixels of the PNG
PY = "python3"
TRAIN = """import time
for i in range(1, 10000):
    print(f"epoch {i:4d}  loss {1 / (i + 1):.4f}  val_acc {1 - 1 / (i + 2):.3f}", flush=True)
    time.sleep(0.4)
"""
IMPORT = """import sys
print("reading customers-2026-11.csv", flush=True)
print("row 17: 'acme gmbh' has no VAT id", file=sys.stderr, flush=True)
raise SystemExit(3)
"""


async def demo_work(url: str, hook_url: str) -> dict[str, int]:
    """Jobs in every state over several queues, schedules, a paused queue, a running job with output;
    returns the ids the screenshots need."""
    sh = {"kind": "shell"}
    async with JobDeckClient(url) as c:
        for i in range(18):
            queue = ("reports", "emails", "default")[i % 3]
            await c.submit({"name": f"{('monthly-report', 'send-receipt', 'resize-image')[i % 3]}-{i}", "queue": queue,
                            "task": {**sh, "argv": ["echo", f"{queue} job {i} done"]}, "tags": [queue]})  # fmt: skip
        dead = [await c.submit({"name": f"import-customers-{i}", "queue": "imports", "max_attempts": 2,
                                "backoff": {"base": 0.2, "cap": 0.5}, "tags": ["crm", "nightly"],
                                "task": {**sh, "argv": [PY, "-c", IMPORT]}}) for i in range(3)]  # fmt: skip
        await c.submit({"name": "charge-card-4412", "queue": "payments", "max_attempts": 1, "timeout": 1,
                        "task": {**sh, "argv": ["sleep", "30"]}})  # fmt: skip
        waiting = [await c.submit({"name": f"nightly-backup-{db}", "queue": "backups", "delay": 3600 + 600 * i,
                                   "priority": 10 - i, "task": {**sh, "argv": ["./backup.sh", db]}})
                   for i, db in enumerate(("orders", "users", "events", "billing"))]  # fmt: skip
        await c.job_action(waiting[-1]["id"], "pause")
        running = await c.submit({"name": "train-ranker", "queue": "ml", "priority": 5, "labels": {"gpu": "a100"},
                                  "timeout": 7200, "task": {**sh, "argv": [PY, "-c", TRAIN]}})  # fmt: skip
        await c.submit({"name": "reindex-products", "queue": "search", "task": {**sh, "argv": ["sleep", "600"]}})
        await c.queue_action("emails", "pause")
        for i in range(3):
            await c.submit({"name": f"newsletter-batch-{i}", "queue": "emails", "task": {**sh, "argv": ["./send.sh"]}})
        await c.set_concurrency("reports", 2)
        backup = await c.create_schedule({"name": "nightly-backup", "cron": "0 2 * * *", "timezone": "Europe/Paris",
                                          "job": {"name": "nightly-backup", "queue": "backups",
                                                  "task": {**sh, "argv": ["echo", "4 databases, 3.2 GB"]}}})  # fmt: skip
        await c.create_schedule({"name": "weekday-digest", "cron": "30 7 * * 1-5", "timezone": "America/New_York",
                                 "job": {"queue": "emails", "task": {**sh, "argv": ["./digest.sh"]}}})  # fmt: skip
        beat = await c.create_schedule({"name": "heartbeat", "interval": 60,
                                        "job": {"queue": "default", "task": {**sh, "argv": ["true"]}}})  # fmt: skip
        await c.create_schedule({"name": "purge-sessions", "interval": 900,
                                 "job": {"queue": "default", "task": {**sh, "argv": ["./purge.sh"]}}})  # fmt: skip
        await c.schedule_action(beat["id"], "pause")
        await c.schedule_action(backup["id"], "run")  # one fire now: its result shows
        await workflow_and_alerts(c, hook_url, PY)
        for job in dead:
            await c.wait_for(job["id"], states=("dead",), timeout=30)
        await c.wait_for(running["id"], states=("running",), timeout=30)
        return {"dead": int(dead[0]["id"]), "running": int(running["id"])}


async def stop_work(url: str) -> None:
    """Cancel what still runs, so the agents stop at once instead of waiting for it."""
    async with JobDeckClient(url) as c:
        running = (await c.list_jobs(state="running", limit=100))["jobs"]
        for job in running:
            await c.job_action(job["id"], "cancel")
        for job in running:
            await c.wait_for(job["id"], states=("cancelled",), timeout=15)


def stop(proc: subprocess.Popen[Any]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


async def trickle(url: str) -> None:
    """Short jobs a few times a second while the pictures are taken: the live figures move."""
    async with JobDeckClient(url) as c:
        for i in range(10_000):
            queue = ("reports", "default", "thumbnails")[i % 3]
            argv = ["sh", "-c", "echo no such bucket; exit 2"] if i % 9 == 8 else ["true"]  # now and then a retry
            await c.submit({"name": f"{queue}-{i}", "queue": queue, "task": {"kind": "shell", "argv": argv},
                            "backoff": {"base": 0.5, "cap": 1}})  # fmt: skip
            await asyncio.sleep(0.15)


def to_png(svg: str, png: Path, keep: Path) -> None:
    """rsvg drops leading no-break spaces unless the whole document preserves white space."""
    svg = re.sub(r"<svg\b", '<svg xml:space="preserve"', svg, count=1)
    source = keep / (png.stem + ".svg")
    source.write_text(svg)
    subprocess.run(["rsvg-convert", "-w", str(WIDTH), "-o", str(png), str(source)], check=True)


async def shoot(url: str, ids: dict[str, int], out: Path, keep: Path) -> list[Path]:
    app = ConsoleApp(url)
    shots: list[Path] = []

    async def save(name: str) -> None:
        await asyncio.sleep(0.6)  # a few feed batches and a clock tick: the live figures settle
        await pilot.pause()
        png = out / f"console-{name}.png"
        to_png(app.export_screenshot(title=f"JobDeck console: {name}"), png, keep)
        shots.append(png)
        print(png)

    async with app.run_test(size=SIZE) as pilot:
        await asyncio.wait_for(app.ready.wait(), 10)
        main = app.main_screen
        assert main is not None
        jobs = main.query_one("#jobs")
        await until(lambda: jobs.loaded and app.connection.state == "live", 10, "the console to be live")  # type: ignore[attr-defined]
        work = asyncio.create_task(trickle(url))
        await save("jobs")
        try:
            await until(lambda: ids["dead"] in jobs.rows, 5, "the dead job in the list")  # type: ignore[attr-defined]
            jobs.table.move_cursor(key=str(ids["dead"]))  # type: ignore[attr-defined]
            await pilot.press("enter")
            detail = await until(lambda: app.screen if type(app.screen).__name__ == "JobDetailScreen" else None, 5)
            await until(lambda: detail.query_one("#attempts").row_count == 2, 5, "both attempts")
            await save("detail")
            await pilot.press("escape")
            for key, name in (
                ("2", "queues"),
                ("3", "agents"),
                ("4", "schedules"),
                ("5", "dead"),
                ("6", "events"),
                ("7", "alerts"),
                ("8", "workflows"),
            ):
                await pilot.press(key)
                shown: Any = main.query_one(f"#{name}")
                if hasattr(shown, "items"):  # the table views: wait for their first read
                    await until(lambda v=shown: v.items, 5, f"the {name} view")
                await save(name)
            await pilot.press("enter")  # the workflow under the cursor, layer by layer
            await until(lambda: type(app.screen).__name__ == "WorkflowScreen", 5, "the workflow's screen")
            await save("workflow")
            await pilot.press("escape", "1", "question_mark")
            await save("help")
        finally:
            work.cancel()
    return shots


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    p.add_argument("--svg", type=Path, help="keep the SVGs in this folder too")
    args = p.parse_args(argv)
    if shutil.which("rsvg-convert") is None:
        print("rsvg-convert is missing: apt-get install -y librsvg2-bin fonts-firacode", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="jobdeck-console-shots-") as name:
        tmp = Path(name)
        node: ServerProcess = spawn_jobdeck(tmp / "data", "up", "--slots", "4")
        gpu = spawn_agent(node.url, "gpu-box-1", tmp, "--queues", "ml,search", "--slots", "2", "--label", "gpu=a100")
        try:
            hook_url, receiver = webhook_receiver()
            ids = asyncio.run(demo_work(node.url, hook_url))
            if args.svg:
                args.svg.mkdir(parents=True, exist_ok=True)
            asyncio.run(shoot(node.url, ids, args.out, args.svg or tmp))
            asyncio.run(stop_work(node.url))
        finally:
            stop(gpu)
            stop(node.proc)
            receiver.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
