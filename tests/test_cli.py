"""The `jobdeck` command as a user types it: tables, --json, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ROOT, ServerProcess, spawn_jobdeck


@pytest.fixture(scope="module")
def jobdeck_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One `jobdeck up` for the whole module (a start per test was most of its time): each test
    works in a queue, key or object of its own, so none sees another's."""
    sp = spawn_jobdeck(tmp_path_factory.mktemp("cli") / "data")
    try:
        yield sp
    finally:
        sp.stop()


def jobdeck(server: ServerProcess | None, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    url = server.url if server else "http://127.0.0.1:9"
    env = {k: v for k, v in os.environ.items() if k != "JOBDECK_PROG"}  # hints name `jobdeck`, not ./dev
    return subprocess.run([sys.executable, "-m", "core.cli", "--server", url, *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)  # fmt: skip


def test_submit_wait_shows_the_output_and_the_exit_code_follows_the_job(jobdeck_process: ServerProcess) -> None:
    ok = jobdeck(jobdeck_process, "submit", "--wait", "--sh", "echo hello from a job")
    assert ok.returncode == 0 and "succeeded" in ok.stdout and "| hello from a job" in ok.stdout, ok.stdout
    bad = jobdeck(jobdeck_process, "submit", "--wait", "--max-attempts", "1", "--", "false")
    assert bad.returncode == 1 and "dead" in bad.stdout, bad.stdout


def test_json_output_and_tables(jobdeck_process: ServerProcess) -> None:
    made = jobdeck(
        jobdeck_process, "--json", "submit", "--queue", "cli", "--label", "gpu=true", "--delay", "60", "--", "true"
    )
    job = json.loads(made.stdout)
    assert job["labels"] == {"gpu": "true"} and job["state"] == "scheduled" and job["queue"] == "cli"
    listing = jobdeck(jobdeck_process, "jobs", "ls", "--queue", "cli")
    header, row = listing.stdout.splitlines()[:2]
    assert header.split()[:4] == ["ID", "NAME", "QUEUE", "STATE"] and f"{job['id']}" in row and "scheduled" in row


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("submit", "--env", "FOO", "--", "true"), "--env 'FOO' must look like NAME=VALUE"),
        (("submit", "--sh", "echo", "--", "echo"), "say one thing to run, not -- COMMAND and --sh"),
        (("submit", "--priority", "5000", "--", "true"), "priority: Input should be less than or equal to 1000"),
        (("jobs", "show", "999999"), "no job with id 999999"),
        (("schedules", "create", "--name", "x", "--cron", "61 * * * *", "--", "true"), "'61 * * * *'"),
        (("queues", "concurrency", "default", "lots"), "concurrency must be a number or 'none'"),
    ],
)
def test_bad_input_is_one_line_without_a_traceback(
    jobdeck_process: ServerProcess, args: tuple[str, ...], message: str
) -> None:
    out = jobdeck(jobdeck_process, *args)
    assert out.returncode == 1, out
    assert message in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_json_mode_reports_errors_as_the_apis_error_object(jobdeck_process: ServerProcess) -> None:
    out = jobdeck(jobdeck_process, "--json", "jobs", "show", "999999")
    assert out.returncode == 1 and out.stdout == ""
    assert json.loads(out.stderr) == {"error": "not_found", "message": "no job with id 999999", "field": "id"}


def test_an_unreachable_server_says_where_it_looked_and_how_to_start_one() -> None:
    for args in (("jobs", "ls"), ("events",)):
        out = jobdeck(None, *args, timeout=30)
        assert out.returncode == 1 and "cannot reach JobDeck" in out.stderr and "127.0.0.1:9" in out.stderr, out.stderr
        assert "`jobdeck up` starts one" in out.stderr, out.stderr
    via_dev = subprocess.run([sys.executable, "-m", "core.cli", "--server", "http://127.0.0.1:9", "jobs", "ls"],
                             cwd=ROOT, capture_output=True, text=True, timeout=30, env={**os.environ, "JOBDECK_PROG": "./dev"})  # fmt: skip
    assert "`./dev up` starts one" in via_dev.stderr, via_dev.stderr


