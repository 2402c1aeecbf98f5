"""JSON logs of a real `jobdeck up` process: every line of its log stream parses, and the lines
of a request and of a run carry their ids (request id, trace id; job id, attempt, queue)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from core.obs.logs import JSONFormatter, job_context, request_id, setup_logging, trace_id_of
from tests.conftest import ROOT, free_port, stop_process

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


def test_a_real_node_logs_json_lines_with_the_ids(tmp_path: Path) -> None:
    port = free_port()
    err = tmp_path / "stderr.log"
    cmd = [sys.executable, "-m", "core.cli", "up", "--data-dir", str(tmp_path / "data"), "--port", str(port),
           "--log-format", "json", "--log-level", "debug", "--slots", "2"]  # fmt: skip
    env = {**os.environ, "JOBDECK_WEB": "0", "PYTHONUNBUFFERED": "1"}
    with open(err, "w") as e, open(tmp_path / "stdout.log", "w") as o:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=o, stderr=e, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/livez", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.1)
        job = {"name": "logged", "queue": "q-logs", "task": {"kind": "shell", "command": "true"}}
        resp = httpx.post(url + "/v1/jobs", json=job, headers={"X-Request-ID": "req-42", "traceparent": TRACEPARENT})
        assert resp.status_code == 201 and resp.headers["x-request-id"] == "req-42", resp.text
        job_id = resp.json()["id"]

        def lines() -> list[dict[str, object]]:
            return [json.loads(line) for line in err.read_text().splitlines() if line.strip()]

        deadline = time.monotonic() + 60
        while not any(r.get("job_id") == job_id and "run ended" in str(r["message"]) for r in lines()):
            assert time.monotonic() < deadline, f"no 'run ended' line for job {job_id}:\n{err.read_text()[-3000:]}"
            time.sleep(0.1)
        records = lines()  # every line is one JSON object (json.loads raised otherwise)
        assert all({"ts", "level", "logger", "message"} <= set(r) for r in records), records[:3]
        request = [r for r in records if r.get("request_id") == "req-42"]
        assert request and all(r.get("trace_id") == TRACE for r in request), request
        assert any("POST /v1/jobs 201" in str(r["message"]) for r in request), request
        run = next(r for r in records if r.get("job_id") == job_id and "run ended" in str(r["message"]))
        assert run["attempt"] == 1 and run["queue"] == "q-logs" and run["logger"] == "jobdeck.agent", run
    finally:
        stop_process(proc, 20)


def test_formatter_carries_context_and_errors() -> None:
    record = logging.LogRecord("jobdeck.x", logging.ERROR, __file__, 1, "boom %s", ("now",), None)
    try:
        raise ValueError("bad")
    except ValueError:
        record.exc_info = sys.exc_info()
    token = request_id.set("r1")
    try:
        with job_context(7, 2, "payments", TRACE):
            line = json.loads(JSONFormatter().format(record))
    finally:
        request_id.reset(token)
    assert line["message"] == "boom now" and line["level"] == "error"
    assert (line["job_id"], line["attempt"], line["queue"], line["trace_id"], line["request_id"]) == (
        7, 2, "payments", TRACE, "r1")  # fmt: skip
    assert "ValueError: bad" in line["error"]
    outside = json.loads(JSONFormatter().format(logging.LogRecord("x", logging.INFO, "f", 1, "m", (), None)))
    assert not {"job_id", "trace_id", "request_id"} & set(outside), outside


def test_traceparent_parsing_and_format_choice(tmp_path: Path) -> None:
    assert trace_id_of(TRACEPARENT) == TRACE
    for bad in ("", "garbage", f"00-{'0' * 32}-00f067aa0ba902b7-01", "00-xyz-00f067aa0ba902b7-01"):
        assert trace_id_of(bad) is None, bad
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        with open(tmp_path / "f.log", "w") as f:
            assert setup_logging("auto", "info", f) == "json", "a file is no terminal: JSON"
            assert setup_logging("text", "info", f) == "text"
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
