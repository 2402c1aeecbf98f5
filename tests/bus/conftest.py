"""Redis for the bus tests: the local one, started if need be, or a skip saying why."""

from __future__ import annotations

import pytest

from tests.services import REDIS_URL, redis_problem


@pytest.fixture(scope="session")
def redis_url() -> str:
    problem = redis_problem()
    if problem:
        pytest.skip(problem)
    return REDIS_URL
