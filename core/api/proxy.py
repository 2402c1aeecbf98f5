"""Who is calling: the socket peer, or, when the peer is a trusted proxy, the client it forwarded.

Only the addresses in `trusted_proxies` may say who the client is (anyone can send an
`X-Forwarded-For` header). The client is the right-most address of the chain that is not
itself a trusted proxy, as nginx's `real_ip_recursive on` picks it: each proxy appends the
address it saw, so everything left of the last untrusted hop could have been made up by the
client. The middleware rewrites the ASGI scope's `client` (and the scheme from
`X-Forwarded-Proto`) before anything reads it, so the audit log, the rate limiter and every
other reader of `request.client` see the same caller.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from core.config import parse_networks

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
FORWARDED_BY = "jobdeck.forwarded_by"  # scope key: the trusted proxy that named the client (absent if none)


def _address(text: str) -> Address | None:
    text = text.strip()
    if text.startswith("["):  # "[2001:db8::1]:8080"
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:  # "203.0.113.7:51234"
        text = text.partition(":")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


class TrustedProxies:
    """The proxies whose `X-Forwarded-For` is believed."""

    def __init__(self, entries: Sequence[str]) -> None:
        self.networks = parse_networks(entries)

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trusts(self, address: Address | None) -> bool:
        """Whether `address` is one of the trusted proxies."""
        return address is not None and any(address in n for n in self.networks)

    def client_of(self, peer: str, forwarded_for: str) -> str:
        """The caller's address: `peer` itself unless it is trusted, else the right-most address of
        `forwarded_for` that is not trusted (the left-most if all are; the last good one before
        an entry that is not an address)."""
        found = _address(peer)
        if not self.trusts(found):
            return peer
        client = peer
        for hop in reversed(forwarded_for.split(",")):
            address = _address(hop)
            if address is None:
                break  # garbage from the hop we trust: keep the address that hop came from
            client = str(address)
            if not self.trusts(address):
                break
        return client


class ProxyHeaders:
    """ASGI middleware: a trusted proxy's `X-Forwarded-For` / `X-Forwarded-Proto` become the scope's
    client and scheme; from anyone else those headers are ignored."""

    def __init__(self, app: ASGIApp, proxies: TrustedProxies) -> None:
        self.app = app
        self.proxies = proxies

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        if scope["type"] in ("http", "websocket") and self.proxies and client:
            forwarded: list[bytes] = []
            proto = b""
            for name, value in scope.get("headers", ()):
                if name == b"x-forwarded-for":
                    forwarded.append(value)
                elif name == b"x-forwarded-proto":
                    proto = value
            peer = str(client[0])
            if (forwarded or proto) and self.proxies.trusts(_address(peer)):
                scope = dict(scope)
                if forwarded:
                    text = b",".join(forwarded).decode("latin-1")
                    scope["client"] = (self.proxies.client_of(peer, text), 0)
                    scope[FORWARDED_BY] = peer
                scheme = proto.decode("latin-1").rsplit(",", 1)[-1].strip().lower()
                if scheme in ("http", "https"):
                    secure = scheme == "https"
                    scope["scheme"] = ("wss" if secure else "ws") if scope["type"] == "websocket" else scheme
        await self.app(scope, receive, send)


def caller_ip(scope: Scope) -> str | None:
    """The caller's address as the middleware left it."""
    client = scope.get("client")
    return str(client[0]) if client else None


def is_local_caller(scope: Scope) -> bool:
    """A process on this machine talking to the node directly (not forwarded by a proxy)."""
    return FORWARDED_BY not in scope and _is_loopback(caller_ip(scope) or "")


@functools.lru_cache(maxsize=1024)
def _is_loopback(peer: str) -> bool:
    """Whether `peer` is a loopback address (parsed once per address: every request asks)."""
    address = _address(peer)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address is not None and address.is_loopback
