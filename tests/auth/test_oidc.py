"""OidcProvider against a real OpenID provider (oidc-provider 9 in node): discovery, every token check,
key rotation, the code + PKCE flow, the device flow and an issuer that cannot be reached."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from core.auth.oidc import OidcProvider, pkce_pair
from core.errors import InvalidInput, Unauthorized, Unavailable
from tests.auth.oidc_idp import RunningIdp
from tests.conftest import free_port

pytestmark = pytest.mark.timeout(30)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def parts(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    header, payload, _ = token.split(".")
    return json.loads(unb64(header)), json.loads(unb64(payload))


async def discovered(idp: RunningIdp, **kwargs: Any) -> OidcProvider:
    provider = OidcProvider(idp.issuer, idp.audience, **kwargs)
    await provider.discover()
    return provider


async def refused(provider: OidcProvider, token: str) -> str:
    """The Unauthorized message for a token that must be refused; it never quotes the token."""
    with pytest.raises(Unauthorized) as caught:
        await provider.verify(token)
    message = caught.value.message
    assert not any(len(part) > 8 and part in message for part in [token, *token.split(".")]), message
    return message


# --- discovery and a good token


async def test_discovery_keeps_the_endpoints_and_the_keys(idp: RunningIdp) -> None:
    provider = await discovered(idp)
    assert provider.metadata["issuer"] == idp.issuer
    assert provider.authorization_endpoint == idp.issuer + "/auth"
    assert provider.token_endpoint == idp.issuer + "/token"
    assert provider.device_authorization_endpoint == idp.issuer + "/device/auth"
    assert provider.end_session_endpoint == idp.issuer + "/session/end"
    assert provider.jwks_uri == idp.issuer + "/jwks"
    assert provider.jwks_fetches == 1


async def test_client_credentials_token_verifies_with_roles_and_teams(idp: RunningIdp) -> None:
    provider = await discovered(idp)
    token = await idp.client_credentials_token("svc-operator")
    assert parts(token)[0]["alg"] == "RS256"
    claims = await provider.verify(token)
    assert claims["sub"] == "svc-operator"
    assert claims["aud"] == "jobdeck-api"
    assert (claims["roles"], claims["teams"]) == (["operator"], ["payments"])
    agent = await provider.verify(await idp.client_credentials_token("svc-agent"))
    assert (agent["roles"], agent["teams"]) == (["agent"], [])


async def test_verify_discovers_on_first_use(idp: RunningIdp) -> None:
    provider = OidcProvider(idp.issuer, idp.audience)
    claims = await provider.verify(await idp.client_credentials_token("svc-agent"))
    assert claims["sub"] == "svc-agent" and provider.jwks_fetches == 1


async def test_a_forged_token_with_valid_claims_verifies(idp: RunningIdp) -> None:
    """The forgery key is published by the IdP, so what the bad-token tests below refuse is only their flaw."""
    provider = await discovered(idp)
    claims = await provider.verify(await idp.forge(sub="forged-ok", roles=["viewer"]))
    assert claims["sub"] == "forged-ok" and parts(await idp.forge())[0]["alg"] == "ES256"
    # exp and nbf within the 30 s clock leeway still pass
    now = int(time.time())
    await provider.verify(await idp.forge(exp=now - 10, nbf=now + 10))


async def test_an_allow_list_without_the_algorithm_refuses_it(idp: RunningIdp) -> None:
    provider = await discovered(idp, algorithms=("RS256",))
    message = await refused(provider, await idp.forge())
    assert "algorithm ES256 is not allowed (allowed: RS256)" in message


# --- every bad token, each refused for its own reason


async def expired(idp: RunningIdp) -> tuple[str, str]:
    exp = int(time.time()) - 3600
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(exp))
    return await idp.forge(exp=exp), f"token expired at {iso}"


async def no_expiry(idp: RunningIdp) -> tuple[str, str]:
    return await idp.forge(exp=None), "token has no expiry time (exp)"


async def not_yet_valid(idp: RunningIdp) -> tuple[str, str]:
    nbf = int(time.time()) + 3600
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(nbf))
    return await idp.forge(nbf=nbf), f"token is not valid before {iso}"


async def wrong_issuer(idp: RunningIdp) -> tuple[str, str]:
    return await idp.forge(iss="https://evil.example"), f"token issued by https://evil.example, expected {idp.issuer}"


async def wrong_audience(idp: RunningIdp) -> tuple[str, str]:
    return await idp.forge(aud="other-api"), "token audience is other-api, expected jobdeck-api"


async def tampered_payload(idp: RunningIdp) -> tuple[str, str]:
    """A real IdP token whose payload is edited to claim admin: the signature no longer matches."""
    token = await idp.client_credentials_token("svc-operator")
    header, payload, signature = token.split(".")
    raw = unb64(payload)
    assert b'"operator"' in raw
    forged = raw.replace(b'"operator"', b'"admin"', 1)
    return f"{header}.{b64(forged)}.{signature}", "token signature does not verify"


async def flipped_byte(idp: RunningIdp) -> tuple[str, str]:
    token = await idp.client_credentials_token("svc-agent")
    header, payload, signature = token.split(".")
    raw = bytearray(unb64(payload))
    raw[raw.index(b'"sub":"svc-agent"') + 8] ^= 0x01  # one bit of the subject: svc-agent -> rvc-agent
    return f"{header}.{b64(bytes(raw))}.{signature}", "token signature does not verify"


async def alg_none(idp: RunningIdp) -> tuple[str, str]:
    kid = parts(await idp.client_credentials_token("svc-agent"))[0]["kid"]
    header = b64(json.dumps({"alg": "none", "typ": "JWT", "kid": kid}).encode())
    now = int(time.time())
    payload = {"iss": idp.issuer, "aud": idp.audience, "sub": "mallory", "roles": ["admin"], "exp": now + 300}
    return f"{header}.{b64(json.dumps(payload).encode())}.", 'token is unsigned (alg "none")'


async def hs256_with_public_key(idp: RunningIdp) -> tuple[str, str]:
    """The classic confusion: HMAC-sign with the issuer's public RSA key (which anyone can download) as secret."""
    kid = parts(await idp.client_credentials_token("svc-agent"))[0]["kid"]
    async with httpx.AsyncClient() as http:
        jwks = (await http.get(idp.issuer + "/jwks")).json()
    public = jwt.PyJWK(next(k for k in jwks["keys"] if k["kid"] == kid)).key
    secret = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    now = int(time.time())
    payload = {"iss": idp.issuer, "aud": idp.audience, "sub": "mallory", "roles": ["admin"], "exp": now + 300}
    signing_input = f"{b64(json.dumps({'alg': 'HS256', 'kid': kid}).encode())}.{b64(json.dumps(payload).encode())}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}", "token is signed with HS256, a shared-secret (HMAC) algorithm"


