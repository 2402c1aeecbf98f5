"""Standard Webhooks signatures (https://www.standardwebhooks.com), for outgoing and incoming hooks.

The signed content is `{webhook-id}.{webhook-timestamp}.{body}`; the signature is
`v1,` + base64(HMAC-SHA256(key, content)), where the key is the base64 part of a `whsec_...`
secret. `webhook-signature` may list several space-separated signatures (during a key rotation);
one match is enough. A timestamp outside the tolerance is refused, so a captured request cannot
be replayed later (the receiver also keeps the ids it has seen).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

from core.errors import InvalidInput

PREFIX = "whsec_"
TOLERANCE = 300.0  # seconds a signed request's timestamp may be off (the spec's suggestion: 5 minutes)


def new_secret() -> str:
    """A fresh signing secret: whsec_ and 32 random bytes in base64."""
    return PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def secret_key(secret: str, field: str = "secret") -> bytes:
    """The HMAC key of a `whsec_...` secret (InvalidInput naming `field` if it is not one)."""
    raw = secret.removeprefix(PREFIX)
    try:
        key = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if not secret.startswith(PREFIX) or not 24 <= len(key) <= 64:
        raise InvalidInput(
            f"{field}: a signing secret is 'whsec_' followed by 24 to 64 random bytes in base64 "
            "(leave it out and JobDeck makes one)",
            field=field,
        )
    return key


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header value for one message."""
    mac = hmac.new(key, b"%s.%d.%s" % (msg_id.encode(), timestamp, body), hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def headers(key: bytes, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers of a message."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(key, msg_id, timestamp, body),
    }


def verify(key: bytes, msg_id: str, timestamp: str, signature: str, body: bytes, now: float,
           tolerance: float = TOLERANCE) -> str | None:  # fmt: skip
    """Why a signed message is refused (None: it is genuine and fresh)."""
    if not msg_id or not timestamp or not signature:
        return "webhook-id, webhook-timestamp and webhook-signature headers are required"
    try:
        ts = int(timestamp)
    except ValueError:
        return "webhook-timestamp must be whole Unix seconds"
    if abs(now - ts) > tolerance:
        return f"webhook-timestamp is {now - ts:+.0f} s away from now (at most {tolerance:.0f} s): a replay, or a clock to fix"
    expected = sign(key, msg_id, ts, body)
    for given in signature.split():
        if hmac.compare_digest(given.encode(), expected.encode()):
            return None
    return "webhook-signature does not match the body (v1: base64 HMAC-SHA256 of id.timestamp.body)"
