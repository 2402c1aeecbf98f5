"""Job submissions from Kafka: every node joins one consumer group on `kafka_submit_topic`.

A message's value is JSON: `{"kind": "job", ...}` with the body of `POST /v1/jobs` beside the
kind, or `{"kind": "workflow", "name": ..., "jobs": [...]}` with the body of `POST /v1/workflows`
(a DAG of jobs, stored whole or not at all); an unknown kind is refused like any invalid message.

Each message is stored with an idempotency key, so a message read twice (a crash, a rebalance)
makes one job: the spec's own `idempotency_key` if it has one, else the message key when
`kafka_submit_idempotency = "key"`, else its place in the log
(`kafka:TOPIC:PARTITION:OFFSET:TIMESTAMP`; the broker's timestamp keeps a re-created topic, whose
offsets start again at 0, from matching older jobs). A workflow's jobs take that key with `:REF`
after it, and the store refuses a workflow whose keys exist, so a workflow read twice is stored
once. Offsets are committed only once the jobs are stored, in the partition's order. A message that is not a valid spec goes to `<topic>.dlq` (same key and value, the error
in the `jobdeck-error` headers) and the consumer carries on: a poison message never blocks its
partition. Access to the topic is the broker's (ACLs); JobDeck's sign-in does not apply, and with
sign-in on every stored batch is in the audit log as the actor `kafka`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import ValidationError

from core.api.schemas import JobCreate, WorkflowCreate
from core.config import Settings
from core.errors import Conflict, JobDeckError, Unavailable
from core.obs import logs
from core.store import audit

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

    from core.engine import Engine

log = logging.getLogger("jobdeck.kafka")

MESSAGE_KINDS = ("job", "workflow")
FETCH_RECORDS = 500  # messages taken per read; stored as one batch per partition
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 10.0
HEADER_PREFIX = "jobdeck-"


class BadMessage(Exception):
    """A message that is not a valid submission: why, and which field."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message, self.field = message, field


@dataclass
class WorkflowSubmission:
    """A workflow a message holds: its name and its jobs' specs (as `engine.submit_workflow` takes them)."""

    name: str
    jobs: list[dict[str, Any]]


Submission = dict[str, Any] | WorkflowSubmission  # a job's spec, or a workflow