async def unknown_kid(idp: RunningIdp) -> tuple[str, str]:
    token = await idp.forge(headers={"kid": "no-such-key"})
    return token, f"signing key no-such-key is not published by the issuer {idp.issuer}"


async def malformed(idp: RunningIdp) -> tuple[str, str]:
    return "not-a-jwt", "malformed token"


async def id_token_as_access_token(idp: RunningIdp) -> tuple[str, str]:
    """An ID token is a real IdP-signed JWT, but for the client, not for our API."""
    verifier, challenge = pkce_pair()
    provider = await discovered(idp)
    redirect = f"http://127.0.0.1:{free_port()}/callback"
    url = provider.authorization_url("jobdeck-cli", redirect, "s", challenge, "n", extra={"login_hint": "vic"})
    code = parse_qs(urlsplit(await idp.browser_sign_in(url, redirect)).query)["code"][0]
    tokens = await provider.exchange_code("jobdeck-cli", None, code, redirect, verifier)
    return tokens["id_token"], "token audience is jobdeck-cli, expected jobdeck-api"


BAD_TOKENS: dict[str, Callable[[RunningIdp], Awaitable[tuple[str, str]]]] = {
    f.__name__: f
    for f in (
        expired,
        no_expiry,
        not_yet_valid,
        wrong_issuer,
        wrong_audience,
        tampered_payload,
        flipped_byte,
        alg_none,
        hs256_with_public_key,
        unknown_kid,
        malformed,
        id_token_as_access_token,
    )
}


@pytest.mark.parametrize("case", list(BAD_TOKENS))
async def test_a_bad_token_is_refused_with_the_check_that_failed(idp: RunningIdp, case: str) -> None:
    provider = await discovered(idp)
    token, expected = await BAD_TOKENS[case](idp)
    message = await refused(provider, token)
    assert expected in message, f"expected {expected!r} in {message!r}"


async def test_the_hs256_attack_token_is_genuine(idp: RunningIdp) -> None:
    """Guard for the test above: a verifier that let the token pick HS256 would accept the forgery."""
    token, _ = await hs256_with_public_key(idp)
    kid = parts(token)[0]["kid"]
    async with httpx.AsyncClient() as http:
        jwks = (await http.get(idp.issuer + "/jwks")).json()
    public = jwt.PyJWK(next(k for k in jwks["keys"] if k["kid"] == kid)).key
    pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    signing_input, signature = token.rsplit(".", 1)
    assert hmac.compare_digest(unb64(signature), hmac.new(pem, signing_input.encode(), hashlib.sha256).digest())


# --- key rotation


