"""The relay's lag where people look: the console's Queues view (its bar) and /v1/stats, with the
broker away and then back."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static

from core.client import JobDeckClient
from tests.conftest import spawn_jobdeck, until
from tests.console_tui.conftest import console, stop
from tests.kafka.broker import TansuBroker


async def test_the_console_queues_bar_shows_the_kafka_relay_behind_then_caught_up(tmp_path: Path) -> None:
    broker = TansuBroker()  # its port is chosen; nothing listens there yet
    env = {"JOBDECK_KAFKA_BOOTSTRAP": broker.bootstrap, "JOBDECK_RELAY_LEASE_SECONDS": "2"}
    node = spawn_jobdeck(tmp_path / "data", "up", "--slots", "2", env=env)
    try:
        async with JobDeckClient(node.url) as api, console(node.url) as (app, pilot):
            await api.submit({"task": {"kind": "shell", "command": "true"}, "queue": "kq"})
            await pilot.press("2")
            bar = app.main_screen.query_one("#queues #bar", Static)  # type: ignore[union-attr]

            def bar_says(words: str) -> bool:
                return words in str(bar.render())

            await until(lambda: bar_says("events (") and bar_says("behind"), 10, "'Kafka relay: N events behind'")
            with broker:
                await until(lambda: bar_says("Kafka relay: caught up"), 15, "'Kafka relay: caught up' on the bar")
        assert node.output().count("cannot reach the kafka sink") == 1, node.output()
    finally:
        stop(node)
