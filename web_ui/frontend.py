"""The offline set-up of the dashboard's frontend: bun from the npm registry, Reflex's home and
build folders in a per-user cache folder, no telemetry and no version checks. Nothing downloads
from anywhere but the npm registry (bun, the frontend packages) and PyPI (reflex itself).

The Reflex project (rxconfig.py, assets/, the frontend lock in reflex.lock/) ships inside the
package (web_ui/project). Reflex writes beside its project (.web, .states, ...), so each install
gets a copy of it in the cache, refreshed at every start, and builds there: never in
site-packages. The cache is `JOBDECK_CACHE_DIR`, else `$XDG_CACHE_HOME/jobdeck`, else
`~/.cache/jobdeck` (`./dev` points it at .venv/cache, so a checkout keeps everything in itself).
After a Reflex upgrade rewrites the lock, copy PROJECT/reflex.lock back to web_ui/project.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from core.version import version

# The shipped Reflex project root; not a Python package, or granian would import the app as
# web_ui.web_ui.app.
SOURCE = Path(__file__).resolve().parent / "project"
PROJECT_FILES = ("rxconfig.py", "assets", "reflex.lock")  # what a build needs of SOURCE
BUN_VERSION = "1.4.4"  # the bun Reflex 0.10 asks for; npm ships it as @oven/bun-linux-x64
DEFAULT_PORT = 8650  # of `jobdeck web`


def cache_root(environ: dict[str, str] | None = None) -> Path:
    """The per-user cache folder: JOBDECK_CACHE_DIR, else $XDG_CACHE_HOME/jobdeck, else ~/.cache/jobdeck."""
    env = os.environ if environ is None else environ
    if env.get("JOBDECK_CACHE_DIR"):
        return Path(env["JOBDECK_CACHE_DIR"]).expanduser().resolve()
    base = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return (base / "jobdeck").resolve()


def _install_key() -> str:
    # One project copy per installed JobDeck (version and where it is installed): two checkouts or
    # venvs of one user never build into each other's folders.
    return f"{version()}-{hashlib.sha256(str(SOURCE).encode()).hexdigest()[:12]}"


CACHE = cache_root()
REFLEX_HOME = CACHE / "reflex"  # bun, its package cache and Reflex's own files: shared by the user's installs
BUN = REFLEX_HOME / "bun" / "bin" / "bun"
PROJECT = CACHE / "web" / _install_key()  # the Reflex project root every command of ours runs in


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
        # bun's runtime transpiler cache (the build's scripts) goes to ~/.bun unless told otherwise
        BUN_RUNTIME_TRANSPILER_CACHE_PATH=str(REFLEX_HOME / "bun-cache" / "@t@"),
        NEXT_TELEMETRY_DISABLED="1",
        DO_NOT_TRACK="1",
    )
    # Reflex finds the app module by walking sys.path; an editable install's finder is not a path,
    # so a checkout's root goes on PYTHONPATH (an installed wheel's site-packages is on it already).
    root = str(SOURCE.parent.parent)
    if root not in {*site.getsitepackages(), site.getusersitepackages()}:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.pop("REFLEX_REDIS_URL", None)  # one backend worker: the live hub lives in its memory
    return env


def sync_project() -> Path:
    """Copy the shipped project into PROJECT where it differs (cheap when nothing changed); returns PROJECT."""
    if not (SOURCE / "rxconfig.py").is_file():
        raise SetupError(f"the dashboard's Reflex project is missing from this install ({SOURCE}); reinstall JobDeck")
    for name in PROJECT_FILES:
        src = SOURCE / name
        for f in sorted(src.rglob("*")) if src.is_dir() else [src]:
            if f.is_dir() or "__pycache__" in f.parts:
                continue
            dst = PROJECT / f.relative_to(SOURCE)
            data = f.read_bytes()
            if dst.exists() and dst.read_bytes() == data:
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, dst)  # atomic: a dashboard starting beside us never reads half a file
    (PROJECT / ".source").write_text(str(SOURCE))
    _forget_removed_installs()
    return PROJECT


def _forget_removed_installs() -> None:
    # A copy whose install is gone (a deleted venv) or that an older version of this install made
    # is nobody's any more: its builds go.
    for other in (CACHE / "web").iterdir():
        marker = other / ".source"
        if other == PROJECT or not marker.is_file():
            continue
        source = marker.read_text()
        if source == str(SOURCE) or not Path(source).is_dir():
            shutil.rmtree(other, ignore_errors=True)


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
    """Put bun where Reflex looks for it, from the npm registry, unless it is there: with `npm pack`
    when npm is installed (it follows the user's npm settings), else straight from the registry."""
    if BUN.exists():
        return BUN
    with tempfile.TemporaryDirectory() as tmp:
        npm = shutil.which("npm")
        tgz = _npm_pack(npm, Path(tmp)) if npm else fetch_package(_bun_package(), Path(tmp))
        with tarfile.open(tgz) as tar:
            tar.extractall(tmp, filter="data")
        BUN.parent.mkdir(parents=True, exist_ok=True)
        staged = BUN.with_name(f".bun.{os.getpid()}")
        shutil.copy2(Path(tmp) / "package" / "bin" / "bun", staged)
        staged.chmod(0o755)
        os.replace(staged, BUN)  # atomic: another install fetching bun at the same time is harmless
    return BUN


def _npm_pack(npm: str, where: Path) -> Path:
    # npm's cache and logs beside Reflex's home too ($HOME gets nothing), no update check
    env = {**os.environ, "npm_config_cache": str(REFLEX_HOME / "npm-cache"), "npm_config_update_notifier": "false"}
    out = subprocess.run([npm, "pack", _bun_package()], cwd=where, env=env, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    if out.returncode != 0:
        raise SetupError(f"npm pack {_bun_package()} failed:\n{out.stderr[-2000:]}")
    return next(where.glob("*.tgz"))


def fetch_package(spec: str, where: Path) -> Path:
    """Download `name@version`'s tarball from the npm registry (npm_config_registry, else the public
    one) into `where`, checked against the registry's sha512 integrity; returns the file."""
    name, _, wanted = spec.rpartition("@")
    registry = (os.environ.get("npm_config_registry") or "https://registry.npmjs.org").rstrip("/")  # noqa: SIM112 - npm spells it so
    try:
        with urllib.request.urlopen(f"{registry}/{name.replace('/', '%2f')}/{wanted}", timeout=60) as resp:
            dist = json.load(resp)["dist"]
        with urllib.request.urlopen(dist["tarball"], timeout=300) as resp:
            data = resp.read()
    except (OSError, ValueError, KeyError) as exc:
        raise SetupError(f"cannot download {spec} from {registry}: {exc} (or install npm and retry)") from None
    algorithm, _, digest = str(dist.get("integrity", "")).partition("-")
    if algorithm != "sha512" or hashlib.sha512(data).digest() != base64.b64decode(digest):
        raise SetupError(f"{spec} from {registry} does not match the registry's sha512 integrity; not installed")
    out = where / f"{name.replace('/', '-').lstrip('@')}-{wanted}.tgz"
    out.write_bytes(data)
    return out


def reflex_command(*args: str) -> list[str]:
    """`python -m reflex ARGS` with this interpreter."""
    return [sys.executable, "-m", "reflex", *args]


def build(*, quiet: bool = True) -> None:
    """Install the frontend packages (from the committed lock) and build the production bundle."""
    ensure_bun()
    sync_project()
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
