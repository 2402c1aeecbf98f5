"""Screenshots of the dashboard's main pages for the README, light and dark, from a real core with
some demo work: `python -m tests.web_ui.screenshots [--out docs/img]`."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

from core.client import JobDeckClient
from tests.conftest import ROOT, free_port, spawn_jobdeck
from tests.demo_extras import webhook_receiver, workflow_and_alerts
from tests.web_ui.conftest import CHROMIUM, CHROMIUM_ARGS, chromium_env

PAGES = (("overview", "/"), ("jobs", "/jobs"), ("job", "/jobs/{running}"), ("queues", "/queues"),
         ("agents", "/agents"), ("schedules", "/schedules"), ("workflows", "/workflows"),
         ("workflow", "/workflows/{workflow}"), ("dead", "/dead"), ("notifications", "/notifications"),
         ("audit", "/audit"))  # fmt: skip


async def demo_work(url: str, hook_url: str) -> dict[str, int]:
    """Jobs in every state, schedules, a workflow, an alert rule, a running job with output; returns
    the ids of the running job and of the workflow."""
    sh = "python3"
    async with JobDeckClient(url) as c:
        for i in range(60):
            await c.submit({"name": f"report-{i}", "queue": ("reports", "emails", "default")[i % 3],
                            "task": {"kind": "shell", "argv": ["echo", f"report {i} done"]}})  # fmt: skip
        for i in range(4):
            await c.submit({"name": f"flaky-import-{i}", "queue": "imports", "max_attempts": 1,
                            "task": {"kind": "shell", "argv": [sh, "-c", "import sys; print('bad row 17'); sys.exit(3)"]}})  # fmt: skip
        waiting = [await c.submit({"name": f"nightly-backup-{i}", "queue": "backups", "delay": 3600, "priority": i,
                                   "task": {"kind": "shell", "argv": ["./backup.sh"]}}) for i in range(6)]  # fmt: skip
        await c.job_action(waiting[0]["id"], "pause")
        running = await c.submit({"name": "train-model", "queue": "ml", "task": {"kind": "shell", "argv": [sh, "-c",
                                  "import time\nfor i in range(600):\n print(f'epoch {i}: loss {1/(i+1):.4f}', flush=True)\n time.sleep(0.5)"]}})  # fmt: skip
        await c.create_schedule({"name": "nightly-backup", "cron": "0 2 * * *", "timezone": "Europe/Paris",
                                 "job": {"queue": "backups", "task": {"kind": "shell", "argv": ["./backup.sh"]}}})  # fmt: skip
        await c.create_schedule({"name": "weekday-digest", "cron": "30 7 * * 1-5", "timezone": "America/New_York",
                                 "job": {"queue": "emails", "task": {"kind": "shell", "argv": ["./digest.sh"]}}})  # fmt: skip
        await c.queue_action("imports", "pause")
        workflow = await workflow_and_alerts(c, hook_url, sh)
        # jobs held by a paused queue for a couple of seconds: the Overview's "held" pick-up line
        held = [await c.submit({"name": f"export-{i}", "queue": "exports", "delay": 0.3,
                                "task": {"kind": "shell", "argv": ["true"]}}) for i in range(5)]  # fmt: skip
        await c.queue_action("exports", "pause")
        await asyncio.sleep(2.5)
        await c.queue_action("exports", "resume")
        for job in held:
            await c.wait_for(job["id"], timeout=30)
        await c.wait_for(running["id"], states=("running",), timeout=30)
        return {"running": int(running["id"]), "workflow": workflow}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = p.parse_args(argv)
    import subprocess

    from playwright.sync_api import sync_playwright

    from tests.web_ui.conftest import _stop, _wait_up

    tmp = Path(tempfile.mkdtemp(prefix="jobdeck-shots-"))
    core = spawn_jobdeck(tmp / "data", "up", "--no-web", "--slots", "4", env={"JOBDECK_WEB": "0"})
    port = free_port()
    log = tmp / "web.log"
    with open(log, "wb") as out:
        web = subprocess.Popen([sys.executable, "-m", "core.cli", "web", "--server", core.url, "--port", str(port)],
                               cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                               env={**os.environ, "JOBDECK_WEB_WORKDIR": str(tmp / "frontend")})  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_up(web, url, log)
        hook_url, receiver = webhook_receiver()
        ids = asyncio.run(demo_work(core.url, hook_url))
        args.out.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                         env=chromium_env(str(tmp / "xdg")))  # fmt: skip
            for scheme in ("light", "dark"):
                ctx = browser.new_context(viewport={"width": 1440, "height": 900}, color_scheme=scheme)
                page = ctx.new_page()
                for name, path in PAGES:
                    page.goto(url + path.format(**ids))
                    page.wait_for_selector("#core-status")
                    if name == "overview":
                        page.wait_for_selector("#chart-success svg.main-svg")
                    page.wait_for_timeout(1500)  # let the live feed settle before the picture
                    shot = args.out / f"web-{name}-{scheme}.png"
                    page.screenshot(path=str(shot))
                    print(shot)
                ctx.close()
            browser.close()
    finally:
        _stop(web)
        receiver.shutdown()
        core.proc.terminate()
        core.proc.wait(15)
    return 0


if __name__ == "__main__":
    sys.exit(main())
