"""The conventions that tools can check: ruff lint and format, mypy --strict on core/ and agents/."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_lint_is_clean() -> None:
    out = _run("ruff", "check", ".")
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format_is_applied() -> None:
    out = _run("ruff", "format", "--check", ".")
    assert out.returncode == 0, "run `ruff format .`:\n" + out.stdout + out.stderr


def test_mypy_strict_on_core_and_agents() -> None:
    out = _run("mypy")
    assert out.returncode == 0, out.stdout + out.stderr