async def test_key_rotation_refreshes_the_jwks_once(idp: RunningIdp) -> None:
    provider = await discovered(idp)
    old_token = await idp.client_credentials_token("svc-operator")
    await provider.verify(old_token)
    assert provider.jwks_fetches == 1

    new_kid = await idp.rotate_keys()
    new_token = await idp.client_credentials_token("svc-operator")
    assert parts(new_token)[0]["kid"] == new_kid
    assert (await provider.verify(new_token))["sub"] == "svc-operator"
    assert provider.jwks_fetches == 2, "an unknown kid refreshes the JWKS once"
    await provider.verify(old_token)  # the old key stays published after a rotation

    # Within the refresh interval, more unknown kids do not reach the IdP again.
    for n in range(5):
        message = await refused(provider, await idp.forge(headers={"kid": f"made-up-{n}"}))
        assert f"signing key made-up-{n} is not published" in message
    assert provider.jwks_fetches == 2


async def test_concurrent_verifies_share_one_refresh(idp: RunningIdp) -> None:
    provider = await discovered(idp)
    await idp.rotate_keys()
    tokens = [await idp.client_credentials_token("svc-agent") for _ in range(8)]
    results = await asyncio.gather(*(provider.verify(t) for t in tokens))
    assert [r["sub"] for r in results] == ["svc-agent"] * 8
    assert provider.jwks_fetches == 2, f"1 discovery + 1 shared refresh, got {provider.jwks_fetches} fetches"


async def test_the_id_token_after_rotation_is_signed_with_the_new_key(idp: RunningIdp) -> None:
    provider = await discovered(idp)
    new_kid = await idp.rotate_keys()
    claims, tokens = await sign_in(idp, provider, "jobdeck-cli", None, "alice")
    assert parts(tokens["id_token"])[0]["kid"] == new_kid
    assert parts(tokens["access_token"])[0]["kid"] == new_kid
    assert claims["sub"] == "alice"


# --- login flows


