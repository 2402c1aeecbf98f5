"""The Kafka sink of the outbox relay (aiokafka), and the client options every Kafka client shares.

Each round of the relay becomes exactly one record batch per partition, sent together and
acknowledged by the broker (acks=all) before the cursor moves. So a failure repeats a whole
round, and a job's events — one key, one partition — can repeat but never overtake each other:
a consumer that drops an event whose seq it has seen for the key gets every event once, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.helpers import create_ssl_context

from core.config import Settings
from core.errors import InvalidInput
from core.relay.kafka_records import Record, Topics, audit_event, audit_records_of, partition_of, records_of
from core.relay.relay import SinkUnavailable
from core.store.base import Event

log = logging.getLogger("jobdeck.relay")

# A partition's batch in one round: under a broker's default message.max.bytes (1 MB), with room
# for the batch's own overhead. A round ends at the first event that would overflow a batch.
BATCH_BYTES = 900_000
MAX_BATCH_BYTES = 1_000_000
REQUEST_TIMEOUT_MS = 10_000  # how long a send waits for the broker before the round is tried again
CLOSE_TIMEOUT = 10.0
_SSL_FILES = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password")
_ROLES = ("producer", "consumer")


def client_options(settings: Settings, role: str) -> dict[str, Any]:
    """aiokafka keyword arguments for a `role` ("producer" / "consumer") client: the bootstrap
    servers, then `kafka_options` (shared keys, then the role's own {"producer": {...}}), with
    ssl_cafile / ssl_certfile / ssl_keyfile turned into an SSL context."""
    raw = settings.kafka_options
    opts: dict[str, Any] = {k: v for k, v in raw.items() if k not in _ROLES}
    role_opts = raw.get(role) or {}
    if not isinstance(role_opts, dict):
        raise InvalidInput(f"kafka_options.{role} must be a table of aiokafka options", field="kafka_options")
    opts.update(role_opts)
    files = {k.removeprefix("ssl_"): opts.pop(k) for k in _SSL_FILES if k in opts}
    if files:
        files["password"] = files.pop("password", None)
        opts["ssl_context"] = create_ssl_context(**files)
        opts.setdefault("security_protocol", "SSL")
    opts.setdefault("client_id", "jobdeck")
    opts.setdefault("request_timeout_ms", REQUEST_TIMEOUT_MS)
    return {"bootstrap_servers": settings.kafka_bootstrap, **opts}


def check_options(settings: Settings) -> None:
    """Refuse (when the node starts) kafka_options that aiokafka's clients do not take, and keep
    aiokafka's own logging to what matters: it logs every failed connection attempt as an error,
    several a second during an outage, while the relay and the consumer say it once with the reason."""
    from aiokafka import AIOKafkaConsumer

    for role, cls in (("producer", AIOKafkaProducer), ("consumer", AIOKafkaConsumer)):
        known = set(inspect.signature(cls).parameters)
        unknown = sorted(set(client_options(settings, role)) - known)
        if unknown:
            raise InvalidInput(f"kafka_options: aiokafka's {role} has no option {unknown[0]!r}", field="kafka_options")
    if settings.log_level.lower() != "debug":
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def make_producer(settings: Settings, **fixed: Any) -> AIOKafkaProducer:
    """A producer with the node's Kafka options; `fixed` options win (the relay needs its own)."""
    return AIOKafkaProducer(**{**client_options(settings, "producer"), **fixed})


class KafkaSink:
    """Sends each event to its topic (keyed by job / schedule / workflow id), and a dead job's
    summary and last error to the dead-letter topic too."""

    name = "kafka"
    records: Callable[[Event, Topics], list[Record]] = staticmethod(records_of)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics = Topics(settings.kafka_topic, settings.kafka_topics == "per-family", settings.kafka_dead_topic)
        self._producer: AIOKafkaProducer | None = None
        self._partitions: dict[str, int] = {}  # topic -> how many partitions it has (read once per connection)
        check_options(settings)  # bad options are refused when the node starts, not at the first event

    async def open(self) -> None:
        """Connect to the brokers; SinkUnavailable while none answers."""
        producer = make_producer(
            self.settings, acks="all", linger_ms=0, enable_idempotence=False, max_batch_size=MAX_BATCH_BYTES,
            max_request_size=MAX_BATCH_BYTES + 100_000,
        )  # fmt: skip
        try:
            await producer.start()
        except (KafkaError, OSError) as exc:
            with contextlib.suppress(Exception):
                await producer.stop()
            raise SinkUnavailable(f"Kafka at {self.settings.kafka_bootstrap}: {exc}") from None
        self._producer = producer

    async def close(self) -> None:
        """Flush and disconnect."""
        producer, self._producer = self._producer, None
        self._partitions.clear()
        if producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), CLOSE_TIMEOUT)

    async def deliver(self, events: Sequence[Event]) -> int:
        """Send the events that fit in one round as one batch per partition; return the last seq
        once the broker acknowledged every batch (any failure raises: the round is sent again)."""
        producer = self._producer
        if producer is None:
            raise SinkUnavailable("the Kafka producer is not connected")
        batches: dict[tuple[str, int], Any] = {}
        sizes: dict[tuple[str, int], int] = {}
        partitions = self._partitions
        last = 0
        for e in events:
            placed = []
            for r in self.records(e, self.topics):
                n = partitions.get(r.topic)
                if n is None:
                    n = partitions[r.topic] = len(await producer.partitions_for(r.topic))
                placed.append(((r.topic, partition_of(r.key, n)), r))
            if last and any(sizes.get(where, 0) + r.size > BATCH_BYTES for where, r in placed):
                break  # the rest waits for the next round: a partition's batch is full
            for where, r in placed:
                batch = batches.get(where)
                if batch is None:
                    batch = batches[where] = producer.create_batch()
                if batch.append(key=r.key, value=r.value, timestamp=None, headers=r.headers) is None:
                    raise RuntimeError(f"a relay round did not fit in one batch of {where}")  # BATCH_BYTES prevents it
                sizes[where] = sizes.get(where, 0) + r.size
            assert e.seq is not None
            last = e.seq
        sent = [await producer.send_batch(b, topic, partition=p) for (topic, p), b in batches.items()]
        results = await asyncio.gather(*sent, return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            partitions.clear()  # read the partition counts again: they may have changed
            raise failed[0]
        return last


class KafkaAuditSink(KafkaSink):
    """The audit log to `<events topic>.audit` (per-family topics only): the same producer and
    batching as the events, a position and lease of its own ("kafka-audit")."""

    name = "kafka-audit"
    records = staticmethod(audit_records_of)


class AuditReader:
    """The relay's reader over the audit log by id (the store reads it gap-free: see audit_after).
    The bus carries feed events, not audit entries: it only wakes the relay."""

    live = False

    def __init__(self, store: Any) -> None:
        self.store = store

    async def since(self, position: int, limit: int) -> list[Event]:
        return [audit_event(entry) for entry in await self.store.audit_after(position, limit)]
