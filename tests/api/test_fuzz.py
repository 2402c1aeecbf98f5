"""schemathesis against /openapi.json of a real `jobdeck server` process, with every check on.

Every route in the document is fuzzed (a new route joins by itself): examples, coverage (boundary
and invalid values of each parameter), fuzzing and stateful sequences that follow the document's
links (a job or schedule made, then acted on). The run fails on any 5xx, on any answer that does
not match the documented schema or status codes, on a schema-valid request the server refuses and
on a schema-invalid one it accepts. Bounded: a fixed seed and a few examples per route and phase
(tests/api/schemathesis.toml); the rules JSON Schema cannot say are in tests/api/fuzz_hooks.py.

The node runs no agent and sends no notification (JOBDECK_NOTIFY_SEND=0), so no generated command or
URL is ever executed or fetched.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.auth.tokens import token_hash
from tests.auth.principals import TEAM_QUEUES, TOKENS
from tests.conftest import ROOT, ServerProcess, spawn_jobdeck

HERE = Path(__file__).resolve().parent
NO_SENDING = {"JOBDECK_NOTIFY_SEND": "0"}  # the fuzz makes channels with made-up URLs: never call them
SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
pytestmark = [pytest.mark.timeout(900), pytest.mark.skipif(not SCHEMATHESIS.exists(), reason="schemathesis missing")]


def _stop(sp: ServerProcess) -> None:
    if sp.proc.poll() is None:
        sp.stop()


@pytest.fixture
def open_node(tmp_path: Path) -> Iterator[ServerProcess]:
    """`jobdeck server` without sign-in (loopback only), no agent."""
    sp = spawn_jobdeck(tmp_path / "data", "server", env=NO_SENDING)
    try:
        yield sp
    finally:
        _stop(sp)


@pytest.fixture
def signed_node(tmp_path: Path) -> Iterator[ServerProcess]:
    """`jobdeck server` with static tokens (tests/auth/principals.py), no rate limit, no agent."""
    config = tmp_path / "jobdeck.toml"
    lines = ['auth = "token"', "rate_limit_per_second = 0", "[team_queues]"]
    lines += [f"{team} = {queues!r}".replace("'", '"') for team, queues in TEAM_QUEUES.items()]
    for name, (token, role, teams) in TOKENS.items():
        lines += ["[[tokens]]", f'name = "{name}"', f'sha256 = "{token_hash(token)}"', f'role = "{role}"',
                  f"teams = {teams!r}".replace("'", '"')]  # fmt: skip
    config.write_text("\n".join(lines) + "\n")
    sp = spawn_jobdeck(tmp_path / "data", "server", env={"JOBDECK_CONFIG": str(config), **NO_SENDING})
    try:
        yield sp
    finally:
        _stop(sp)


def fuzz(url: str, report: Path, *args: str) -> tuple[int, str]:
    """Run schemathesis over the node's document; (exit code, its output)."""
    cmd = [str(SCHEMATHESIS), "--config-file", str(HERE / "schemathesis.toml"), "--no-color", "run",
           f"{url}/openapi.json", "--checks", "all", "--report", "junit", "--report-junit-path", str(report), *args]  # fmt: skip
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.api.fuzz_hooks", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=800)
    return out.returncode, out.stdout + out.stderr


def cases_generated(output: str) -> int:
    match = re.search(r"(\d+) generated", output)
    return int(match.group(1)) if match else 0


def check(rc: int, output: str, node: ServerProcess, at_least: int = 1000) -> None:
    summary = output[output.find("=== FAILURES") :] if "=== FAILURES" in output else output[-6000:]
    log = node.output().splitlines()
    server_errors = [line for line in log if "Traceback" in line or "ERROR" in line]
    assert rc == 0, (
        f"schemathesis found problems (expected none; {cases_generated(output)} cases):\n{summary[:20000]}\n"
        f"server log errors: {server_errors[:20]}"
    )
    assert cases_generated(output) >= at_least, f"the fuzz ran too few cases to mean anything:\n{output[-3000:]}"
    # a 4xx that logged a traceback on the way is a crash the client did not see
    tracebacks = [i for i, line in enumerate(log) if "Traceback (most recent call last)" in line]
    assert not tracebacks, "expected no traceback in the node's log, got:\n" + "\n".join(
        "\n".join(log[i : i + 12]) for i in tracebacks[:3]
    )
    print(f"schemathesis: {cases_generated(output)} cases, no failure")


def test_fuzz_every_route_without_sign_in(open_node: ServerProcess, tmp_path: Path) -> None:
    rc, output = fuzz(open_node.url, tmp_path / "junit.xml")
    check(rc, output, open_node)


def test_fuzz_every_route_signed_in_as_a_team_operator(signed_node: ServerProcess, tmp_path: Path) -> None:
    """Signed in as the operator of team payments: 403 on other teams' objects goes through the access
    check's own reading of path ids (a bad id there was a 500), every route documents 401/403/429,
    and the ignored-auth check sends each request without the token too (it must be a 401).
    The coverage phase (the same boundary values as above) is left to the unsigned run."""
    token = TOKENS["operator"][0]
    rc, output = fuzz(signed_node.url, tmp_path / "junit.xml", "-H", f"Authorization: Bearer {token}",
                      "--phases", "examples,fuzzing,stateful", "--max-examples", "5")  # fmt: skip
    check(rc, output, signed_node, at_least=150)
