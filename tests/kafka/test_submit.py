"""Job submissions from the submit topic: good messages become jobs, a message read again makes no
second job, bad messages go to the dead-letter topic with the reason and never block the partition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from core.api.kafka_submit import parse_submission
from core.client import JobDeckClient
from tests.conftest import node_settings, start_node, stop_node, until
from tests.kafka.broker import CONSUMER_OPTIONS, Collector, TansuBroker, create_topic

TOPIC = "jobdeck.submit"
NOOP_TASK = {"kind": "python", "function": "agents.builtin:noop"}


def submit_settings(tmp_path: Path, bootstrap: str, group: str = "jobdeck") -> Any:
    return node_settings(tmp_path, kafka_bootstrap=bootstrap, kafka_submit_topic=TOPIC, kafka_submit_group=group,
                         kafka_options={"consumer": CONSUMER_OPTIONS})  # fmt: skip


async def produce(
    bootstrap: str, messages: list[tuple[bytes | None, bytes | None]], headers: list[tuple[str, bytes]] | None = None
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, value in messages:
            await producer.send_and_wait(TOPIC, value, key=key, headers=headers)
    finally:
        await producer.stop()


def job(**fields: Any) -> bytes:
    return orjson.dumps({"kind": "job", "task": NOOP_TASK, **fields})


async def jobs_named(client: JobDeckClient, prefix: str) -> list[dict[str, Any]]:
    return list((await client.list_jobs(name_prefix=prefix, limit=100))["jobs"])


async def test_good_duplicate_and_bad_messages(broker: TansuBroker, tmp_path: Path) -> None:
    await create_topic(
        broker.bootstrap, TOPIC, 1
    )  # one partition: the good message after the bad ones waits behind them
    await produce(broker.bootstrap, [
        (None, job(name="k-one")),
        (b"order-7", job(name="k-two", idempotency_key="order-7", queue="orders")),
        (b"order-7", job(name="k-two-again", idempotency_key="order-7", queue="orders")),  # a duplicate
        (None, b"{not json"),
        (None, orjson.dumps({"kind": "workflow", "jobs": []})),
        (None, orjson.dumps({"kind": "job", "task": {"kind": "shell"}})),
        (None, job(name="k-three", priority=5)),  # after the bad ones: the partition was not blocked
    ])  # fmt: skip
    node, url, task = await start_node(submit_settings(tmp_path, broker.bootstrap))
    try:
        async with JobDeckClient(url) as client, Collector(broker.bootstrap, f"{TOPIC}.dlq") as dlq:
            found = await until(
                lambda: _at_least(jobs_named(client, "k-"), 3), 30, "the three good messages stored as jobs"
            )
            assert sorted(j["name"] for j in found) == ["k-one", "k-three", "k-two"], found
            two = next(j for j in found if j["name"] == "k-two")
            assert two["queue"] == "orders" and two["idempotency_key"] == "order-7", two
            one = next(j for j in found if j["name"] == "k-one")
            assert one["idempotency_key"].startswith(f"kafka:{TOPIC}:0:0:"), one
            await until(lambda: len(dlq.messages) >= 3, 20, "three messages on the dead-letter topic")
            reasons = {dict(m.headers)["jobdeck-source"].decode(): dict(m.headers) for m in dlq.messages}
            assert sorted(reasons) == [f"{TOPIC}/0/3", f"{TOPIC}/0/4", f"{TOPIC}/0/5"], reasons
            assert b"not JSON" in reasons[f"{TOPIC}/0/3"]["jobdeck-error"]
            assert reasons[f"{TOPIC}/0/4"]["jobdeck-error-field"] == b"kind"
            assert b"command" in reasons[f"{TOPIC}/0/5"]["jobdeck-error"], reasons[f"{TOPIC}/0/5"]
            assert next(m for m in dlq.messages if dict(m.headers)["jobdeck-source"].endswith(b"/3")).value == (
                b"{not json"
            ), "the dead letter keeps the original value"
            subs = node.kafka_submissions
            assert subs is not None and (subs.taken, subs.duplicates, subs.dead_lettered) == (3, 1, 3)
    finally:
        await stop_node(node, task)

    # Another consumer group reads the whole topic again: every job is known by its idempotency
    # key (topic/partition/offset, or the spec's own), so nothing is stored twice.
    node, url, task = await start_node(submit_settings(tmp_path, broker.bootstrap, group="second-reader"))
    try:
        async with JobDeckClient(url) as client:
            await produce(broker.bootstrap, [(None, job(name="k-four"))])
            found = await until(lambda: _at_least(jobs_named(client, "k-"), 4), 30, "the new message stored")
            assert sorted(j["name"] for j in found) == ["k-four", "k-one", "k-three", "k-two"], found
            subs = node.kafka_submissions
            assert subs is not None and (subs.taken, subs.duplicates) == (1, 4), (subs.taken, subs.duplicates)
    finally:
        await stop_node(node, task)


async def test_a_message_s_traceparent_header_is_its_jobs_trace(broker: TansuBroker, tmp_path: Path) -> None:
    """The producer's W3C trace context (the `traceparent` header OpenTelemetry's Kafka instrumentations
    set) is the job's, as a traceparent header is on POST /v1/jobs; a message without one has none."""
    await create_topic(broker.bootstrap, TOPIC, 1)
    trace = "0af7651916cd43dd8448eb211c80319c"
    await produce(
        broker.bootstrap,
        [(None, job(name="t-traced"))],
        headers=[("traceparent", f"00-{trace}-b7ad6b7169203331-01".encode())],
    )
    await produce(broker.bootstrap, [(None, job(name="t-plain"))], headers=[("traceparent", b"00-zz-bad")])
    node, url, task = await start_node(submit_settings(tmp_path, broker.bootstrap))
    try:
        async with JobDeckClient(url) as client:
            found = await until(lambda: _at_least(jobs_named(client, "t-"), 2), 30, "both messages stored as jobs")
            by_name = {j["name"]: (await client.get_job(j["id"]))["trace_id"] for j in found}
            assert by_name == {"t-traced": trace, "t-plain": None}, by_name
    finally:
        await stop_node(node, task)


async def _at_least(jobs: Any, n: int) -> list[dict[str, Any]] | None:
    found: list[dict[str, Any]] = await jobs
    return found if len(found) >= n else None


def test_a_submission_names_what_is_wrong() -> None:
    for value, expected in [
        (None, "no value"),
        (b"[1]", "JSON object"),
        (b'{"task": {"kind": "shell", "command": "true"}}', "kind is required"),
        (b'{"kind": "jobs"}', "kind 'jobs' is not one of: job"),
        (b'{"kind": "job"}', "task: this field is required"),
        (b'{"kind": "job", "task": {"kind": "shell", "command": "x"}, "priority": "high"}', "priority"),
    ]:
        try:
            parse_submission(value)
        except Exception as exc:
            assert expected in str(exc), (value, str(exc))
        else:
            raise AssertionError(f"{value!r} was accepted")
    spec = parse_submission(b'{"kind": "job", "task": {"kind": "shell", "command": "echo hi"}, "queue": "q"}')
    assert spec["queue"] == "q" and spec["task"]["command"] == "echo hi"
