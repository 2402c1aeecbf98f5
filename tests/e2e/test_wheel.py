"""`pip install jobdeck` as a user gets it: the wheel built from this checkout, installed in a fresh
virtualenv, runs `jobdeck up` from an empty folder: the migrations apply, a job runs through the API,
the dashboard builds in the cache folder (not in site-packages) and shows the job in a browser.

The fresh venv gets the wheel alone (`pip install --no-deps`); its dependencies come from this
test venv's site-packages through a path file, so the test does not download reflex and friends
on every run (about 20 s instead of minutes) and still runs nothing of the checkout.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import httpx
import pytest

from core.store import schema
from tests.conftest import ROOT, free_port
from web_ui import frontend

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
CHROMIUM = "/usr/bin/chromium"
NOISE = ("Node.js is out of date", "Blocked 1 postinstall", "━", "───", "Traceback", "Compiling")


def copy_source(dst: Path) -> Path:
    """The files git knows (tracked, or new and not ignored): what an sdist of this checkout holds."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)
    return dst


def build_wheel(tmp: Path) -> Path:
    src = copy_source(tmp / "src")
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 0, f"pip wheel failed:\n{out.stdout}\n{out.stderr}"
    (wheel,) = (tmp / "dist").glob("jobdeck-*.whl")
    return wheel


def fresh_venv(tmp: Path, wheel: Path) -> Path:
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    out = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                          str(wheel)], capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 0, f"pip install failed:\n{out.stdout}\n{out.stderr}"
    # Only after the install, or pip would see this venv's editable jobdeck through the path file.
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (Path(purelib) / "zz_jobdeck_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def files_of(venv: Path) -> set[str]:
    return {str(p.relative_to(venv)) for p in venv.rglob("*") if "__pycache__" not in p.parts}


def wait_for(what: str, predicate: object, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:g} s waiting for {what}; output:\n{log.read_text()[-4000:]}"
            )
        time.sleep(0.2)


def healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_the_wheel_installs_and_runs_from_an_empty_folder(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    names = {n.replace("\\", "/") for n in __import__("zipfile").ZipFile(wheel).namelist()}
    for engine in schema.ENGINES:
        shipped = {n for n in names if n.startswith(f"migrations/{engine}/") and n.endswith(".sql")}
        assert shipped == {f"migrations/{engine}/{m.name}" for m in schema.load(engine)}, sorted(shipped)
    assert {"web_ui/project/rxconfig.py", "web_ui/project/reflex.lock/bun.lock"} <= names, sorted(names)

    venv = fresh_venv(tmp_path, wheel)
    version = wheel.name.split("-")[1]
    out = subprocess.run([str(venv / "bin" / "jobdeck"), "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert out.stdout.strip() == f"jobdeck {version}", (out.stdout, out.stderr)
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import core.store.schema as s; print(s.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path).stdout  # fmt: skip
    assert where.startswith(str(venv)), f"expected the installed copy, got {where!r}"
    before = files_of(venv)

    empty, home = tmp_path / "empty", tmp_path / "home"
    empty.mkdir()
    home.mkdir()
    port, web_port = free_port(), free_port()
    url, web = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}"
    # None of this session's JobDeck or Python settings, a HOME of its own (which must stay empty); the
    # bun and package caches of this checkout are reused, so the build is the only slow part.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBDECK_", "PYTHON", "VIRTUAL_ENV", "XDG_"))}
    env.update(HOME=str(home), PYTHONUNBUFFERED="1", JOBDECK_CACHE_DIR=str(frontend.CACHE))
    log = tmp_path / "up.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen([str(venv / "bin" / "jobdeck"), "up", "--web", "--port", str(port), "--web-port",
                                 str(web_port), "--slots", "2"], cwd=empty, env=env, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    project = None
    try:
        wait_for("the API", lambda: healthy(url) or proc.poll() is not None, 30, log)
        health = httpx.get(url + "/healthz").json()
        assert health["version"] == version, health
        assert health["schema_version"] == schema.load("sqlite")[-1].version, health
        assert (empty / "data" / "jobdeck.db").is_file(), sorted(str(p) for p in empty.rglob("*"))

        job = httpx.post(url + "/v1/jobs", json={"name": "from-the-wheel", "task": {"kind": "shell",
                         "argv": ["echo", "hello from the wheel"]}}).json()  # fmt: skip
        wait_for("the job to finish",
                 lambda: httpx.get(f"{url}/v1/jobs/{job['id']}").json()["state"] in ("succeeded", "failed", "dead"),
                 30, log)  # fmt: skip
        attempts = httpx.get(f"{url}/v1/jobs/{job['id']}/attempts").json()["attempts"]
        assert attempts[-1]["outcome"] == "succeeded" and "hello from the wheel" in attempts[-1]["output"], attempts

        wait_for("the dashboard", lambda: "dashboard is up" in log.read_text() or proc.poll() is not None, 200, log)
        assert f"web dashboard is up: {web}" in log.read_text(), log.read_text()
        project = next(p for p in (frontend.CACHE / "web").iterdir()
                       if (p / ".source").is_file() and (p / ".source").read_text().startswith(str(venv)))  # fmt: skip
        assert any(project.glob(".web*")), f"no build folder in {project}"
        show_in_browser(web, job["id"])
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(60)
        if project is not None:
            shutil.rmtree(project, ignore_errors=True)
    output = log.read_text()
    assert code == 0, output
    noise = [line for line in output.splitlines() if any(n in line for n in NOISE)]
    assert noise == [], "start-up output should be JobDeck's own lines only, got:\n" + "\n".join(noise)
    grown = sorted(files_of(venv) - before)
    assert grown == [], f"running wrote into the venv (the build belongs in the cache): {grown[:20]}"
    assert sorted(p.name for p in home.iterdir()) == [], "HOME should get nothing"


def show_in_browser(web: str, job_id: int) -> None:
    """The Jobs page lists the job (a real browser when Debian's chromium is here, else the HTML)."""
    if not Path(CHROMIUM).exists():
        assert httpx.get(web + "/jobs", timeout=10).status_code == 200
        return
    import tempfile

    from playwright.sync_api import expect, sync_playwright

    from tests.web_ui.conftest import CHROMIUM_ARGS, chromium_env

    with tempfile.TemporaryDirectory(prefix="jobdeck-chromium-") as config, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, env=chromium_env(config))
        try:
            page = browser.new_page()
            page.goto(web + "/jobs", timeout=30_000)
            expect(page.locator(f"#job-row-{job_id}")).to_contain_text("from-the-wheel", timeout=20_000)
        finally:
            browser.close()


def test_the_cache_folder_is_per_user_and_can_be_moved() -> None:
    assert frontend.cache_root({"JOBDECK_CACHE_DIR": "/srv/jd-cache"}) == Path("/srv/jd-cache")
    assert frontend.cache_root({"XDG_CACHE_HOME": "/home/ada/.xdg"}) == Path("/home/ada/.xdg/jobdeck")
    assert frontend.cache_root({}) == Path.home() / ".cache" / "jobdeck"


def test_a_package_comes_straight_from_the_npm_registry_without_npm(tmp_path: Path) -> None:
    # How a machine without npm (the slim Docker image) gets bun: the registry's tarball, checked
    # against its sha512 integrity. A tiny package stands in for bun's 50 MB.
    import tarfile

    tgz = frontend.fetch_package("is-number@7.0.0", tmp_path)
    with tarfile.open(tgz) as tar:
        assert "package/package.json" in tar.getnames(), tar.getnames()
