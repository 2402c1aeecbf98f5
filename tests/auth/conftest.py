"""The `idp` fixture: one real OpenID provider (tests/auth/idp/server.mjs) for the whole test session."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.auth.oidc_idp import IdpUnavailable, RunningIdp, start_idp
from tests.auth.principals import Deck, auth_settings
from tests.conftest import start_node, stop_node


@pytest.fixture(scope="session")
def idp() -> Iterator[RunningIdp]:
    """oidc-provider on a free loopback port; skips the test if node/npm are missing or the install fails."""
    try:
        running = start_idp()
    except IdpUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
async def deck(tmp_path: Path) -> AsyncIterator[Deck]:
    node, url, task = await start_node(auth_settings(tmp_path, rate_limit_per_second=0), local_agent=False)
    try:
        yield Deck(url, node)
    finally:
        await stop_node(node, task)
