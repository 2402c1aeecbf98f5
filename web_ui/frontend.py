"""The offline set-up of the dashboard's frontend: bun from the npm registry, Reflex's home and
build folders inside this checkout, no telemetry and no version checks. Nothing downloads from
anywhere but the npm registry (bun, the frontend packages) and PyPI (reflex itself)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

# The Reflex project root (rxconfig.py); not a Python package, or granian would import the app as
# web_ui.web_ui.app.
PROJECT = Path(__file__).resolve().parent / "project"
REFLEX_HOME = PROJECT / ".reflex-home"
BUN_VERSION = "1.4.4"  # the bun Reflex 0.10 asks for; npm ships it as @oven/bun-linux-x64
BUN = REFLEX_HOME / "bun" / "bin" / "bun"
DEFAULT_PORT = 8650  # of `jobdeck web`


class SetupError(RuntimeError):
    """The frontend could not be set up; the message says which step and why."""


def reflex_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment every Reflex command of ours runs with."""
    env = dict(os.environ if base is None else base)
    env.update(
        REFLEX_DIR=str(REFLEX_HOME),
        REFLEX_TELEMETRY_ENABLED="false",
        REFLEX_CHECK_LATEST_VERSION="false",
        # bun's package cache beside Reflex's home: every build folder shares it, $HOME gets nothing
        BUN_INSTALL_CACHE_DIR=env.get("BUN_INSTALL_CACHE_DIR") or str(REFLEX_HOME / "bun-cache"),
        BUN_INSTALL=env.get("BUN_INSTALL") or str(BUN.parent.parent),
        NEXT_TELEMETRY_DISABLED="1",
        DO_NOT_TRACK="1",
    )
    # Reflex finds the app module by walking sys.path (an editable install's finder is not a path).
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT.parent.parent), env.get("PYTHONPATH", "")) if p)
    env.pop("REFLEX_REDIS_URL", None)  # one backend worker: the live hub lives in its memory
    return env


def web_dir(port: int | None = None) -> Path:
    """The frontend build folder for a dashboard on `port` (`.web` for the default port)."""
    return PROJECT / (".web" if port in (None, DEFAULT_PORT) else f".web-{port}")


def _bun_package() -> str:
    machine = os.uname().machine
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "aarch64", "arm64": "aarch64"}.get(machine)
    if sys.platform != "linux" or arch is None:
        raise SetupError(f"no bun package for {sys.platform}/{machine}; install bun {BUN_VERSION} on PATH")
    return f"@oven/bun-linux-{arch}@{BUN_VERSION}"


def ensure_bun() -> Path:
    """Put bun where Reflex looks for it, from the npm registry (`npm pack`), unless it is there."""
    if BUN.exists():
        return BUN
    npm = shutil.which("npm")
    if npm is None:
        raise SetupError("npm is needed once to fetch bun from the npm registry (apt-get install npm)")
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([npm, "pack", _bun_package()], cwd=tmp, capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise SetupError(f"npm pack {_bun_package()} failed:\n{out.stderr[-2000:]}")
        tgz = next(Path(tmp).glob("*.tgz"))
        with tarfile.open(tgz) as tar:
            tar.extractall(tmp, filter="data")
        BUN.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(tmp) / "package" / "bin" / "bun", BUN)
    BUN.chmod(0o755)
    return BUN


def reflex_command(*args: str) -> list[str]:
    """`python -m reflex ARGS` with this interpreter."""
    return [sys.executable, "-m", "reflex", *args]


def build(*, quiet: bool = True) -> None:
    """Install the frontend packages (from the committed lock) and build the production bundle."""
    ensure_bun()
    cmd = reflex_command("export", "--frontend-only", "--no-zip", "--env", "prod")
    out = subprocess.run(cmd, cwd=PROJECT, env=reflex_env(), capture_output=quiet, text=True, timeout=900)
    if out.returncode != 0:
        tail = (out.stdout or "")[-3000:] + (out.stderr or "")[-3000:] if quiet else ""
        raise SetupError(f"the frontend build failed ({' '.join(cmd)}):\n{tail}")


def main() -> int:
    """`python -m web_ui.frontend`: set up bun and build the frontend once (./dev does this)."""
    try:
        print(f"bun: {ensure_bun()}", flush=True)
        build(quiet=False)
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
