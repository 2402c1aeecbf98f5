"""Sign-in against a real OpenID provider (oidc-provider under node): service tokens, the browser's
code + PKCE flow with its session cookie and ticket, `jobdeck login`'s device flow, key rotation,
the live feed filtered by team, and an IdP that cannot be reached."""

from __future__ import annotations

import asyncio
import os
import re
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from core.client import JobDeckClient
from core.errors import Unauthorized, Unavailable
from tests.auth.oidc_idp import IdpUnavailable, RunningIdp, start_idp
from tests.conftest import ROOT, free_port, node_settings, start_node, stop_node

WEB = "http://127.0.0.1:8650"  # where the web UI would be (a configured origin for `next`)
JOB = {"name": "charge", "queue": "payments", "task": {"kind": "shell", "command": "true"}}


@dataclass
class SignIn:
    idp: RunningIdp
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def sign_in() -> Iterator[SignIn]:
    port = free_port()  # the IdP must know the node's callback URL before either starts
    try:
        idp = start_idp(web_redirect_uris=[f"http://127.0.0.1:{port}/auth/callback"])
    except IdpUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield SignIn(idp, port)
    finally:
        idp.stop()


def oidc_settings(tmp_path: Path, s: SignIn, **overrides: Any) -> Any:
    values: dict[str, Any] = dict(
        port=s.port, auth="oidc", oidc_issuer=s.idp.issuer, oidc_client_id="jobdeck-web",
        oidc_client_secret="jobdeck-web-secret", oidc_cli_client_id="jobdeck-cli", web_origins=[WEB],
        oidc_scopes="openid profile email", team_queues={"payments": ["payments"], "ops": ["*"]},
        rate_limit_per_second=0,
    )  # fmt: skip
    return node_settings(tmp_path, **{**values, **overrides})


@pytest.fixture
async def node(tmp_path: Path, sign_in: SignIn) -> AsyncIterator[SignIn]:
    n, _, task = await start_node(oidc_settings(tmp_path, sign_in), local_agent=False)
    try:
        yield sign_in
    finally:
        await stop_node(n, task)


async def test_a_service_token_from_client_credentials_acts_in_its_teams_queues(node: SignIn) -> None:
    token = await node.idp.client_credentials_token("svc-operator", "svc-operator-secret")
    async with JobDeckClient(node.url, token=token) as c:
        me = await c.me()
        assert (me["name"], me["role"], me["teams"], me["auth"]) == ("svc-operator", "operator", ["payments"], "oidc")
        job = await c.submit({**JOB, "delay": 60})
        assert job["queue"] == "payments"
        with pytest.raises(Exception, match="queue 'ml' is not one of svc-operator's teams' queues") as err:
            await c.submit({**JOB, "queue": "ml"})
        assert getattr(err.value, "status", None) == 403


@pytest.mark.parametrize(
    ("claims", "headers", "check"),
    [
        ({"exp": 1_000_000}, None, "expired at"),
        ({"nbf": 4_000_000_000}, None, "not valid before"),
        ({"iss": "https://evil.example"}, None, "issued by https://evil.example"),
        ({"aud": "another-api"}, None, "audience"),
        ({}, {"kid": "no-such-key"}, "signing key no-such-key is not published"),
    ],
)
async def test_bad_tokens_get_401_naming_the_failed_check(
    node: SignIn, claims: dict[str, Any], headers: dict[str, Any] | None, check: str
) -> None:
    token = await node.idp.forge(headers=headers, **claims)
    async with httpx.AsyncClient(base_url=node.url) as http:
        resp = await http.get("/v1/jobs", headers={"authorization": f"Bearer {token}"})
    assert resp.status_code == 401, resp.text
    assert check in resp.json()["message"]
    assert resp.headers["www-authenticate"].startswith('Bearer realm="jobdeck", error="invalid_token"')
    assert token not in resp.text


async def test_alg_none_and_a_tampered_token_are_refused(node: SignIn) -> None:
    import base64

    real = await node.idp.client_credentials_token("svc-operator", "svc-operator-secret")
    header, payload, signature = real.split(".")
    unsigned = base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT"}').rstrip(b"=").decode() + f".{payload}."
    claims = base64.urlsafe_b64decode(payload + "==").replace(b'"operator"', b'"admin"')
    tampered = f"{header}.{base64.urlsafe_b64encode(claims).rstrip(b'=').decode()}.{signature}"
    async with httpx.AsyncClient(base_url=node.url) as http:
        for token, check in ((unsigned, '"none"'), (tampered, "signature does not verify")):
            resp = await http.get("/v1/jobs", headers={"authorization": f"Bearer {token}"})
            assert resp.status_code == 401 and check in resp.json()["message"], resp.text


async def test_rotated_keys_are_fetched_when_a_new_kid_arrives(node: SignIn) -> None:
    async with JobDeckClient(node.url, token=await node.idp.client_credentials_token("svc-operator",
                                                                                    "svc-operator-secret")) as c:  # fmt: skip
        assert (await c.me())["role"] == "operator"
    kid = await node.idp.rotate_keys()
    token = await node.idp.client_credentials_token("svc-operator", "svc-operator-secret")
    import jwt

    assert jwt.get_unverified_header(token)["kid"] == kid
    async with JobDeckClient(node.url, token=token) as c:
        assert (await c.me())["role"] == "operator", "the node fetched the new key on the unknown kid"


