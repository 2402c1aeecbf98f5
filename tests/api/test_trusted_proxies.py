"""X-Forwarded-For is believed from trusted proxies only: the audit log and the per-IP rate limits
name the client the proxy saw, and nobody else can choose the address they are logged under."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.api.proxy import TrustedProxies
from core.config import load_settings
from core.errors import InvalidInput
from tests.auth.principals import TOKENS, auth_settings
from tests.conftest import node_settings, start_node, stop_node


@contextlib.asynccontextmanager
async def serving(settings: Any) -> AsyncIterator[tuple[Any, str]]:
    """A node without a local agent on `settings`, for the block: (node, url)."""
    node, url, task = await start_node(settings, local_agent=False)
    try:
        yield node, url
    finally:
        await stop_node(node, task)


ADMIN = {"authorization": f"Bearer {TOKENS['admin'][0]}"}
OPERATOR = {"authorization": f"Bearer {TOKENS['operator'][0]}"}
JOB = {"queue": "payments", "task": {"kind": "shell", "command": "true"}}


@pytest.mark.parametrize(
    ("trusted", "peer", "forwarded_for", "client"),
    [
        ([], "127.0.0.1", "198.51.100.7", "127.0.0.1"),  # nobody trusted: the header is ignored
        (["127.0.0.1"], "127.0.0.1", "198.51.100.7", "198.51.100.7"),
        (["127.0.0.1"], "192.0.2.9", "198.51.100.7", "192.0.2.9"),  # the peer is not a trusted proxy
        (["127.0.0.1"], "127.0.0.1", "6.6.6.6, 198.51.100.7", "198.51.100.7"),  # a made-up left part is ignored
        (["127.0.0.1", "10.0.0.0/8"], "127.0.0.1", "198.51.100.7, 10.1.2.3", "198.51.100.7"),  # through two proxies
        (["127.0.0.1", "10.0.0.0/8"], "127.0.0.1", "10.9.9.9, 10.1.2.3", "10.9.9.9"),  # all trusted: the left-most
        (["127.0.0.1"], "127.0.0.1", "198.51.100.7:4711", "198.51.100.7"),  # a port after the address
        (["127.0.0.1"], "127.0.0.1", "[2001:db8::5]:443", "2001:db8::5"),
        (["::1"], "::1", "2001:db8::5", "2001:db8::5"),
        (["127.0.0.1"], "127.0.0.1", "198.51.100.7, not-an-ip", "127.0.0.1"),  # garbage: the hop that sent it
        (["127.0.0.1"], "127.0.0.1", "", "127.0.0.1"),
    ],
)
def test_the_client_is_the_right_most_address_that_is_not_a_trusted_proxy(
    trusted: list[str], peer: str, forwarded_for: str, client: str
) -> None:
    got = TrustedProxies(trusted).client_of(peer, forwarded_for)
    assert got == client, (
        f"trusted {trusted}, peer {peer}, X-Forwarded-For {forwarded_for!r}: expected {client}, got {got}"
    )


def test_trusted_proxies_are_checked_when_the_settings_load() -> None:
    env = {"JOBDECK_TRUSTED_PROXIES": "10.0.0.0/8, 127.0.0.1"}
    assert load_settings(environ=env).trusted_proxies == ["10.0.0.0/8", "127.0.0.1"]
    assert load_settings(environ={"JOBDECK_TRUSTED_PROXIES": '["::1"]'}).trusted_proxies == ["::1"]
    with pytest.raises(InvalidInput, match=r"'10\.0\.0\.0/33' is not an IP address or CIDR") as err:
        load_settings(environ={"JOBDECK_TRUSTED_PROXIES": "10.0.0.0/33"})
    assert err.value.field == "trusted_proxies"


async def _audit_ips(url: str) -> list[str]:
    async with httpx.AsyncClient(base_url=url, headers=ADMIN) as admin:
        entries = (await admin.get("/v1/audit", params={"limit": 50})).json()["entries"]
    return [e["ip"] for e in reversed(entries)]


async def test_the_audit_log_takes_the_client_from_a_trusted_proxy_only(tmp_path: Path) -> None:
    trusted = auth_settings(tmp_path / "a", rate_limit_per_second=0, trusted_proxies=["127.0.0.1", "10.0.0.0/8"])
    plain = auth_settings(tmp_path / "b", rate_limit_per_second=0)
    for settings, expected in (
        (trusted, ["198.51.100.7", "198.51.100.7", "198.51.100.8", "127.0.0.1", "198.51.100.9"]),
        (plain, ["127.0.0.1"] * 5),  # no trusted proxies: what the header says does not matter
    ):
        async with serving(settings) as (_node, url):
            async with httpx.AsyncClient(base_url=url, headers=OPERATOR) as op:
                for forwarded in ("198.51.100.7", "6.6.6.6, 198.51.100.7", "198.51.100.8, 10.1.2.3", None):
                    headers = {"x-forwarded-for": forwarded} if forwarded else {}
                    made = await op.post("/v1/jobs", json=JOB, headers=headers)
                    assert made.status_code == 201, made.text
                # A refused call is in the log too, under the forwarded address.
                refused = await op.post(
                    "/v1/jobs", json={**JOB, "queue": "ml"}, headers={"x-forwarded-for": "198.51.100.9"}
                )
                assert refused.status_code == 403
            got = await _audit_ips(url)
            assert got == expected, f"trusted_proxies={settings.trusted_proxies}: expected {expected}, got {got}"


async def test_a_trusted_proxy_says_the_scheme_too(tmp_path: Path) -> None:
    """Behind a TLS-terminating proxy the node knows the browser used https: a browser session's
    request from the node's own https origin passes the cross-site check."""
    settings = auth_settings(tmp_path, rate_limit_per_second=0, trusted_proxies=["127.0.0.1"])
    seen: list[Any] = []
    async with serving(settings) as (node, url):
        signer = node.app.state.auth.sessions
        session, _ = signer.issue(node.app.state.auth.tokens.lookup(TOKENS["operator"][0]))
        host = url.removeprefix("http://")
        async with httpx.AsyncClient(base_url=url, cookies={"jobdeck_session": session}) as browser:
            for proto in ("https", None):
                headers = {"origin": f"https://{host}", "x-forwarded-for": "198.51.100.7"}
                if proto:
                    headers["x-forwarded-proto"] = proto
                resp = await browser.post("/v1/jobs", json=JOB, headers=headers)
                seen.append((proto, resp.status_code, resp.json().get("message", "")[:80]))
    assert [s[1] for s in seen] == [201, 403], f"expected https to be our own origin, plain http not: {seen}"


