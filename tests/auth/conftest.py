"""The `idp` fixture: one real OpenID provider (tests/auth/idp/server.mjs) for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.auth.oidc_idp import IdpUnavailable, RunningIdp, start_idp


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