def parse_submission(value: bytes | None) -> Submission:
    """The job spec (as `engine.submit` takes it) or the workflow a message holds, or BadMessage
    saying what is wrong."""
    if not value:
        raise BadMessage('the message has no value: send JSON like {"kind": "job", "task": {...}}')
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise BadMessage(f"the value is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadMessage(f"the value must be a JSON object with a kind, not {type(doc).__name__}")
    kind = doc.pop("kind", None)
    if kind is None:
        raise BadMessage(f"kind is required: one of {', '.join(MESSAGE_KINDS)}", field="kind")
    if kind not in MESSAGE_KINDS:
        raise BadMessage(f"kind {kind!r} is not one of: {', '.join(MESSAGE_KINDS)}", field="kind")
    try:
        if kind == "workflow":
            wf = WorkflowCreate.model_validate(doc)
            return WorkflowSubmission(wf.name, wf.specs())
        return JobCreate.model_validate(doc).to_spec()
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"] if p not in ("shell", "http", "python")) or None
        msg = "this field is required" if first["type"] == "missing" else str(first["msg"])
        raise BadMessage(f"{field or 'value'}: {msg.removeprefix('Value error, ')}", field=field) from None


def _traceparent(msg: ConsumerRecord[bytes, bytes]) -> str | None:
    """The message's W3C `traceparent` header (as OpenTelemetry's Kafka instrumentations set it), if valid."""
    for key, value in msg.headers or ():
        if key.lower() == "traceparent" and value:
            text = value.decode("ascii", "replace").strip()
            return text if logs.trace_id_of(text) is not None else None
    return None


def idempotency_key(msg: ConsumerRecord[bytes, bytes], by_key: bool) -> str:
    """The key a message's job is stored with (see the module docstring)."""
    if by_key and msg.key:
        raw = msg.key.decode(errors="replace")
        key = raw if len(raw) <= 120 else hashlib.sha256(msg.key).hexdigest()
        return f"kafka:{msg.topic}:key:{key}"
    return f"kafka:{msg.topic}:{msg.partition}:{msg.offset}:{msg.timestamp}"


class KafkaSubmissions:
    """The consumer of the submit topic on one node."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.topic = settings.kafka_submit_topic
        self.dlq_topic = f"{self.topic}.dlq"
        self.by_key = settings.kafka_submit_idempotency == "key"
        self.taken = self.duplicates = self.dead_lettered = 0
        self._task: asyncio.Task[None] | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None

    def start(self) -> None:
        """Consume in the background until `stop`."""
        self._task = asyncio.create_task(self.run(), name="jobdeck-kafka-submit")

    async def stop(self) -> None:
        """Leave the group (its partitions go to the other nodes) and disconnect."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def run(self) -> None:
        """Connect, consume; on a broker failure disconnect, wait, and again. Never returns."""
        if self.settings.auth != "none":
            actor = audit.Actor(f"kafka:{self.topic}", "kafka", "operator", "kafka")
            audit.set_acting(actor, "kafka_submit", None)  # this task's writes: each batch is one entry
        backoff, down_since = BACKOFF_FIRST, None
        while True:
            try:
                await self._open()
                if down_since is not None:
                    log.info("kafka submit: consuming %s again", self.topic)
                    down_since = None
                backoff = BACKOFF_FIRST
                await self._consume()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if down_since is None:
                    down_since = asyncio.get_running_loop().time()
                    log.warning("kafka submit: cannot consume %s from Kafka at %s (%s); trying again",
                                self.topic, self.settings.kafka_bootstrap, exc or type(exc).__name__)  # fmt: skip
                else:
                    log.debug("kafka submit: still failing: %s", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
            finally:
                await self._close()

    async def _open(self) -> None:
        from aiokafka import AIOKafkaConsumer

        from core.relay.kafka import client_options, make_producer

        self._producer = make_producer(self.settings, acks="all")
        opts = client_options(self.settings, "consumer")
        self._consumer = AIOKafkaConsumer(
            self.topic, group_id=self.settings.kafka_submit_group, enable_auto_commit=False,
            auto_offset_reset="earliest", **opts,
        )  # fmt: skip
        await self._producer.start()
        await self._consumer.start()

    async def _close(self) -> None:
        for client in (self._consumer, self._producer):
            if client is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.stop(), 10)
        self._consumer = self._producer = None

    async def _consume(self) -> None:
        assert self._consumer is not None
        while True:
            batches = await self._consumer.getmany(timeout_ms=1000, max_records=FETCH_RECORDS)
            for tp, messages in batches.items():
                if messages:
                    await self._take(tp, messages)

    async def _take(self, tp: TopicPartition, messages: list[ConsumerRecord[bytes, bytes]]) -> None:
        """Store the good messages, dead-letter the bad, then commit past them all."""
        assert self._consumer is not None
        good: list[tuple[ConsumerRecord[bytes, bytes], Submission]] = []
        bad: list[tuple[ConsumerRecord[bytes, bytes], BadMessage]] = []
        for m in messages:
            try:
                sub = parse_submission(m.value)
            except BadMessage as exc:
                bad.append((m, exc))
                continue
            key = idempotency_key(m, self.by_key)
            if isinstance(sub, WorkflowSubmission):
                for spec in sub.jobs:
                    spec.setdefault("idempotency_key", f"{key}:{spec['ref']}")
            else:
                sub.setdefault("idempotency_key", key)
            good.append((m, sub))
        try:
            bad += await self._store(good)
            for m, why in sorted(bad, key=lambda b: b[0].offset):  # in the partition's order
                await self._dead_letter(m, why)
        except Exception:
            # Nothing is committed: these messages are read again (their jobs are not stored twice).
            self._consumer.seek(tp, messages[0].offset)
            raise
        await self._consumer.commit({tp: messages[-1].offset + 1})

    async def _store(
        self, good: list[tuple[ConsumerRecord[bytes, bytes], Submission]]
    ) -> list[tuple[ConsumerRecord[bytes, bytes], BadMessage]]:
        """Store the submissions in the partition's order: each run of jobs between workflows as
        one batch, each workflow in its own transaction. The refused ones are returned to be
        dead-lettered; Unavailable (the store is away) is raised."""
        refused: list[tuple[ConsumerRecord[bytes, bytes], BadMessage]] = []
        jobs: list[tuple[ConsumerRecord[bytes, bytes], dict[str, Any]]] = []
        for m, sub in good:
            if isinstance(sub, WorkflowSubmission):
                refused += await self._store_jobs(jobs)
                jobs = []
                why = await self._store_workflow(m, sub)
                if why is not None:
                    refused.append((m, why))
            else:
                jobs.append((m, sub))
        refused += await self._store_jobs(jobs)
        return refused

    async def _store_workflow(self, m: ConsumerRecord[bytes, bytes], wf: WorkflowSubmission) -> BadMessage | None:
        """Store one workflow; a workflow stored before (its keys exist) counts as a duplicate."""
        token = logs.traceparent.set(_traceparent(m))
        try:
            await self.engine.submit_workflow(wf.name, wf.jobs)
        except Unavailable:
            raise
        except Conflict as exc:
            if exc.field != "idempotency_key":
                return BadMessage(exc.message, exc.field)  # e.g. a unique key another job holds
            self.duplicates += len(wf.jobs)
            return None
        except JobDeckError as exc:  # a cycle, an unknown ref: named like POST /v1/workflows names it
            return BadMessage(exc.message, exc.field)
        finally:
            logs.traceparent.reset(token)
        self.taken += len(wf.jobs)
        return None

    async def _store_jobs(
        self, good: list[tuple[ConsumerRecord[bytes, bytes], dict[str, Any]]]
    ) -> list[tuple[ConsumerRecord[bytes, bytes], BadMessage]]:
        """Submit the specs as one batch; if the engine refuses one, each alone (the refused ones
        are returned to be dead-lettered). Unavailable (the store is away) is raised."""
        if not good:
            return []
        groups: dict[str | None, list[tuple[ConsumerRecord[bytes, bytes], dict[str, Any]]]] = {}
        for m, spec in good:  # the messages' trace contexts: each group's jobs join its producer's trace
            groups.setdefault(_traceparent(m), []).append((m, spec))
        refused = []
        for traceparent, group in groups.items():
            try:
                await self._submit([spec for _, spec in group], traceparent)
                continue
            except Unavailable:
                raise
            except JobDeckError:
                pass
            for m, spec in group:
                try:
                    await self._submit([spec], traceparent)
                except Unavailable:
                    raise
                except JobDeckError as exc:
                    refused.append((m, BadMessage(exc.message, exc.field)))
        return refused

    async def _submit(self, specs: list[dict[str, Any]], traceparent: str | None) -> None:
        """Submit as a request with that `traceparent` header would: the jobs' trace is the producer's."""
        token = logs.traceparent.set(traceparent)
        try:
            self._count(await self.engine.submit(specs))
        finally:
            logs.traceparent.reset(token)

    def _count(self, out: list[Any]) -> None:
        made = sum(1 for _, created in out if created)
        self.taken += made
        self.duplicates += len(out) - made

    async def _dead_letter(self, m: ConsumerRecord[bytes, bytes], exc: BadMessage) -> None:
        assert self._producer is not None
        headers = [*(m.headers or ()),
                   (f"{HEADER_PREFIX}error", exc.message.encode()),
                   (f"{HEADER_PREFIX}error-field", (exc.field or "").encode()),
                   (f"{HEADER_PREFIX}source", f"{m.topic}/{m.partition}/{m.offset}".encode())]  # fmt: skip
        await self._producer.send_and_wait(self.dlq_topic, m.value, key=m.key, headers=headers)
        self.dead_lettered += 1
        log.warning("kafka submit: %s/%d offset %d is not a valid submission (%s): sent to %s",
                    m.topic, m.partition, m.offset, exc.message, self.dlq_topic)  # fmt: skip