def test_a_closed_pipe_is_not_an_error(jobdeck_process: ServerProcess) -> None:
    for _ in range(3):
        jobdeck(jobdeck_process, "submit", "--", "true")
    cmd = f"{sys.executable} -m core.cli --server {jobdeck_process.url} jobs ls | head -1"
    out = subprocess.run(cmd, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("ID") and out.stderr == "", out.stderr


def test_concurrency_zero_holds_a_queue_says_so_and_none_lifts_it(jobdeck_process: ServerProcess) -> None:
    # set before any job names the queue: its first jobs are held by it
    held = jobdeck(jobdeck_process, "queues", "concurrency", "zero-q", "0")
    assert held.returncode == 0, held.stderr
    assert held.stdout.strip() == ("queue zero-q: concurrency 0: none of its jobs start, running ones finish "
                                   "(`jobdeck queues concurrency zero-q none` removes the limit)"), held.stdout  # fmt: skip
    job = json.loads(jobdeck(jobdeck_process, "--json", "submit", "--queue", "zero-q", "--", "true").stdout)
    shown = json.loads(jobdeck(jobdeck_process, "--json", "jobs", "show", str(job["id"])).stdout)["job"]
    assert shown["state"] == "queued", shown
    assert shown["waiting_for"] == ("queue 'zero-q' has concurrency 0: none of its jobs start until the limit "
                                    "is raised or removed"), shown  # fmt: skip
    lifted = jobdeck(jobdeck_process, "queues", "concurrency", "zero-q", "none")
    assert lifted.stdout.strip() == "queue zero-q: no concurrency limit", lifted.stdout
    deadline = time.monotonic() + 15
    while (state := job_state(jobdeck_process, job["id"])) != "succeeded" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert state == "succeeded", "the job runs once the limit is gone"
    limited = jobdeck(jobdeck_process, "queues", "concurrency", "zero-q", "4")
    assert limited.stdout.startswith("queue zero-q: at most 4 of its jobs run at once"), limited.stdout
    helptext = " ".join(jobdeck(None, "queues", "concurrency", "--help").stdout.split())
    assert "0 lets none start (running ones finish" in helptext and "'none' removes the limit" in helptext, helptext


def test_queues_rate_sets_a_rate_limit_per_minute_shows_it_and_none_lifts_it(jobdeck_process: ServerProcess) -> None:
    bad = jobdeck(jobdeck_process, "queues", "rate", "rate-q", "fast")
    assert bad.returncode != 0 and "rate must be a positive number per second, or N/s, N/m, N/h" in bad.stderr, bad
    set_ = jobdeck(jobdeck_process, "queues", "rate", "rate-q", "30/m", "--burst", "2")
    assert set_.returncode == 0, set_.stderr
    assert set_.stdout.strip() == ("queue rate-q: at most 0.5/s (one every 2 s) of its jobs start, 2 at once "
                                   "(`jobdeck queues rate rate-q none` removes the limit)"), set_.stdout  # fmt: skip
    [q] = [q for q in json.loads(jobdeck(jobdeck_process, "--json", "queues").stdout) if q["name"] == "rate-q"]
    assert (q["rate_limit"], q["rate_burst"]) == (0.5, 2), q
    assert "RATE_LIMIT" in jobdeck(jobdeck_process, "queues").stdout.splitlines()[0]
    lifted = jobdeck(jobdeck_process, "queues", "rate", "rate-q", "none")
    assert lifted.stdout.strip() == "queue rate-q: no rate limit", lifted.stdout


def test_queues_keys_sets_the_per_key_limit_and_weights_and_submit_takes_the_keys(
    jobdeck_process: ServerProcess,
) -> None:
    job = json.loads(jobdeck(jobdeck_process, "--json", "submit", "--queue", "keys-q", "--delay", "600",
                             "--concurrency-key", "acme", "--fairness-key", "t1", "--", "true").stdout)  # fmt: skip
    assert (job["concurrency_key"], job["fairness_key"]) == ("acme", "t1"), job
    set_ = jobdeck(jobdeck_process, "queues", "keys", "keys-q", "2", "--weight", "gold=3")
    assert set_.returncode == 0, set_.stderr
    assert set_.stdout.strip() == ("queue keys-q: at most 2 jobs of one concurrency key run at once; claims rotate "
                                   "between fairness keys (weights gold=3)"), set_.stdout  # fmt: skip
    bad = jobdeck(jobdeck_process, "queues", "keys", "keys-q", "--weight", "gold=-1")
    assert bad.returncode != 0 and "a weight is a positive number" in bad.stderr, bad
    off = jobdeck(jobdeck_process, "queues", "keys", "keys-q", "none", "--fair", "off")
    assert off.stdout.strip() == "queue keys-q: no per-key limit; no fair rotation (weights gold=3)", off.stdout
    one = jobdeck(jobdeck_process, "queues", "keys", "keys-q", "1")
    assert one.stdout.startswith("queue keys-q: at most 1 job of one concurrency key runs at once;"), one.stdout
    jobdeck(jobdeck_process, "queues", "pause", "keys-q")  # what comes now stays queued
    for key in ("t1", "t1", "t2"):
        jobdeck(jobdeck_process, "submit", "--queue", "keys-q", "--fairness-key", key, "--", "true")
    usage = jobdeck(jobdeck_process, "queues", "keys", "keys-q")  # nothing to change: what the keys use
    assert usage.returncode == 0, usage.stderr
    lines = [line.split() for line in usage.stdout.splitlines()]
    # a job with a fairness key turned fair share back on: the rotation's SERVED column shows
    assert lines[1:] == [["no", "job", "with", "a", "concurrency", "key", "runs"], ["FAIRNESS_KEY", "QUEUED", "SERVED"],
                         ["t1", "2", "0"], ["t2", "1", "0"]], usage.stdout  # fmt: skip
    missing = jobdeck(jobdeck_process, "queues", "keys", "no-such-q")
    assert missing.returncode != 0 and "no queue named 'no-such-q'" in missing.stderr, missing


def job_state(server: ServerProcess, job_id: int) -> str:
    return str(json.loads(jobdeck(server, "--json", "jobs", "show", str(job_id)).stdout)["job"]["state"])


def test_env_secret_stores_only_the_reference_and_the_agent_resolves_it(jobdeck_process: ServerProcess) -> None:
    out = jobdeck(jobdeck_process, "--json", "submit", "--env", "PLAIN=visible", "--env-secret", "PW=db-password",
                  "--max-attempts", "1", "--", "true")  # fmt: skip
    job = json.loads(out.stdout)
    assert job["task"]["env"] == {"PLAIN": "visible", "PW": {"secret": "db-password"}}, job["task"]
    shown = jobdeck(jobdeck_process, "jobs", "tail", str(job["id"]))  # follows it until it ends
    shown = jobdeck(jobdeck_process, "jobs", "show", str(job["id"]))
    assert "dead" in shown.stdout and "secret 'db-password' not found on this agent" in shown.stdout, shown.stdout


def test_workflows_submit_show_and_act_from_the_command_line(jobdeck_process: ServerProcess, tmp_path: Any) -> None:
    flow = tmp_path / "etl.json"
    flow.write_text(json.dumps({"name": "cli-etl", "jobs": [
        {"ref": "extract", "task": {"kind": "shell", "command": "true"}},
        {"ref": "load", "depends_on": ["extract"], "task": {"kind": "shell", "command": "true"}},
        {"ref": "check", "max_attempts": 1, "task": {"kind": "shell", "command": "exit 3"}},
        {"ref": "report", "depends_on": ["check"], "task": {"kind": "shell", "command": "true"}},
    ]}))  # fmt: skip
    out = jobdeck(jobdeck_process, "--json", "workflows", "submit", str(flow))
    assert out.returncode == 0, out.stderr
    made = json.loads(out.stdout)
    wf_id = made["workflow"]["id"]
    deadline = time.monotonic() + 30
    while True:
        shown = jobdeck(jobdeck_process, "workflows", "show", str(wf_id))
        if "finished " in shown.stdout.splitlines()[1] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"workflow {wf_id} cli-etl: failed"), shown.stdout
    assert lines[1].startswith("created ") and ", finished " in lines[1], lines
    by_ref = {line.split()[1]: line for line in lines[2:]}
    assert lines[2].startswith("● extract") and by_ref["load"].startswith("  └─ load"), lines
    assert "<- extract" in by_ref["load"], lines
    assert by_ref["extract"].index("succeeded") == by_ref["load"].index("succeeded"), f"states line up: {lines}"
    assert "cancelled" in by_ref["report"] and "<- check" in by_ref["report"], lines
    assert f"(parent job {made['ids']['check']} ended dead" in by_ref["report"], f"says why it was cancelled: {lines}"
    assert by_ref["check"].endswith("(exit code 3)"), lines
    listed = jobdeck(jobdeck_process, "workflows", "ls")
    assert "cli-etl" in listed.stdout and "2 succeeded" in listed.stdout, listed.stdout
    refused = jobdeck(jobdeck_process, "workflows", "pause", str(wf_id))
    assert refused.returncode != 0 and "it is failed" in refused.stderr, refused.stderr
    cyc = tmp_path / "cycle.json"
    cyc.write_text(json.dumps({"name": "c", "jobs": [
        {"ref": "a", "depends_on": ["b"], "task": {"kind": "shell", "command": "true"}},
        {"ref": "b", "depends_on": ["a"], "task": {"kind": "shell", "command": "true"}},
    ]}))  # fmt: skip
    bad = jobdeck(jobdeck_process, "workflows", "submit", str(cyc))
    assert bad.returncode != 0 and "a -> b -> a" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    child = jobdeck(jobdeck_process, "--json", "submit", "--depends-on", str(made["ids"]["load"]), "--sh", "true")
    assert child.returncode == 0 and json.loads(child.stdout)["state"] == "queued", child.stdout + child.stderr


