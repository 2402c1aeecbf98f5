"""The user's cached sign-in: one token per server in the config directory, mode 0600.

`jobdeck login` writes it; the CLI, the console and the web UI read it with `token_for`,
which refreshes an access token that is about to expire (when the IdP gave a refresh token).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

REFRESH_MARGIN = 60.0  # seconds: refresh a token that expires sooner than this


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`$JOBDECK_CONFIG_DIR`, else `$XDG_CONFIG_HOME/jobdeck`, else `~/.config/jobdeck`."""
    env = os.environ if environ is None else environ
    if env.get("JOBDECK_CONFIG_DIR"):
        return Path(env["JOBDECK_CONFIG_DIR"])
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "jobdeck"


def credentials_path(environ: Mapping[str, str] | None = None) -> Path:
    """The file holding every cached sign-in."""
    return config_dir(environ) / "credentials.json"


def server_key(server: str) -> str:
    """The cache key of a server URL (scheme and host, no trailing slash or /v1)."""
    server = server.strip().rstrip("/").removesuffix("/v1")
    return server if "://" in server else "http://" + server


def _read_all(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load(server: str, environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The cached sign-in for `server`, or None."""
    entry = _read_all(credentials_path(environ)).get(server_key(server))
    return entry if isinstance(entry, dict) else None


def save(server: str, entry: dict[str, Any], environ: Mapping[str, str] | None = None) -> Path:
    """Cache a sign-in for `server` (the file is created with mode 0600, written atomically)."""
    path = credentials_path(environ)
    data = _read_all(path)
    data[server_key(server)] = entry
    _write_all(path, data)
    return path


def _write_all(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def forget(server: str, environ: Mapping[str, str] | None = None) -> bool:
    """Remove the cached sign-in for `server`; True if there was one."""
    path = credentials_path(environ)
    data = _read_all(path)
    if data.pop(server_key(server), None) is None:
        return False
    with contextlib.suppress(OSError):
        _write_all(path, data)
    return True


async def _refresh(server: str, entry: dict[str, Any], environ: Mapping[str, str] | None) -> dict[str, Any] | None:
    form = {"grant_type": "refresh_token", "refresh_token": entry["refresh_token"], "client_id": entry["client_id"]}
    try:
        async with httpx.AsyncClient(timeout=10.0) as http:
            resp = await http.post(entry["token_endpoint"], data=form)
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    tokens = resp.json()
    entry = dict(
        entry, access_token=tokens["access_token"], expires_at=time.time() + float(tokens.get("expires_in", 300))
    )
    if tokens.get("refresh_token"):
        entry["refresh_token"] = tokens["refresh_token"]
    save(server, entry, environ)
    return entry


async def token_for(server: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The token to send to `server`: `$JOBDECK_TOKEN`, else the cached one (refreshed when it is
    about to expire), else None (the server may run without sign-in)."""
    env = os.environ if environ is None else environ
    if env.get("JOBDECK_TOKEN"):
        return env["JOBDECK_TOKEN"]
    entry = load(server, environ)
    if entry is None or not entry.get("access_token"):
        return None
    expires_at = float(entry.get("expires_at") or 0)
    if expires_at and expires_at - time.time() < REFRESH_MARGIN and entry.get("refresh_token"):
        entry = await _refresh(server, entry, environ) or entry
    return str(entry["access_token"])