async def test_without_sign_in_forwarded_callers_are_limited_per_ip_and_local_ones_are_not(tmp_path: Path) -> None:
    settings = node_settings(tmp_path, trusted_proxies=["127.0.0.1"], rate_limit_per_second=0.5, rate_limit_burst=3)
    async with serving(settings) as (_node, url), httpx.AsyncClient(base_url=url) as http:

        async def status(forwarded: str | None) -> int:
            headers = {"x-forwarded-for": forwarded} if forwarded else {}
            return (await http.get("/v1/queues", headers=headers)).status_code

        first = [await status("203.0.113.1") for _ in range(5)]
        assert first[:3] == [200] * 3 and first[3:] == [429, 429], f"one IP, burst 3: got {first}"
        resp = await http.get("/v1/queues", headers={"x-forwarded-for": "203.0.113.1"})
        assert "too many requests from 203.0.113.1" in resp.json()["message"], resp.json()
        assert await status("203.0.113.2") == 200, "another IP has its own bucket"
        assert [await status(None) for _ in range(10)] == [200] * 10, "the node's own machine is not limited"


async def test_failed_sign_ins_and_public_routes_count_against_the_callers_ip(tmp_path: Path) -> None:
    settings = auth_settings(tmp_path, trusted_proxies=["127.0.0.1"], rate_limit_per_second=0.5, rate_limit_burst=3)
    async with serving(settings) as (_node, url), httpx.AsyncClient(base_url=url) as http:
        bad = {"authorization": "Bearer jd_guessing", "x-forwarded-for": "203.0.113.66"}
        got = [(await http.get("/v1/queues", headers=bad)).status_code for _ in range(4)]
        assert got == [401, 401, 401, 429], f"three guesses, then the IP waits: got {got}"
        public = await http.get("/auth/config", headers={"x-forwarded-for": "203.0.113.66"})
        assert public.status_code == 429, "the public routes share the IP's bucket"
        for probe in ("/healthz", "/livez", "/readyz"):  # a refused probe would take the node out of service
            resp = await http.get(probe, headers={"x-forwarded-for": "203.0.113.66"})
            assert resp.status_code == 200, f"{probe} is never rate limited: got {resp.status_code}"
        ok = await http.get("/v1/queues", headers={**OPERATOR, "x-forwarded-for": "203.0.113.66"})
        assert ok.status_code == 200, "a signed-in caller has its own bucket, whatever its IP"