async def sign_in(
    idp: RunningIdp, provider: OidcProvider, client_id: str, secret: str | None, user: str, redirect: str = ""
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The whole code + PKCE flow; returns the verified ID token claims and the token response."""
    redirect = redirect or f"http://127.0.0.1:{free_port()}/callback"
    verifier, challenge = pkce_pair()
    state, nonce = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    url = provider.authorization_url(client_id, redirect, state, challenge, nonce, extra={"login_hint": user})
    callback = parse_qs(urlsplit(await idp.browser_sign_in(url, redirect)).query)
    assert callback["state"] == [state] and callback["iss"] == [idp.issuer], callback
    tokens = await provider.exchange_code(client_id, secret, callback["code"][0], redirect, verifier)
    return await provider.verify_id_token(tokens["id_token"], client_id, nonce), tokens


async def test_code_flow_with_pkce_for_the_cli_on_any_loopback_port(idp: RunningIdp) -> None:
    provider = await discovered(idp)
    claims, tokens = await sign_in(idp, provider, "jobdeck-cli", None, "alice")
    assert (claims["sub"], claims["roles"], claims["teams"]) == ("alice", ["admin"], ["ops"])
    assert claims["aud"] == "jobdeck-cli" and claims["email"] == "alice@example.test"
    access = await provider.verify(tokens["access_token"])
    assert (access["sub"], access["roles"], access["teams"]) == ("alice", ["admin"], ["ops"])

    refreshed = await provider.refresh("jobdeck-cli", None, tokens["refresh_token"])
    assert (await provider.verify(refreshed["access_token"]))["sub"] == "alice"


async def test_code_flow_for_the_confidential_web_client(idp: RunningIdp) -> None:
    provider = await discovered(idp)
    redirect = "http://127.0.0.1:8640/auth/callback"
    claims, tokens = await sign_in(idp, provider, "jobdeck-web", "jobdeck-web-secret", "olive", redirect)
    assert (claims["roles"], claims["teams"]) == (["operator"], ["payments"])
    assert (await provider.verify(tokens["access_token"]))["client_id"] == "jobdeck-web"
    refreshed = await provider.refresh("jobdeck-web", "jobdeck-web-secret", tokens["refresh_token"])
    assert (await provider.verify(refreshed["access_token"]))["sub"] == "olive"
    with pytest.raises(Unauthorized, match="the OIDC issuer refused the refresh token: invalid_client"):
        await provider.refresh("jobdeck-web", "wrong-secret", tokens["refresh_token"])


async def test_the_login_form_signs_in_without_a_login_hint(idp: RunningIdp) -> None:
    provider = await discovered(idp)
    verifier, challenge = pkce_pair()
    redirect = f"http://127.0.0.1:{free_port()}/callback"
    url = provider.authorization_url("jobdeck-cli", redirect, "st", challenge, "nn")
    code = parse_qs(urlsplit(await idp.browser_sign_in(url, redirect, user="nora")).query)["code"][0]
    tokens = await provider.exchange_code("jobdeck-cli", None, code, redirect, verifier)
    claims = await provider.verify_id_token(tokens["id_token"], "jobdeck-cli", "nn")
    assert (claims["sub"], claims["roles"], claims["teams"]) == ("nora", [], [])


async def test_a_wrong_code_verifier_or_nonce_is_refused(idp: RunningIdp) -> None:
    provider = await discovered(idp)
    _, challenge = pkce_pair()
    other_verifier, _ = pkce_pair()
    redirect = f"http://127.0.0.1:{free_port()}/callback"
    url = provider.authorization_url("jobdeck-cli", redirect, "s", challenge, "right", extra={"login_hint": "vic"})
    code = parse_qs(urlsplit(await idp.browser_sign_in(url, redirect)).query)["code"][0]
    with pytest.raises(Unauthorized, match="refused the authorization code: invalid_grant"):
        await provider.exchange_code("jobdeck-cli", None, code, redirect, other_verifier)

    _, tokens = await sign_in(idp, provider, "jobdeck-cli", None, "vic")
    with pytest.raises(Unauthorized, match="nonce does not match"):
        await provider.verify_id_token(tokens["id_token"], "jobdeck-cli", "another-login")
    with pytest.raises(Unauthorized, match="ID token audience is jobdeck-cli, expected jobdeck-web"):
        await provider.verify_id_token(tokens["id_token"], "jobdeck-web", "whatever")


async def test_device_flow_approved_through_the_idp_pages(idp: RunningIdp) -> None:
    provider = await discovered(idp)
    assert provider.device_authorization_endpoint
    async with httpx.AsyncClient(timeout=10) as http:
        start = await http.post(
            provider.device_authorization_endpoint, data={"client_id": "jobdeck-cli", "scope": "openid profile"}
        )
        device = start.json()
        grant = {"grant_type": "urn:ietf:params:oauth:grant-type:device_code", "device_code": device["device_code"]}
        pending = await http.post(provider.token_endpoint, data={**grant, "client_id": "jobdeck-cli"})
        assert pending.json()["error"] == "authorization_pending"
        await idp.approve_device(device["user_code"], "olive")
        tokens = (await http.post(provider.token_endpoint, data={**grant, "client_id": "jobdeck-cli"})).json()
    claims = await provider.verify(tokens["access_token"])
    assert (claims["sub"], claims["roles"], claims["teams"]) == ("olive", ["operator"], ["payments"])


# --- configuration and an issuer that fails


@pytest.mark.parametrize("algorithms", [("RS256", "HS256"), ("none",), ("HS512",), ("RS256", "NONE")])
def test_shared_secret_and_unsigned_algorithms_are_refused_at_construction(algorithms: tuple[str, ...]) -> None:
    with pytest.raises(InvalidInput) as caught:
        OidcProvider("https://idp.example", "jobdeck-api", algorithms=algorithms)
    assert caught.value.field == "oidc_algorithms" and "oidc_algorithms" in caught.value.message


def test_the_allow_list_may_be_a_comma_list_and_must_be_known() -> None:
    assert OidcProvider("https://idp.example", "api", algorithms="RS256, ES256").algorithms == ("RS256", "ES256")
    with pytest.raises(InvalidInput, match="unknown or empty"):
        OidcProvider("https://idp.example", "api", algorithms=("RS256", "XX999"))


def test_pkce_pair_is_s256() -> None:
    verifier, challenge = pkce_pair()
    assert 43 <= len(verifier) <= 128 and set(verifier) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
    )
    assert challenge == b64(hashlib.sha256(verifier.encode()).digest())
    assert pkce_pair()[0] != verifier


async def test_an_unreachable_issuer_is_unavailable_naming_it() -> None:
    issuer = f"http://127.0.0.1:{free_port()}"
    provider = OidcProvider(issuer, "jobdeck-api", http_timeout=2)
    with pytest.raises(Unavailable) as caught:
        await provider.discover()
    assert f"cannot reach the OIDC issuer {issuer}: " in caught.value.message
    assert "connection refused" in caught.value.message.lower(), caught.value.message
    with pytest.raises(Unavailable, match="cannot reach the OIDC issuer"):
        header = b64(json.dumps({"alg": "RS256", "kid": "k1"}).encode())
        await provider.verify(f"{header}.{b64(b'{}')}.c2ln")


async def test_an_issuer_answering_nonsense_is_unavailable(idp: RunningIdp) -> None:
    with pytest.raises(Unavailable, match="answered HTTP 404 for the discovery document"):
        await OidcProvider(idp.issuer + "/nothing-here", "jobdeck-api").discover()
    with pytest.raises(Unavailable, match=r"is for issuer http://127\.0\.0\.1:\d+, not http://127\.0\.0\.1:\d+/"):
        await OidcProvider(idp.issuer + "/", "jobdeck-api").discover()
