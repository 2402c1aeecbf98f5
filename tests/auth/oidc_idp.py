"""A real OpenID provider for tests: npm oidc-provider 9 (tests/auth/idp/server.mjs) in a node process.

`start_idp()` installs the npm package once (`npm ci` into the git-ignored tests/auth/idp/node_modules),
starts the server on a free loopback port and returns a `RunningIdp`; the `idp` fixture in
tests/auth/conftest.py is one of these for the whole session. Users, clients and secrets are below.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import jwt

IDP_DIR = Path(__file__).resolve().parent / "idp"
API_AUDIENCE = "jobdeck-api"
DEFAULT_WEB_REDIRECTS = ("http://127.0.0.1:8640/auth/callback", "http://127.0.0.1:8640/callback")

# name -> (roles, teams); in access tokens and ID tokens as the `roles` and `teams` claims (lists).
USERS = {
    "alice": (["admin"], ["ops"]),
    "olive": (["operator"], ["payments"]),
    "vic": (["viewer"], ["payments"]),
    "nora": ([], []),  # signed in, allowed nothing
}
# client_id -> secret. jobdeck-cli is public (no secret); svc-* use the client-credentials grant.
CLIENT_SECRETS = {
    "jobdeck-web": "jobdeck-web-secret",
    "svc-operator": "svc-operator-secret",  # roles [operator], teams [payments]
    "svc-agent": "svc-agent-secret",  # roles [agent], teams []
}


class IdpUnavailable(Exception):
    """node/npm missing or the package cannot be installed: the tests that need the IdP skip."""


def install() -> None:
    """`npm ci` the IdP's package once; a no-op (milliseconds) while node_modules matches the lock file."""
    if not shutil.which("node") or not shutil.which("npm"):
        raise IdpUnavailable("node and npm are needed for the OIDC tests (apt-get install -y nodejs npm)")
    installed = IDP_DIR / "node_modules" / ".package-lock.json"  # npm writes it last, on success
    lock = IDP_DIR / "package-lock.json"
    if installed.exists() and installed.stat().st_mtime >= lock.stat().st_mtime:
        return
    cmd = ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]
    try:
        out = subprocess.run(cmd, cwd=IDP_DIR, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise IdpUnavailable(f"`{' '.join(cmd)}` in {IDP_DIR} failed: {exc}") from None
    if out.returncode != 0:
        raise IdpUnavailable(f"`{' '.join(cmd)}` in {IDP_DIR} exited {out.returncode}: {out.stderr.strip()[-500:]}")


@dataclass
class RunningIdp:
    """The node process and what tests do with it; every helper is a real HTTP exchange with the IdP."""

    issuer: str
    proc: subprocess.Popen[bytes]
    log: Path
    audience: str = API_AUDIENCE
    users: dict[str, tuple[list[str], list[str]]] = field(default_factory=lambda: dict(USERS))
    secrets: dict[str, str] = field(default_factory=lambda: dict(CLIENT_SECRETS))

    def output(self) -> str:
        """What the node process printed (for failure messages)."""
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    @property
    def token_endpoint(self) -> str:
        return self.issuer + "/token"

    async def client_credentials_token(self, client_id: str, secret: str | None = None) -> str:
        """An access token (RS256 JWT for `audience`) for a service client; its roles/teams come from the IdP."""
        secret = self.secrets[client_id] if secret is None else secret
        async with httpx.AsyncClient(timeout=10) as http:
            resp = await http.post(
                self.token_endpoint, data={"grant_type": "client_credentials"}, auth=(client_id, secret)
            )
        assert resp.status_code == 200, f"client credentials for {client_id}: HTTP {resp.status_code} {resp.text}"
        return str(resp.json()["access_token"])

    async def browser_sign_in(self, authorization_url: str, redirect_uri: str, user: str | None = None) -> str:
        """Walk an authorization request like a browser with cookies, until the IdP redirects to `redirect_uri`;
        return that callback URL (with code, state, iss or error). The user is the request's `login_hint`, else
        `user` is typed into the IdP's login form. Consent is granted automatically."""
        async with httpx.AsyncClient(timeout=10, follow_redirects=False) as browser:
            return await _walk(browser, authorization_url, redirect_uri, user)

    async def approve_device(self, user_code: str, user: str) -> None:
        """Approve a device-flow user code as `user`, through the IdP's own pages: the user-code form at
        /device, its confirmation form, then the login form (our interaction) and automatic consent."""
        async with httpx.AsyncClient(timeout=10, follow_redirects=False) as browser:
            page = await browser.get(self.issuer + "/device")
            page = await browser.post(self.issuer + "/device", data={"xsrf": _xsrf(page), "user_code": user_code})
            assert 'name="confirm"' in page.text, f"the IdP did not accept user code {user_code}: {page.text[-400:]}"
            form = {"xsrf": _xsrf(page), "user_code": user_code, "confirm": "yes"}
            resp = await browser.post(self.issuer + "/device", data=form)
            final = await _walk_response(browser, resp, None, user)
        assert "Sign-in Success" in final, f"device approval for {user} did not succeed: {final[-400:]}"

    async def rotate_keys(self) -> str:
        """Make a new RS256 key (new kid) the IdP's signing key; older keys stay published. Returns the new kid."""
        async with httpx.AsyncClient(timeout=10) as http:
            resp = await http.post(self.issuer + "/test/rotate")
        assert resp.status_code == 200, resp.text
        return str(resp.json()["kid"])

    async def forgery_key(self) -> dict[str, Any]:
        """The private half of an ES256 key the IdP publishes (kid test-forgery-es256) but never signs with,
        so tests can sign tokens the IdP will not mint (expired, wrong issuer, ...)."""
        async with httpx.AsyncClient(timeout=10) as http:
            resp = await http.get(self.issuer + "/test/forgery-key")
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    async def forge(self, *, headers: dict[str, Any] | None = None, **claims: Any) -> str:
        """A token signed with the forgery key: iss, aud, sub, iat, exp (now + 5 min) default to valid
        values; a claim given as None is left out."""
        jwk = await self.forgery_key()
        now = int(time.time())
        body = {"iss": self.issuer, "aud": self.audience, "sub": "forged", "iat": now, "exp": now + 300, **claims}
        body = {k: v for k, v in body.items() if v is not None}
        key = jwt.PyJWK(jwk).key
        return jwt.encode(body, key, algorithm="ES256", headers={"kid": jwk["kid"], **(headers or {})})


def _xsrf(page: httpx.Response) -> str:
    found = re.search(r'name="xsrf" value="([^"]+)"', page.text)
    assert found, f"no xsrf field in the IdP page ({page.status_code}): {page.text[-400:]}"
    return found.group(1)


async def _walk(browser: httpx.AsyncClient, url: str, redirect_uri: str | None, user: str | None) -> str:
    return await _walk_response(browser, await browser.get(url), redirect_uri, user)


async def _walk_response(
    browser: httpx.AsyncClient, resp: httpx.Response, redirect_uri: str | None, user: str | None
) -> str:
    """Follow redirects and the login form; the callback URL when it reaches `redirect_uri`, else the last page."""
    for _ in range(20):
        if resp.is_redirect:
            target = urljoin(str(resp.url), resp.headers["location"])
            if redirect_uri is not None and target.split("?")[0] == redirect_uri:
                return target
            resp = await browser.get(target)
        elif 'name="user"' in resp.text and resp.url.path.startswith("/interaction/"):
            assert user, f"the IdP asks who signs in at {resp.url}: give login_hint or user"
            resp = await browser.post(str(resp.url), data={"user": user})
        else:
            if redirect_uri is not None:
                raise AssertionError(f"the IdP stopped at {resp.url} (HTTP {resp.status_code}): {resp.text[-400:]}")
            return resp.text
    raise AssertionError("more than 20 steps in the sign-in")


def start_idp(
    web_redirect_uris: tuple[str, ...] | list[str] = DEFAULT_WEB_REDIRECTS,
    api_audience: str = API_AUDIENCE,
    access_token_ttl: int = 300,
    timeout: float = 20.0,
) -> RunningIdp:
    """Install if needed, then start the IdP on a free loopback port; wait for its "ready <issuer>" line."""
    install()
    log = Path(tempfile.mkstemp(prefix="jobdeck-idp-", suffix=".log")[1])
    env = {
        **os.environ,
        "IDP_WEB_REDIRECT_URIS": ",".join(web_redirect_uris),
        "IDP_API_AUDIENCE": api_audience,
        "IDP_ACCESS_TOKEN_TTL": str(access_token_ttl),
        "NODE_ENV": "test",
    }
    with open(log, "wb") as out:
        proc = subprocess.Popen(["node", "server.mjs", "0"], cwd=IDP_DIR, stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(r"^ready (\S+)$", log.read_text(errors="replace"), re.MULTILINE)
        if found:
            return RunningIdp(found.group(1), proc, log, audience=api_audience)
        if proc.poll() is not None:
            raise RuntimeError(f"the test IdP exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
        time.sleep(0.02)
    proc.kill()
    proc.wait(5)
    raise RuntimeError(f"the test IdP did not print 'ready' within {timeout} s:\n{log.read_text(errors='replace')}")
