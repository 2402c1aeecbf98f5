"""`jobdeck schedules` with policies: create and set them, preview from an instant, backfill, run-now."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.conftest import ServerProcess
from tests.test_cli import jobdeck


def test_policies_preview_from_an_instant_and_backfill(jobdeck_process: ServerProcess) -> None:
    made = jobdeck(jobdeck_process, "--json", "schedules", "create", "--name", "hourly", "--cron", "0 * * * *",
                   "--overlap", "buffer_one", "--catch-up", "all", "--exclude-cron", "* * * * 6,0", "--", "true")  # fmt: skip
    assert made.returncode == 0, made.stderr
    s = json.loads(made.stdout)
    assert (s["overlap"], s["catch_up"], s["exclude_cron"]) == ("buffer_one", "all", "* * * * 6,0")
    set_ = jobdeck(jobdeck_process, "schedules", "set", str(s["id"]), "--jitter", "30", "--pause-after-failures", "3")
    assert set_.returncode == 0, set_.stderr
    assert "overlap buffer_one, catch_up all (window 3600 s), jitter 30 s, pause after 3 failures" in set_.stdout
    assert "excluded      cron '* * * * 6,0'" in set_.stdout, set_.stdout
    bad = jobdeck(jobdeck_process, "schedules", "set", str(s["id"]), "--jitter", "3600")
    assert bad.returncode == 1 and "jitter" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    monday = "2026-11-30T00:00:00Z"  # a Monday: the weekend before it is excluded
    dry = jobdeck(jobdeck_process, "schedules", "backfill", str(s["id"]), monday, "2026-11-30T05:30:00Z", "--dry-run")
    assert dry.stdout.strip().startswith(f"schedule {s['id']}: 6 fire times (2026-11-30T00:00:00+00:00 .. "), dry
    assert "would make 6 (one after another)" in dry.stdout, dry.stdout
    done = jobdeck(jobdeck_process, "schedules", "backfill", str(s["id"]), monday, "2026-11-30T05:30:00Z")
    assert "made 6" in done.stdout, done.stdout
    again = jobdeck(jobdeck_process, "schedules", "backfill", str(s["id"]), monday, "2026-11-30T05:30:00Z")
    assert "6 had a job already; made 0" in again.stdout, again.stdout
    preview = jobdeck(
        jobdeck_process, "schedules", "preview", str(s["id"]), "-n", "3", "--from", "2026-11-29T22:30:00Z"
    )
    lines = preview.stdout.splitlines()[1:]
    assert "[excluded]" in lines[0] and "[job " in lines[2], preview.stdout  # Sunday 23:00, then Monday's jobs
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    refused = jobdeck(jobdeck_process, "schedules", "backfill", str(s["id"]), monday, future)
    assert refused.returncode == 1 and "in the future" in refused.stderr, refused.stderr


def test_run_now_queues_a_delayed_job(jobdeck_process: ServerProcess) -> None:
    job = json.loads(jobdeck(jobdeck_process, "--json", "submit", "--delay", "3600", "--", "true").stdout)
    out = jobdeck(jobdeck_process, "jobs", "run-now", str(job["id"]))
    assert out.returncode == 0 and str(job["id"]) in out.stdout, out
    again = jobdeck(jobdeck_process, "jobs", "run-now", str(job["id"]))
    assert again.returncode == 1 and "cannot run job" in again.stderr, again.stderr


def test_schedules_create_workflow_fires_a_dag_and_show_names_it(jobdeck_process: ServerProcess, tmp_path: Any) -> None:
    flow = tmp_path / "etl.json"
    flow.write_text(json.dumps({"name": "etl", "jobs": [
        {"ref": "extract", "task": {"kind": "shell", "command": "true"}},
        {"ref": "load", "depends_on": ["extract"], "task": {"kind": "shell", "command": "true"}},
    ]}))  # fmt: skip
    made = jobdeck(jobdeck_process, "--json", "schedules", "create", "--name", "nightly", "--cron", "0 2 * * *",
                   "--workflow", str(flow))  # fmt: skip
    assert made.returncode == 0, made.stderr
    sid = str(json.loads(made.stdout)["id"])
    shown = jobdeck(jobdeck_process, "schedules", "show", sid)
    assert "workflow      'etl': 2 jobs (extract, load)" in shown.stdout, shown.stdout
    changed = jobdeck(jobdeck_process, "schedules", "set", sid, "--overlap", "buffer_one")
    assert changed.returncode == 0 and "overlap buffer_one" in changed.stdout, (changed.stdout, changed.stderr)
