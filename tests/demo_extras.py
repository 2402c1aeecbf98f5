"""Demo work the README's screenshots share (console and web): a workflow mid-run and an alert
rule whose webhook channel posts to a small receiver on this machine, so the pictures show a DAG,
fired alerts and a delivery log of real, successful deliveries."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from core.client import JobDeckClient


class _Receiver(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return


def webhook_receiver() -> tuple[str, ThreadingHTTPServer]:
    """A local receiver answering 204 to every POST; its URL and the server (shut it down after)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/alerts", server


async def workflow_and_alerts(c: JobDeckClient, hook_url: str, shell: str = "python3") -> int:
    """A nightly ETL workflow (extract, two transforms in parallel, a slow load) and a rule that
    alerts on dead jobs of queue `imports`; returns the workflow's id."""
    channel = await c.create_channel({"name": "ops-webhook", "kind": "webhook", "url": hook_url})
    await c.create_alert_rule({"name": "dead-imports", "events": ["job.dead"], "filters": {"queue": "imports"},
                               "channels": [channel["id"]], "window_seconds": 300})  # fmt: skip
    step = {"queue": "etl", "task": {"kind": "shell", "argv": ["echo", "done"]}}
    slow = {"queue": "etl", "task": {"kind": "shell", "argv": [shell, "-c", "import time; time.sleep(600)"]}}
    wf = await c.submit_workflow("nightly-etl", [
        {"ref": "extract", **step},
        {"ref": "transform-orders", "depends_on": ["extract"], **step},
        {"ref": "transform-users", "depends_on": ["extract"], **step},
        {"ref": "load-warehouse", "depends_on": ["transform-orders", "transform-users"], **slow},
        {"ref": "report", "depends_on": ["load-warehouse"], **step},
    ])  # fmt: skip
    return int(wf["workflow"]["id"])
