"""OpenID Connect: the issuer's discovery document and keys, checking its JWTs, and the login-flow calls.

`OidcProvider.verify` is on the hot path of every signed-in request: it needs the network only for
discovery and when a token names a key it has not seen (key rotation), at most once per
`jwks_refresh_interval`, shared by concurrent callers.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import jwt

from core.errors import InvalidInput, Unauthorized, Unavailable

DEFAULT_ALGORITHMS = ("RS256", "ES256", "PS256", "EdDSA")
LEEWAY_SECONDS = 30.0  # clock skew tolerated on exp and nbf
JWKS_REFRESH_INTERVAL = 10.0  # at most one JWKS refresh (for an unknown kid) this often
_PUBLIC_KEY_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)


def pkce_pair() -> tuple[str, str]:
    """A fresh PKCE code verifier and its S256 challenge (RFC 7636)."""
    verifier = secrets.token_urlsafe(48)  # 64 characters of [A-Za-z0-9_-]
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _shown(value: object, limit: int = 80) -> str:
    """An untrusted header or claim value, safe to put in a message (no control characters, bounded)."""
    text = value if isinstance(value, str) else repr(value)
    text = re.sub(r"[^\x20-\x7e]", "?", text)
    return text if len(text) <= limit else text[:limit] + "..."


def _network_reason(exc: httpx.HTTPError) -> str:
    """Why a request failed, in a few words: the innermost OS error of the chain (anyio hides it)."""
    if isinstance(exc, httpx.TimeoutException):
        return "no answer in time"
    reason = str(exc)
    cause: BaseException | None = exc
    for _ in range(10):  # a bounded walk: exception chains can loop
        if cause is None:
            break
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, OSError) and cause.strerror:
            reason = cause.strerror
        cause = cause.__cause__ or cause.__context__
    reason = re.sub(r"^\[Errno -?\d+\]\s*", "", reason).strip() or type(exc).__name__
    return reason[0].lower() + reason[1:]


class OidcProvider:
    """One OpenID Connect issuer: checks its access and ID tokens and speaks its token endpoint."""

    def __init__(
        self,
        issuer: str,
        audience: str,
        *,
        algorithms: Sequence[str] = DEFAULT_ALGORITHMS,
        http_timeout: float = 5.0,
        leeway: float = LEEWAY_SECONDS,
        jwks_refresh_interval: float = JWKS_REFRESH_INTERVAL,
    ) -> None:
        if isinstance(algorithms, str):  # as a setting reads from the environment: "RS256,ES256"
            algorithms = [a.strip() for a in algorithms.split(",") if a.strip()]
        refused = [a for a in algorithms if a.lower() == "none" or a.upper().startswith("HS")]
        if refused:
            raise InvalidInput(
                f"oidc_algorithms must not contain {', '.join(refused)}: only the issuer's public-key signatures "
                "are accepted (a shared-secret or unsigned token could be made by anyone holding the public key)",
                field="oidc_algorithms",
            )
        unknown = [a for a in algorithms if a not in _PUBLIC_KEY_ALGORITHMS]
        if unknown or not algorithms:
            raise InvalidInput(
                f"oidc_algorithms: unknown or empty ({', '.join(unknown) or 'nothing given'}); "
                f"choose from {', '.join(sorted(_PUBLIC_KEY_ALGORITHMS))}",
                field="oidc_algorithms",
            )
        self.issuer = issuer
        self.audience = audience
        self.algorithms = tuple(algorithms)
        self.http_timeout = http_timeout
        self.leeway = leeway
        self.jwks_refresh_interval = jwks_refresh_interval
        self.metadata: dict[str, Any] = {}
        self.authorization_endpoint = ""
        self.token_endpoint = ""
        self.jwks_uri = ""
        self.device_authorization_endpoint: str | None = None
        self.end_session_endpoint: str | None = None
        self.jwks_fetches = 0  # how many times the JWKS was downloaded (for tests and metrics)
        self._keys: dict[str, dict[str, Any]] = {}  # kid -> JWK
        self._unnamed_keys: list[dict[str, Any]] = []  # JWKs without a kid
        self._loaded: dict[tuple[str, str], jwt.PyJWK] = {}  # (kid, alg) -> key object
        self._last_refresh: float | None = None
        self._discovery_lock = asyncio.Lock()
        self._jwks_lock = asyncio.Lock()

    # --- discovery and keys

    async def discover(self) -> dict[str, Any]:
        """Fetch the discovery document and the JWKS; returns the metadata. Unavailable if the issuer fails."""
        url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        metadata = await self._get_json(url, "the discovery document")
        if not isinstance(metadata, dict):
            raise Unavailable(f"the OIDC issuer {self.issuer} answered {url} with JSON that is not an object")
        if metadata.get("issuer") != self.issuer:
            raise Unavailable(
                f"the discovery document at {url} is for issuer {_shown(metadata.get('issuer'))}, not {self.issuer} "
                "(the issuer setting must match the IdP's issuer exactly, including any trailing slash)"
            )
        missing = [k for k in ("authorization_endpoint", "token_endpoint", "jwks_uri") if not metadata.get(k)]
        if missing:
            raise Unavailable(f"the discovery document of the OIDC issuer {self.issuer} has no {', '.join(missing)}")
        self.metadata = metadata
        self.authorization_endpoint = str(metadata["authorization_endpoint"])
        self.token_endpoint = str(metadata["token_endpoint"])
        self.jwks_uri = str(metadata["jwks_uri"])
        self.device_authorization_endpoint = metadata.get("device_authorization_endpoint")
        self.end_session_endpoint = metadata.get("end_session_endpoint")
        await self._fetch_jwks()
        return metadata

    async def _ensure_discovered(self) -> None:
        if self.jwks_uri:
            return
        async with self._discovery_lock:
            if not self.jwks_uri:
                await self.discover()

    async def _get_json(self, url: str, what: str) -> Any:
        try:
            async with httpx.AsyncClient(timeout=self.http_timeout) as http:
                resp = await http.get(url, headers={"accept": "application/json"})
        except httpx.HTTPError as exc:
            raise Unavailable(
                f"cannot reach the OIDC issuer {self.issuer}: {_network_reason(exc)} (fetching {what} from {url})"
            ) from None
        if resp.status_code != 200:
            raise Unavailable(f"the OIDC issuer {self.issuer} answered HTTP {resp.status_code} for {what} at {url}")
        try:
            return resp.json()
        except ValueError:
            raise Unavailable(
                f"the OIDC issuer {self.issuer} answered {what} at {url} with something not JSON"
            ) from None

    async def _fetch_jwks(self) -> None:
        jwks = await self._get_json(self.jwks_uri, "its signing keys (JWKS)")
        keys = jwks.get("keys") if isinstance(jwks, dict) else None
        if not isinstance(keys, list):
            raise Unavailable(f"the JWKS of the OIDC issuer {self.issuer} at {self.jwks_uri} has no list of keys")
        self.jwks_fetches += 1
        signing = [k for k in keys if isinstance(k, dict) and k.get("use", "sig") == "sig"]
        self._keys = {k["kid"]: k for k in signing if isinstance(k.get("kid"), str)}
        self._unnamed_keys = [k for k in signing if not isinstance(k.get("kid"), str)]
        self._loaded = {}

    def _find_key(self, kid: str | None, alg: str) -> dict[str, Any] | None:
        if kid is not None:
            return self._keys.get(kid)
        # No kid in the token: acceptable only when the issuer publishes exactly one key for that algorithm.
        fits = [k for k in [*self._keys.values(), *self._unnamed_keys] if k.get("alg") in (None, alg)]
        return fits[0] if len(fits) == 1 else None

    async def _refresh_for(self, kid: str | None, alg: str) -> None:
        """Download the JWKS again (key rotation), unless another caller just did or did recently."""
        async with self._jwks_lock:
            if self._find_key(kid, alg) is not None:
                return
            now = time.monotonic()
            if self._last_refresh is not None and now - self._last_refresh < self.jwks_refresh_interval:
                return
            self._last_refresh = now
            await self._fetch_jwks()

    async def _signing_key(self, kid: str | None, alg: str) -> jwt.PyJWK:
        await self._ensure_discovered()
        jwk = self._find_key(kid, alg)
        if jwk is None:
            await self._refresh_for(kid, alg)
            jwk = self._find_key(kid, alg)
        if jwk is None:
            if kid is None:
                raise Unauthorized(f"token names no signing key (kid) and the issuer publishes no single {alg} key")
            raise Unauthorized(f"signing key {_shown(kid)} is not published by the issuer {self.issuer}")
        name = kid or ""
        if jwk.get("alg") not in (None, alg):
            raise Unauthorized(f"signing key {_shown(name)} is for {_shown(jwk['alg'])}, but the token says {alg}")
        loaded = self._loaded.get((name, alg))
        if loaded is None:
            try:
                loaded = jwt.PyJWK(jwk, algorithm=alg)
            except jwt.PyJWTError:
                raise Unauthorized(
                    f"signing key {_shown(name)} ({_shown(jwk.get('kty'))}) cannot check {alg} signatures"
                ) from None
            self._loaded[(name, alg)] = loaded
        return loaded

    # --- checking tokens

    async def verify(self, token: str) -> dict[str, Any]:
        """The claims of an access token for our API; Unauthorized naming the failed check otherwise."""
        return await self._verify(token, self.audience, "token")

    async def verify_id_token(self, id_token: str, client_id: str, nonce: str) -> dict[str, Any]:
        """The claims of an ID token from a login we started (audience `client_id`, our `nonce`)."""
        claims = await self._verify(id_token, client_id, "ID token")
        aud = claims.get("aud")
        if isinstance(aud, list) and len(aud) > 1 and claims.get("azp") != client_id:
            raise Unauthorized(f"ID token has several audiences and its azp is not {client_id}")
        if "nonce" not in claims:
            raise Unauthorized("ID token has no nonce, but this login sent one")
        if not isinstance(claims["nonce"], str) or not secrets.compare_digest(claims["nonce"], nonce):
            raise Unauthorized("ID token nonce does not match this login's (a replayed or foreign ID token)")
        return claims

    async def _verify(self, token: str, audience: str, what: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"malformed {what}: {_shown(exc)}") from None
        alg = self._check_algorithm(header.get("alg"), what)
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise Unauthorized(f"malformed {what}: its kid is not a string")
        key = await self._signing_key(kid, alg)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[alg],
                # The signature only: the claims are checked below, with messages that say which failed.
                options={
                    "verify_signature": True,
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                    "verify_iss": False,
                    "verify_aud": False,
                },
            )
        except jwt.InvalidSignatureError:
            raise Unauthorized(f"{what} signature does not verify with the issuer's key {_shown(kid)}") from None
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"malformed {what}: {_shown(exc)}") from None
        self._check_claims(claims, audience, what)
        return claims

    def _check_algorithm(self, alg: object, what: str) -> str:
        if not isinstance(alg, str):
            raise Unauthorized(f"malformed {what}: its header has no algorithm (alg)")
        if alg.lower() == "none":
            raise Unauthorized(f'{what} is unsigned (alg "none"); unsigned tokens are never accepted')
        if alg.upper().startswith("HS"):
            raise Unauthorized(
                f"{what} is signed with {_shown(alg)}, a shared-secret (HMAC) algorithm; only the issuer's "
                f"public-key signatures are accepted ({', '.join(self.algorithms)})"
            )
        if alg not in self.algorithms:
            raise Unauthorized(f"{what} algorithm {_shown(alg)} is not allowed (allowed: {', '.join(self.algorithms)})")
        return alg

    def _check_claims(self, claims: Mapping[str, Any], audience: str, what: str) -> None:
        iss = claims.get("iss")
        if iss != self.issuer:
            raise Unauthorized(f"{what} issued by {_shown(iss)}, expected {self.issuer}")
        aud = claims.get("aud")
        audiences = aud if isinstance(aud, list) else [aud]
        if audience not in audiences:
            raise Unauthorized(f"{what} audience is {_shown(aud)}, expected {audience}")
        now = time.time()
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise Unauthorized(f"{what} has no expiry time (exp)")
        if exp + self.leeway < now:
            raise Unauthorized(f"{what} expired at {_iso(exp)}")
        nbf = claims.get("nbf")
        if nbf is not None:
            if not isinstance(nbf, int | float) or isinstance(nbf, bool):
                raise Unauthorized(f"malformed {what}: nbf is not a time")
            if nbf - self.leeway > now:
                raise Unauthorized(f"{what} is not valid before {_iso(nbf)}")

    # --- login flows (authorization code + PKCE, refresh)

    def authorization_url(
        self,
        client_id: str,
        redirect_uri: str,
        state: str,
        code_challenge: str,
        nonce: str,
        scope: str = "openid profile email",
        extra: dict[str, str] | None = None,
    ) -> str:
        """Where to send the browser to sign in (authorization code flow, S256 PKCE). Needs `discover()`."""
        if not self.authorization_endpoint:
            raise RuntimeError("OidcProvider.discover() must run before authorization_url()")
        params = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": redirect_uri,
            "scope": scope,
            "state": state,
            "nonce": nonce,
            "code_challenge": code_challenge,
            "code_challenge_method": "S256",
            **(extra or {}),
        }
        separator = "&" if "?" in self.authorization_endpoint else "?"
        return self.authorization_endpoint + separator + urlencode(params)

    async def exchange_code(
        self, client_id: str, client_secret: str | None, code: str, redirect_uri: str, code_verifier: str
    ) -> dict[str, Any]:
        """Trade an authorization code for tokens; Unauthorized with the IdP's error if it refuses."""
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": code_verifier,
        }
        return await self._token_request(form, client_id, client_secret, "the authorization code")

    async def refresh(self, client_id: str, client_secret: str | None, refresh_token: str) -> dict[str, Any]:
        """New tokens for a refresh token; Unauthorized with the IdP's error if it refuses."""
        form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
        return await self._token_request(form, client_id, client_secret, "the refresh token")

    async def _token_request(
        self, form: dict[str, str], client_id: str, client_secret: str | None, what: str
    ) -> dict[str, Any]:
        await self._ensure_discovered()
        headers = {"accept": "application/json"}
        if client_secret is None:
            form = {**form, "client_id": client_id}  # a public client
        else:  # client_secret_basic: both parts form-encoded first (RFC 6749 §2.3.1)
            pair = f"{quote(client_id, safe='')}:{quote(client_secret, safe='')}".encode()
            headers["authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        try:
            async with httpx.AsyncClient(timeout=self.http_timeout) as http:
                resp = await http.post(self.token_endpoint, data=form, headers=headers)
        except httpx.HTTPError as exc:
            raise Unavailable(
                f"cannot reach the OIDC issuer {self.issuer}: {_network_reason(exc)} (token endpoint "
                f"{self.token_endpoint})"
            ) from None
        try:
            body = resp.json()
        except ValueError:
            body = None
        if resp.status_code == 200 and isinstance(body, dict) and body.get("access_token"):
            return body
        if resp.status_code in (400, 401) and isinstance(body, dict) and body.get("error"):
            description = f" ({_shown(body['error_description'], 200)})" if body.get("error_description") else ""
            raise Unauthorized(f"the OIDC issuer refused {what}: {_shown(body['error'])}{description}")
        raise Unavailable(
            f"the OIDC issuer {self.issuer} answered the token request with HTTP {resp.status_code} "
            "and no usable tokens"
        )