async def _browser_sign_in(s: SignIn, next_url: str, user: str) -> httpx.Response:
    """Like a browser: /auth/login -> the IdP (login, consent) -> /auth/callback; returns the callback's answer."""
    async with httpx.AsyncClient(base_url=s.url, follow_redirects=False) as browser:
        start = await browser.get("/auth/login", params={"next": next_url})
        assert start.status_code == 302
        assert "code_challenge_method=S256" in start.headers["location"]
        login_cookie = start.headers["set-cookie"]
        assert "HttpOnly" in login_cookie and "SameSite=lax" in login_cookie
        callback = await s.idp.browser_sign_in(start.headers["location"], f"{s.url}/auth/callback", user=user)
        resp = await browser.get(callback)
        resp.extensions["browser_cookies"] = dict(browser.cookies)
        return resp


async def test_the_browser_flow_sets_a_session_cookie(node: SignIn) -> None:
    resp = await _browser_sign_in(node, "/auth/me", "olive")
    assert resp.status_code == 302 and resp.headers["location"] == "/auth/me", resp.text
    cookie = resp.headers["set-cookie"]
    assert cookie.startswith("jobdeck_session=jds.") and "HttpOnly" in cookie and "SameSite=lax" in cookie
    assert "Secure" not in cookie, "plain http on loopback: a Secure cookie would never come back"
    session = resp.extensions["browser_cookies"]["jobdeck_session"]
    async with httpx.AsyncClient(base_url=node.url, cookies={"jobdeck_session": session}) as browser:
        me = (await browser.get("/auth/me")).json()
        assert (me["name"], me["role"], me["teams"], me["auth"]) == ("olive", "operator", ["payments"], "session")
        assert (await browser.post("/auth/logout")).json()["signed_out"] is True


async def test_the_web_ui_gets_a_one_time_ticket_for_the_session(node: SignIn) -> None:
    resp = await _browser_sign_in(node, f"{WEB}/auth/done", "vic")
    location = resp.headers["location"]
    assert location.startswith(f"{WEB}/auth/done?ticket="), location
    ticket = parse_qs(urlsplit(location).query)["ticket"][0]
    async with httpx.AsyncClient(base_url=node.url) as web_backend:
        got = (await web_backend.post("/auth/ticket", json={"ticket": ticket})).json()
        assert got["user"]["name"] == "vic" and got["user"]["role"] == "viewer"
        again = await web_backend.post("/auth/ticket", json={"ticket": ticket})
        assert again.status_code == 401 and "used already" in again.json()["message"]
    async with JobDeckClient(node.url, token=got["token"]) as c:
        assert (await c.me())["name"] == "vic"
        with pytest.raises(Exception, match="needs operator") as err:
            await c.submit(JOB)
        assert getattr(err.value, "status", None) == 403


async def test_login_refuses_to_send_people_to_foreign_sites(node: SignIn) -> None:
    async with httpx.AsyncClient(base_url=node.url) as http:
        resp = await http.get("/auth/login", params={"next": "https://evil.example/steal"})
    assert resp.status_code == 422 and "not this server or a configured web origin" in resp.json()["message"]


async def test_jobdeck_login_with_the_device_flow_caches_the_token(node: SignIn, tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("JOBDECK_TOKEN", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "core.cli", "login", "--server", node.url, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None and proc.stdout is not None
    said = ""
    while "enter the code" not in said:
        said += (await asyncio.wait_for(proc.stderr.readline(), 20)).decode()
    code = re.search(r"enter the code (\S+)", said)
    assert code, said
    await node.idp.approve_device(code.group(1), "vic")
    out = (await asyncio.wait_for(proc.stdout.read(), 30)).decode()
    assert await proc.wait() == 0, out
    assert "signed in to" in out and "as vic (viewer)" in out
    cache = tmp_path / "config" / "jobdeck" / "credentials.json"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    who = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "core.cli", "--server", node.url, "whoami"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=30,
    )  # fmt: skip
    assert who.stdout.startswith("vic (viewer, signed in by oidc)"), who.stdout + who.stderr


async def test_the_live_feed_carries_only_the_events_of_the_subscribers_teams(node: SignIn) -> None:
    operator = await node.idp.client_credentials_token("svc-operator", "svc-operator-secret")
    async with JobDeckClient(node.url, token=operator) as c:
        since = (await c.health())["last_seq"]
    # alice (admin) makes jobs in two teams' queues through a session from the browser flow
    resp = await _browser_sign_in(node, "/auth/me", "alice")
    admin_session = resp.extensions["browser_cookies"]["jobdeck_session"]
    async with JobDeckClient(node.url, token=admin_session) as admin:
        ml = await admin.submit({**JOB, "queue": "ml"})
        pay = await admin.submit(JOB)
        last = await admin.submit({**JOB, "queue": "ml", "name": "last"})
        everything = [e async for e in admin.events(since=since, until_caught_up=True)]
    async with JobDeckClient(node.url, token=operator) as c:
        seen = [e async for e in c.events(since=since, until_caught_up=True)]
    assert {e["job_id"] for e in everything} >= {ml["id"], pay["id"], last["id"]}
    assert {e["job_id"] for e in seen if e["job_id"]} == {pay["id"]}, "payments only"
    # REST reads are filtered the same way
    async with JobDeckClient(node.url, token=operator) as c:
        with pytest.raises(Exception, match="not one of") as err:
            await c.get_job(ml["id"])
        assert getattr(err.value, "status", None) == 403


async def test_a_websocket_without_credentials_is_refused_with_the_reason(node: SignIn) -> None:
    async with JobDeckClient(node.url) as c:
        with pytest.raises(Unauthorized, match="no credentials"):
            await c.events(since=0).__anext__()


async def test_an_unreachable_idp_stops_the_node_with_the_issuer_named(tmp_path: Path, sign_in: SignIn) -> None:
    from core.node import Node

    gone = f"http://127.0.0.1:{free_port()}"
    node = Node(oidc_settings(tmp_path, sign_in, oidc_issuer=gone, port=0))
    with pytest.raises(Unavailable, match=f"cannot reach the OIDC issuer {gone}"):
        await node.start()
    out = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "core.cli", "server", "--port", "0", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=30,
        env={**os.environ, "JOBDECK_AUTH": "oidc", "JOBDECK_OIDC_ISSUER": gone},
    )  # fmt: skip
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"cannot reach the OIDC issuer {gone}" in out.stderr


