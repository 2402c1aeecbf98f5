"""Sign-in from the terminal: `jobdeck login`, `logout`, `whoami`, `token new`, and the audit log.

`login` asks the server how it signs people in (/auth/config) and takes the first way that
works: the device authorization grant when the IdP offers it (a code to enter in any
browser), else the authorization code flow with PKCE through a loopback redirect (a browser
on this machine), else a pasted token. The token is cached for the server (mode 0600) and
refreshed by `core.auth.credentials.token_for`.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import secrets
import sys
import time
import webbrowser
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from core.auth import credentials
from core.auth.tokens import new_token, token_hash
from core.cli.output import show, table
from core.client import JobDeckClient
from core.errors import JobDeckError, Unauthorized

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
AUDIT_COLUMNS = (("id", 6), ("at", 19), ("actor", 14), ("role", 8), ("action", 18), ("target", 16),
                 ("outcome", 8), ("message", 40))  # fmt: skip


def cmd_token_new(args: argparse.Namespace) -> int:
    """Make a static token: print it once, and the config entry that holds only its hash."""
    token = new_token()
    entry: dict[str, Any] = {"name": args.name, "sha256": token_hash(token), "role": args.role}
    if args.teams:
        entry["teams"] = [t for t in args.teams.split(",") if t]
    if args.queues:
        entry["queues"] = [q for q in args.queues.split(",") if q]
    if args.json:
        show(args, {"token": token, "entry": entry}, str)
        return 0

    def toml(v: Any) -> str:
        return "[" + ", ".join(f'"{x}"' for x in v) + "]" if isinstance(v, list) else f'"{v}"'

    print(f"token (shown once; give it to {args.name} and keep it secret):\n  {token}\n")
    print("add this to the server's config file (JOBDECK_CONFIG); it holds only the token's hash:\n")
    print("[[tokens]]")
    for k, v in entry.items():
        print(f"{k} = {toml(v)}")
    return 0


async def _device_flow(http: httpx.AsyncClient, cfg: dict[str, Any]) -> dict[str, Any]:
    resp = await http.post(cfg["device_authorization_endpoint"],
                           data={"client_id": cfg["cli_client_id"], "scope": cfg["scopes"]})  # fmt: skip
    if resp.status_code != 200:
        raise Unauthorized(f"the identity provider refused the device sign-in: {resp.text[:200]}")
    d = resp.json()
    print(f"To sign in, open {d.get('verification_uri_complete') or d['verification_uri']}", file=sys.stderr)
    print(f"and enter the code {d['user_code']} (waiting for you ...)", file=sys.stderr, flush=True)
    interval = float(d.get("interval", 5))
    deadline = time.monotonic() + float(d.get("expires_in", 600))
    while time.monotonic() < deadline:
        await asyncio.sleep(interval)
        form = {"grant_type": DEVICE_GRANT, "device_code": d["device_code"], "client_id": cfg["cli_client_id"]}
        tok = await http.post(cfg["token_endpoint"], data=form)
        body = tok.json()
        if tok.status_code == 200:
            return dict(body)
        if body.get("error") == "slow_down":
            interval += 5
        elif body.get("error") != "authorization_pending":
            raise Unauthorized(f"the device sign-in failed: {body.get('error_description') or body.get('error')}")
    raise Unauthorized("the device sign-in code expired before it was used: run `jobdeck login` again")


async def _loopback_flow(cfg: dict[str, Any], open_browser: bool) -> dict[str, Any]:
    from core.auth.oidc import OidcProvider, pkce_pair

    idp = OidcProvider(cfg["issuer"], cfg["audience"])
    await idp.discover()
    verifier, challenge = pkce_pair()
    state = secrets.token_urlsafe(16)
    got: asyncio.Future[dict[str, list[str]]] = asyncio.get_running_loop().create_future()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = (await reader.readline()).decode(errors="replace")
        query = parse_qs(urlsplit(line.split(" ")[1] if " " in line else "/").query)
        page = "Signed in to JobDeck: you can close this tab." if "code" in query else "Sign-in failed."
        writer.write(
            f"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {len(page)}\r\n\r\n{page}".encode()
        )
        await writer.drain()
        writer.close()
        if not got.done() and ("code" in query or "error" in query):
            got.set_result(query)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    redirect = f"http://127.0.0.1:{port}/callback"
    url = idp.authorization_url(cfg["cli_client_id"], redirect, state, challenge, secrets.token_urlsafe(16),
                                scope=cfg["scopes"])  # fmt: skip
    print(f"To sign in, open this in a browser on this machine:\n  {url}", file=sys.stderr, flush=True)
    if open_browser:
        webbrowser.open(url)
    async with server:
        query = await asyncio.wait_for(got, 600)
    if "error" in query or query.get("state", [""])[0] != state:
        raise Unauthorized(
            f"the browser sign-in failed: {query.get('error_description', query.get('error', ['state mismatch']))[0]}"
        )
    return await idp.exchange_code(cfg["cli_client_id"], None, query["code"][0], redirect, verifier)


async def login(args: argparse.Namespace) -> int:
    """`jobdeck login`: sign in to --server and cache the token."""
    async with JobDeckClient(args.server, ca_file=args.ca_file) as anonymous:
        cfg = await anonymous.auth_config()
    if cfg["auth"] == "none":
        print(f"{args.server} runs without sign-in (auth = none): nothing to do")
        return 0
    method = args.method
    if args.token:
        method = "paste"
    elif method == "auto":
        if cfg["auth"] != "oidc" or not cfg.get("cli_client_id"):
            method = "paste"
        elif cfg.get("device_authorization_endpoint"):
            method = "device"
        else:
            method = "browser"
    entry: dict[str, Any]
    if method == "paste":
        token = args.token or getpass.getpass("paste a token (it is not shown): ").strip()
        entry = {"access_token": token}
    else:
        async with httpx.AsyncClient(timeout=15) as http:
            tokens = await (_device_flow(http, cfg) if method == "device" else _loopback_flow(cfg, not args.no_browser))
        entry = {"access_token": tokens["access_token"], "refresh_token": tokens.get("refresh_token"),
                 "expires_at": time.time() + float(tokens.get("expires_in", 300)),
                 "token_endpoint": cfg["token_endpoint"], "client_id": cfg["cli_client_id"]}  # fmt: skip
    async with JobDeckClient(args.server, token=entry["access_token"], ca_file=args.ca_file) as c:
        me = await c.me()  # a token the server refuses is not cached
    path = credentials.save(args.server, entry)
    print(f"signed in to {credentials.server_key(args.server)} as {me['name']} ({me['role']}); token cached in {path}")
    return 0


def cmd_logout(args: argparse.Namespace) -> int:
    """Forget the cached token for --server."""
    had = credentials.forget(args.server)
    print(f"signed out of {credentials.server_key(args.server)}" if had else "no cached sign-in for that server")
    return 0


async def cmd_whoami(c: JobDeckClient, args: argparse.Namespace) -> int:
    me = await c.me()
    show(args, me, lambda m: f"{m['name']} ({m['role']}, signed in by {m['auth']}); teams: {', '.join(m['teams']) or '-'}; "
         f"queues: {', '.join(m['queues']) or '-'}")  # fmt: skip
    return 0


async def cmd_audit(c: JobDeckClient, args: argparse.Namespace) -> int:
    page = await c.audit(actor=args.actor, action=args.action, target=args.target, outcome=args.outcome,
                         since=args.since, limit=args.limit)  # fmt: skip
    show(args, page, lambda p: table(p["entries"], AUDIT_COLUMNS))
    return 0


def run_login(args: argparse.Namespace) -> int:
    """The entry of `jobdeck login` (sync, like the other commands)."""
    from core.cli.nodes import run_async

    try:
        return int(run_async(login(args)))
    except TimeoutError:
        raise JobDeckError("no sign-in arrived within 10 minutes: run `jobdeck login` again") from None
