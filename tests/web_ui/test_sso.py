"""Single sign-on in the browser: the dashboard sends people through the core's OIDC flow
(authorization code + PKCE at a real OpenID provider) and gets their session with a one-time ticket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from playwright.sync_api import Browser, expect

from core.auth.tokens import token_hash
from tests.auth.oidc_idp import IdpUnavailable, RunningIdp, start_idp
from tests.conftest import ROOT, ServerProcess, free_port, spawn_jobdeck
from tests.web_ui.conftest import NAV_TIMEOUT, UI_TIMEOUT, Console, _stop, _wait_up

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
SERVICE_TOKEN = "jd_web_sso_service_token_for_tests_0000000000"


@dataclass
class Sso:
    idp: RunningIdp
    core: ServerProcess
    web: str


@pytest.fixture(scope="module")
def sso(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sso]:
    base = tmp_path_factory.mktemp("sso")
    core_port, web_port = free_port(), free_port()
    try:
        idp = start_idp(web_redirect_uris=[f"http://127.0.0.1:{core_port}/auth/callback"])
    except IdpUnavailable as exc:
        pytest.skip(str(exc))
    web_url = f"http://127.0.0.1:{web_port}"
    config = base / "jobdeck.toml"
    config.write_text("\n".join([
        'auth = "oidc"', f"oidc_issuer = {json.dumps(idp.issuer)}", 'oidc_client_id = "jobdeck-web"',
        'oidc_client_secret = "jobdeck-web-secret"', 'oidc_scopes = "openid profile email"',
        f"web_origins = [{json.dumps(web_url)}]", "rate_limit_per_second = 0",
        "[team_queues]", 'payments = ["payments"]', 'ops = ["*"]',
        "[[tokens]]", 'name = "dashboard"', f"sha256 = {json.dumps(token_hash(SERVICE_TOKEN))}", 'role = "admin"',
        "teams = []",
    ]) + "\n")  # fmt: skip
    core = spawn_jobdeck(base / "data", "up", "--no-web", "--slots", "2", port=core_port,
                         env={"JOBDECK_CONFIG": str(config), "JOBDECK_WEB": "0"})  # fmt: skip
    log = base / "web.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "JOBDECK_TOKEN": SERVICE_TOKEN,
           "JOBDECK_WEB_WORKDIR": str(base / "frontend")}  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "core.cli", "web", "--server", core.url, "--port", str(web_port)],
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)  # fmt: skip
    try:
        _wait_up(proc, web_url, log)
        yield Sso(idp, core, web_url)
    finally:
        _stop(proc)
        core.proc.terminate()
        core.proc.wait(15)
        idp.stop()


def test_sign_in_through_the_identity_provider_and_out_again(browser: Browser, sso: Sso, console: Console) -> None:
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    ctx.set_default_timeout(UI_TIMEOUT)
    ctx.set_default_navigation_timeout(NAV_TIMEOUT)
    console.origins = (sso.web,)
    try:
        page = console.watch(ctx.new_page())
        page.goto(sso.web + "/jobs")
        expect(page.locator("#signed-out")).to_be_visible()
        console.errors.clear()  # the signed-out page's refused calls are expected
        page.locator("#sign-in").click()
        page.locator("#sign-in-sso").click()
        page.get_by_label("User").fill("olive")  # the IdP's own sign-in form
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("#user-role")).to_have_text("operator")
        expect(page.locator("#user-name")).to_have_text("olive")
        expect(page.locator("#signed-out")).to_have_count(0)
        page.locator("#sign-out").click()
        expect(page.locator("#signed-out")).to_be_visible()
        console.errors[:] = [e for e in console.errors if "401" not in e]
    finally:
        ctx.close()
