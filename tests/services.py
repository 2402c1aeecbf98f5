"""PostgreSQL and Redis for the tests: the ones already running on 127.0.0.1 if there are any,
otherwise started from the installed binaries; if neither works, the tests that need them skip
with the reason. Override the addresses with JOBDECK_TEST_POSTGRES_URL / JOBDECK_TEST_REDIS_URL."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

T = TypeVar("T")

POSTGRES_URL = os.environ.get("JOBDECK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("JOBDECK_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _port_open(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or default_port), timeout=1):
            return True
    except OSError:
        return False


def _wait_for(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def _run_quietly(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{' '.join(cmd)}: {exc}"
    return None if out.returncode == 0 else f"{' '.join(cmd)} exited {out.returncode}: {out.stderr.strip()[:200]}"


async def execute(url: str, *statements: str) -> None:
    """Run statements on a fresh connection to `url`."""
    import asyncpg

    conn = await asyncpg.connect(url, timeout=10)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def _pg_ping(url: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url, timeout=5)
    await conn.close()


@cache
def postgres_problem() -> str | None:
    """None if PostgreSQL answers at POSTGRES_URL (starting the local cluster if needed), else why not."""
    try:
        import asyncpg  # noqa: F401
    except ImportError:
        return "asyncpg is not installed"
    if not _port_open(POSTGRES_URL, 5432):
        clusters = Path("/etc/postgresql")
        if shutil.which("pg_ctlcluster") and clusters.is_dir():
            for version in sorted(p.name for p in clusters.iterdir()):
                _run_quietly(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"])
        if not _wait_for(lambda: _port_open(POSTGRES_URL, 5432), 15):
            return (
                f"PostgreSQL is not running at {POSTGRES_URL} and could not be started "
                "(install it: apt-get install -y postgresql)"
            )
    try:
        run_sync(_pg_ping(POSTGRES_URL))
    except Exception as exc:
        return f"cannot connect to PostgreSQL at {POSTGRES_URL}: {exc}"
    return None


def run_sync(coro: Awaitable[T]) -> T:
    """Run a coroutine to completion on a fresh loop in another thread (callable from inside a loop)."""

    async def main() -> T:
        return await coro

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result()


def with_database(url: str, database: str, **query: str) -> str:
    """`url` pointing at another database, with extra query parameters (server settings)."""
    parts = urlsplit(url)
    q = "&".join(f"{k}={v}" for k, v in query.items())
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, q, ""))


async def create_database() -> tuple[str, Callable[[], Awaitable[None]]]:
    """A throw-away database; returns its URL and a coroutine function that drops it."""
    import asyncpg

    name = f"jobdeck_test_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(POSTGRES_URL)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()

    async def drop() -> None:
        conn = await asyncpg.connect(POSTGRES_URL)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    return with_database(POSTGRES_URL, name), drop


@cache
def redis_problem() -> str | None:
    """None if Redis answers at REDIS_URL (starting a throw-away server if needed), else why not."""
    try:
        import redis  # noqa: F401
    except ImportError:
        return "redis (redis-py) is not installed"
    if _port_open(REDIS_URL, 6379):
        return _redis_ping()
    parts = urlsplit(REDIS_URL)
    if parts.hostname not in ("127.0.0.1", "localhost") or not shutil.which("redis-server"):
        return f"Redis is not running at {REDIS_URL} (install it: apt-get install -y redis-server)"
    port = str(parts.port or 6379)
    cmd = [
        "redis-server",
        "--daemonize",
        "yes",
        "--bind",
        "127.0.0.1",
        "--port",
        port,
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    problem = _run_quietly(cmd)
    if problem or not _wait_for(lambda: _port_open(REDIS_URL, 6379), 10):
        return f"Redis is not running at {REDIS_URL} and could not be started: {problem or 'no answer'}"
    return _redis_ping()


def _redis_ping() -> str | None:
    import redis

    try:
        with redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=2) as client:
            client.ping()
    except redis.RedisError as exc:
        return f"cannot talk to Redis at {REDIS_URL}: {exc}"
    return None
