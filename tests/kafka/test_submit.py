"""Job submissions from the submit topic: good messages become jobs, a message read again makes no
second job, bad messages go to the dead-letter topic with the reason and never block the partition."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from core.api.kafka_submit import parse_submission
from core.client import JobDeckClient
from tests.conftest import node_settings, start_node, stop_node, until
from tests.kafka.broker import CONSUMER_OPTIONS, Collector, TansuBroker, create_topic
from tests.throwaway import ThrowawayPostgres, throwaway_problem

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
        (None, orjson.dumps({"kind": "batch", "jobs": []})),  # a kind it does not know
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


def workflow(name: str, jobs: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"kind": "workflow", "name": name, "jobs": jobs})


async def test_workflows_from_the_topic_are_stored_whole_once_and_bad_ones_are_dead_lettered(
    broker: TansuBroker, tmp_path: Path
) -> None:
    """A workflow message becomes a workflow (its jobs and their dependencies); read again by
    another group it stores nothing; a cycle or an unknown ref goes to the DLQ naming the job, and
    the job message behind them is stored."""
    await create_topic(broker.bootstrap, TOPIC, 1)
    build = {"ref": "build", "name": "w-build", "task": NOOP_TASK}
    deploy = {"ref": "deploy", "name": "w-deploy", "task": NOOP_TASK, "depends_on": ["build"]}
    loop = [{"ref": "a", "task": NOOP_TASK, "depends_on": ["b"]}, {"ref": "b", "task": NOOP_TASK, "depends_on": ["a"]}]
    await produce(broker.bootstrap, [
        (None, workflow("release", [build, deploy])),
        (None, workflow("loop", loop)),
        (None, workflow("orphan", [{"ref": "x", "task": NOOP_TASK, "depends_on": ["nowhere"]}])),
        (None, orjson.dumps({"kind": "workflow", "name": "empty", "jobs": []})),
        (None, job(name="w-after")),
    ])  # fmt: skip
    node, url, task = await start_node(submit_settings(tmp_path, broker.bootstrap))
    try:
        async with JobDeckClient(url) as client, Collector(broker.bootstrap, f"{TOPIC}.dlq") as dlq:
            found = await until(lambda: _at_least(jobs_named(client, "w-"), 3), 30, "the workflow's jobs and the job")
            assert sorted(j["name"] for j in found) == ["w-after", "w-build", "w-deploy"], found
            [wf] = (await client.workflows())["workflows"]
            assert wf["name"] == "release", wf
            graph = await client.get_workflow(wf["id"])
            ref_of = {n["id"]: n["ref"] for n in graph["nodes"]}
            parents = {n["ref"]: [ref_of[p] for p in n["parents"]] for n in graph["nodes"]}
            assert parents == {"build": [], "deploy": ["build"]}, graph["nodes"]
            keys = {j["name"]: j["idempotency_key"] for j in found}
            assert keys["w-deploy"].startswith(f"kafka:{TOPIC}:0:0:") and keys["w-deploy"].endswith(":deploy"), keys
            await client.wait_for(next(j["id"] for j in found if j["name"] == "w-deploy"), timeout=30)
            await until(lambda: len(dlq.messages) >= 3, 20, "three workflows on the dead-letter topic")
            errors = {dict(m.headers)["jobdeck-source"].decode(): dict(m.headers) for m in dlq.messages}
            assert sorted(errors) == [f"{TOPIC}/0/1", f"{TOPIC}/0/2", f"{TOPIC}/0/3"], errors
            assert b"a -> b -> a" in errors[f"{TOPIC}/0/1"]["jobdeck-error"], errors[f"{TOPIC}/0/1"]
            assert b"nowhere" in errors[f"{TOPIC}/0/2"]["jobdeck-error"], errors[f"{TOPIC}/0/2"]
            assert errors[f"{TOPIC}/0/3"]["jobdeck-error-field"] == b"jobs", errors[f"{TOPIC}/0/3"]
            subs = node.kafka_submissions
            assert subs is not None and (subs.taken, subs.duplicates, subs.dead_lettered) == (3, 0, 3)
    finally:
        await stop_node(node, task)

    node, url, task = await start_node(submit_settings(tmp_path, broker.bootstrap, group="second-reader"))
    try:
        async with JobDeckClient(url) as client:
            subs = node.kafka_submissions
            assert subs is not None
            await until(lambda: subs.duplicates >= 3, 30, "the second group to read the topic again")
            assert subs.taken == 0 and len((await client.workflows())["workflows"]) == 1
            assert len(await jobs_named(client, "w-")) == 3, "the workflow read again stored no job"
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
        (b'{"kind": "jobs"}', "kind 'jobs' is not one of: job, workflow"),
        (b'{"kind": "workflow", "name": "w"}', "jobs: this field is required"),
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
    assert isinstance(spec, dict) and spec["queue"] == "q" and spec["task"]["command"] == "echo hi"


async def committed_offset(bootstrap: str, group: str) -> int | None:
    """The group's committed offset of partition 0, read without joining the group."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await reader.start()
    try:
        offset: int | None = await reader.committed(TopicPartition(TOPIC, 0))
        return offset
    finally:
        await reader.stop()


async def test_the_offset_is_committed_only_once_the_jobs_are_stored(broker: TansuBroker, tmp_path: Path) -> None:
    """With the store away, messages are read but nothing is committed; once it is back the jobs
    are stored (once each) and only then does the group's offset move past them."""
    problem = throwaway_problem()
    if problem:
        pytest.skip(problem)
    await create_topic(broker.bootstrap, TOPIC, 1)
    with ThrowawayPostgres() as pg:
        settings = node_settings(tmp_path, database_url=pg.url, kafka_bootstrap=broker.bootstrap,
                                 kafka_submit_topic=TOPIC, kafka_submit_group="jobdeck",
                                 kafka_options={"consumer": CONSUMER_OPTIONS})  # fmt: skip
        node, url, task = await start_node(settings, local_agent=False)
        try:
            async with JobDeckClient(url) as client:
                await produce(broker.bootstrap, [(None, job(name="c-first"))])
                await until(lambda: _at_least(jobs_named(client, "c-"), 1), 30, "the first message stored")
                await until(lambda: _is(committed_offset(broker.bootstrap, "jobdeck"), 1), 10, "offset 1 committed")
                pg.stop()
                await produce(broker.bootstrap, [(None, job(name="c-second")), (None, job(name="c-third"))])
                await asyncio.sleep(3.0)  # the consumer reads them and cannot store them
                assert await committed_offset(broker.bootstrap, "jobdeck") == 1, "nothing committed while unstored"
                pg.start()
                found = await until(lambda: _at_least(jobs_named(client, "c-"), 3), 60, "both stored once PG is back")
                await until(lambda: _is(committed_offset(broker.bootstrap, "jobdeck"), 3), 10, "offset 3 committed")
                assert sorted(j["name"] for j in found) == ["c-first", "c-second", "c-third"], found
        finally:
            await stop_node(node, task)


async def _is(value: Any, expected: object) -> bool:
    return bool(await value == expected)