async def test_jobdeck_login_through_a_loopback_redirect(node: SignIn, tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "core.cli", "login", "--server", node.url, "--method", "browser", "--no-browser",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None and proc.stdout is not None
    said = ""
    while "http" not in said.split("browser on this machine:")[-1]:
        said += (await asyncio.wait_for(proc.stderr.readline(), 20)).decode()
    url = said.split("browser on this machine:")[-1].strip()
    redirect = parse_qs(urlsplit(url).query)["redirect_uri"][0]
    assert redirect.startswith("http://127.0.0.1:") and redirect.endswith("/callback")
    callback = await node.idp.browser_sign_in(url, redirect, user="olive")
    async with httpx.AsyncClient() as browser:  # the IdP sends the browser back to the CLI's loopback server
        assert "Signed in to JobDeck" in (await browser.get(callback)).text
    out = (await asyncio.wait_for(proc.stdout.read(), 30)).decode()
    assert await proc.wait() == 0 and "as olive (operator)" in out, out


async def test_a_cached_token_is_refreshed_before_it_expires(node: SignIn, tmp_path: Path) -> None:
    import time

    from core.auth import credentials
    from core.auth.oidc import OidcProvider, pkce_pair

    provider = OidcProvider(node.idp.issuer, "jobdeck-api")
    await provider.discover()
    verifier, challenge = pkce_pair()
    redirect = "http://127.0.0.1:9/callback"
    url = provider.authorization_url("jobdeck-cli", redirect, "st", challenge, "n", extra={"login_hint": "olive"})
    code = parse_qs(urlsplit(await node.idp.browser_sign_in(url, redirect)).query)["code"][0]
    tokens = await provider.exchange_code("jobdeck-cli", None, code, redirect, verifier)
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    credentials.save(node.url, {"access_token": tokens["access_token"], "refresh_token": tokens["refresh_token"],
                                "expires_at": time.time() + 10, "token_endpoint": provider.token_endpoint,
                                "client_id": "jobdeck-cli"}, env)  # fmt: skip
    fresh = await credentials.token_for(node.url, env)
    assert fresh and fresh != tokens["access_token"], "a token expiring within a minute is refreshed"
    assert credentials.load(node.url, env)["expires_at"] > time.time() + 60  # type: ignore[index]
    async with JobDeckClient(node.url, token=fresh) as c:
        assert (await c.me())["name"] == "olive"


async def test_a_session_cookie_does_not_work_for_another_sites_page(node: SignIn) -> None:
    resp = await _browser_sign_in(node, "/auth/me", "olive")
    cookies = {"jobdeck_session": resp.extensions["browser_cookies"]["jobdeck_session"]}
    async with httpx.AsyncClient(base_url=node.url, cookies=cookies) as browser:
        forged = await browser.post("/v1/jobs", json=JOB, headers={"origin": "https://evil.example"})
        assert forged.status_code == 403 and "may not act with this browser's JobDeck session" in forged.text
        from_web_ui = await browser.post("/v1/jobs", json=JOB, headers={"origin": WEB})
        assert from_web_ui.status_code == 201, from_web_ui.text


async def test_an_agent_token_cannot_follow_the_feed(node: SignIn) -> None:
    token = await node.idp.client_credentials_token("svc-agent", "svc-agent-secret")
    async with JobDeckClient(node.url, token=token) as c:
        with pytest.raises(Exception, match="is an agent token") as err:
            await c.events(since=0).__anext__()
        assert getattr(err.value, "status", None) == 403