def test_queues_breaker_sets_a_queues_breaker_numbers_and_breakers_lists_them(jobdeck_process: ServerProcess) -> None:
    jobdeck(jobdeck_process, "submit", "--queue", "hooks-q", "--delay", "600", "--", "true")  # makes the queue
    set_ = jobdeck(jobdeck_process, "queues", "breaker", "hooks-q", "--mode", "fail", "--ratio", "0.25",
                   "--reset", "5", "--min-requests", "8")  # fmt: skip
    assert set_.returncode == 0, set_.stderr
    assert set_.stdout.strip() == ("queue hooks-q: a host's breaker opens at 25% failed of at least 8 requests "
                                   "within 10 s, tries again after 5 s; while open its jobs fail at once"), set_.stdout  # fmt: skip
    bad = jobdeck(jobdeck_process, "queues", "breaker", "hooks-q", "--min-requests", "many")
    assert bad.returncode != 0 and "--min-requests must be a whole number or 'default'" in bad.stderr, bad
    out_of_range = jobdeck(jobdeck_process, "queues", "breaker", "hooks-q", "--ratio", "2")
    assert out_of_range.returncode != 0 and "breaker_failure_ratio" in out_of_range.stderr, out_of_range
    back = jobdeck(jobdeck_process, "queues", "breaker", "hooks-q", "--mode", "default", "--ratio", "default")
    assert "opens at 50% failed of at least 8" in back.stdout and "its jobs wait unsent" in back.stdout, back.stdout
    listed = jobdeck(jobdeck_process, "breakers")
    assert listed.returncode == 0 and "no circuit breakers yet" in listed.stdout, listed
    missing = jobdeck(jobdeck_process, "breakers", "reset", "hooks-q", "10.0.0.9:80")
    assert missing.returncode != 0 and "queue 'hooks-q' has no circuit breaker for host '10.0.0.9:80'" in (
        missing.stderr
    ), missing


def test_submit_unique_answers_with_the_job_holding_the_key(jobdeck_process: ServerProcess) -> None:
    first = jobdeck(jobdeck_process, "submit", "--delay", "3600", "--unique", "cli-report", "--", "true")
    assert first.returncode == 0, first.stderr
    again = jobdeck(jobdeck_process, "submit", "--delay", "3600", "--unique", "cli-report", "--", "true")
    assert again.returncode == 0, again.stderr
    first_id = first.stdout.split()[1]
    assert again.stdout.split()[1] == first_id, (first.stdout, again.stdout)
    assert "not submitted: this job holds the unique key 'cli-report'" in again.stdout, again.stdout
    window = jobdeck(jobdeck_process, "--json", "submit", "--delay", "3600", "--unique", "w", "--unique-window", "60",
                     "--", "true")  # fmt: skip
    assert window.returncode == 0 and json.loads(window.stdout)["unique"]["scope"] == "window", window.stdout
    bad = jobdeck(jobdeck_process, "submit", "--unique-window", "60", "--", "true")
    assert bad.returncode != 0 and "--unique-window needs --unique KEY" in bad.stderr, bad.stderr
