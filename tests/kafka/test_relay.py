"""The outbox relay to a real Kafka-protocol broker (Tansu): every committed event reaches the
topic, a job's events in order in one partition, a dead job on the dead-letter topic, the values
valid against the published JSON Schema; the broker down at start and stopped mid-stream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

from core.client import JobDeckClient
from tests.conftest import ROOT, node_settings, start_node, stop_node, until
from tests.kafka.broker import Collector, TansuBroker, create_topic

NOOP = {"task": {"kind": "python", "function": "agents.builtin:noop"}}
DOOMED = {"task": {"kind": "python", "function": "agents.builtin:fail", "args": ["no luck"]}, "max_attempts": 1}
EVENT_SCHEMA = json.loads((ROOT / "docs" / "kafka-event.schema.json").read_text())
DEAD_SCHEMA = json.loads((ROOT / "docs" / "kafka-dead.schema.json").read_text())
SCHEMAS = Registry().with_resource(EVENT_SCHEMA["$id"], Resource.from_contents(EVENT_SCHEMA))
EVENT_VALUE = jsonschema.Draft202012Validator(EVENT_SCHEMA)
DEAD_VALUE = jsonschema.Draft202012Validator(DEAD_SCHEMA, registry=SCHEMAS)


def kafka_settings(tmp_path: Path, bootstrap: str, **more: Any) -> Any:
    return node_settings(tmp_path, kafka_bootstrap=bootstrap, relay_lease_seconds=2.0, **more)


def assert_in_order_per_key(messages: list[Any]) -> None:
    """Each key's seqs only grow, and each key lives in one partition."""
    last: dict[bytes, int] = {}
    partition: dict[bytes, int] = {}
    for m in messages:
        seq = json.loads(m.value)["seq"]
        assert seq > last.get(m.key, 0), f"key {m.key!r}: seq {seq} after {last.get(m.key)}"
        assert partition.setdefault(m.key, m.partition) == m.partition, f"key {m.key!r} in two partitions"
        last[m.key] = seq


async def test_every_event_reaches_the_topic_in_order_per_job_with_the_published_schema(
    broker: TansuBroker, tmp_path: Path
) -> None:
    await create_topic(broker.bootstrap, "jobdeck.events", 3)
    node, url, task = await start_node(kafka_settings(tmp_path, broker.bootstrap))
    try:
        async with JobDeckClient(url) as client, Collector(broker.bootstrap, "jobdeck.events", "jobdeck.dead") as got:
            await client.submit_batch([NOOP] * 150)
            doomed = await client.submit(DOOMED)
            await client.create_schedule({"name": "nightly", "cron": "0 2 * * *", **{"job": NOOP}})
            await client.wait_for(doomed["id"], timeout=30)
            await client.queue_action("default", "pause")  # after the jobs ran: a paused queue holds them

            async def all_relayed() -> bool:
                last = (await client.health())["last_seq"]
                return got.seqs("jobdeck.events") >= set(range(1, last + 1))

            await until(all_relayed, 20, "every committed seq on jobdeck.events")
            last = (await client.health())["last_seq"]
            events = [m for m in got.messages if m.topic == "jobdeck.events"]
            assert sorted(got.seqs("jobdeck.events")) == list(range(1, last + 1))
            assert_in_order_per_key(events)
            assert {m.partition for m in events} == {0, 1, 2}, "job ids spread over the partitions"
            for m in events:
                v = json.loads(m.value)
                EVENT_VALUE.validate(v)
                assert dict(m.headers)["jobdeck-type"] == v["type"].encode()
                if v["type"].startswith("job."):
                    assert m.key == str(v["job_id"]).encode() and v["data"]["job"]["id"] == v["job_id"], v
            types = {json.loads(m.value)["type"]: m.key for m in events}
            assert types["schedule.created"].startswith(b"schedule:") and types["queue.paused"] == b"queue:default"
            await until(lambda: got.values("jobdeck.dead"), 10, "the dead job on jobdeck.dead")
            [dead] = got.values("jobdeck.dead")
            DEAD_VALUE.validate(dead)
            assert dead["job"]["id"] == doomed["id"] and dead["job"]["state"] == "dead", dead
            assert "no luck" in dead["error"] and dead["attempt"] == 1, dead

            async def caught_up() -> dict[str, Any] | None:
                lag = (await client.stats())["relays"].get("kafka")
                return lag if lag and lag["behind_events"] == 0 else None

            lag = await until(caught_up, 10, "the relay's lag to reach 0 in /v1/stats")
            assert lag["behind_seconds"] == 0 and lag["holder"] and lag["acked_seq"] == last, lag
    finally:
        await stop_node(node, task)


async def test_a_node_starts_with_the_broker_down_says_so_once_and_relays_when_it_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broker = TansuBroker()  # not started yet: nothing listens on its port
    caplog.set_level(logging.INFO, logger="jobdeck.relay")
    node, url, task = await start_node(kafka_settings(tmp_path, broker.bootstrap))
    try:
        async with JobDeckClient(url) as client:
            jobs = await client.submit_batch([NOOP] * 20)
            await until(lambda: _all_done(client, jobs["ids"]), 10, "the jobs to run with Kafka away")
            await asyncio.sleep(1.5)  # several relay retries while the broker is away
            lag = (await client.stats())["relays"]["kafka"]
            assert lag["behind_events"] > 0 and lag["behind_seconds"] > 0, lag
            warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
            assert len(warnings) == 1 and "cannot reach" in warnings[0], warnings
            with broker:
                async with Collector(broker.bootstrap, "jobdeck.events") as got:
                    last = (await client.health())["last_seq"]
                    await until(lambda: got.seqs() >= set(range(1, last + 1)), 20, "every seq once Kafka is up")
                    assert_in_order_per_key(got.messages)
            back = [r.getMessage() for r in caplog.records if "answers again" in r.getMessage()]
            assert back, "the log says it is back"
            behind = re.search(r"it was ([0-9.]+) s behind, delivering from seq 1$", back[0])
            assert behind and float(behind.group(1)) >= 1.5, f"the log says how far behind it was: {back[0]}"
    finally:
        await stop_node(node, task)


async def _all_done(client: JobDeckClient, ids: list[int]) -> bool:
    return (await client.stats())["by_state"].get("succeeded", 0) >= len(ids)


# The fault is a 30 s outage; the suite's is shorter, with a shorter request timeout so the
# relay's sends fail (rather than wait) just the same. JOBDECK_TEST_KAFKA_OUTAGE=30 runs the long one.
OUTAGE_SECONDS = float(os.environ.get("JOBDECK_TEST_KAFKA_OUTAGE", "4"))


def keep_first_per_key(messages: list[Any]) -> list[int]:
    """What a consumer following the documented rule keeps: a message only if its seq is greater
    than the last one kept for its key (at least once: repeats are dropped). Its seqs, in order."""
    last: dict[bytes, int] = {}
    kept = []
    for m in messages:
        seq = json.loads(m.value)["seq"]
        if seq > last.get(m.key, 0):
            last[m.key] = seq
            kept.append(seq)
    return kept


async def test_a_broker_stopped_mid_stream_loses_nothing_and_keeps_each_jobs_order(
    broker: TansuBroker, tmp_path: Path
) -> None:
    """Tansu keeps topics in memory: a restarted broker is empty, and what it had acknowledged is
    gone with it. So before the stop the test lets the consumer read everything acknowledged (the
    load pauses for that); the events committed while the broker is away, and those in the rounds
    that fail when it goes, must all reach the new broker, in order per job."""
    opts = {"producer": {"request_timeout_ms": 1500}}
    node, url, task = await start_node(kafka_settings(tmp_path, broker.bootstrap, kafka_options=opts))
    loading = asyncio.Event()
    loading.set()

    async def load(client: JobDeckClient) -> None:
        while True:
            await loading.wait()
            await client.submit_batch([NOOP] * 10)
            await asyncio.sleep(0.05)

    try:
        async with JobDeckClient(url) as client:
            loader = asyncio.create_task(load(client))
            async with Collector(broker.bootstrap, "jobdeck.events") as before:
                await until(lambda: len(before.messages) > 300, 20, "the stream to flow")
                loading.clear()
                await asyncio.sleep(0.1)  # a submit in flight lands
                last = (await client.health())["last_seq"]
                await until(lambda: before.seqs() >= set(range(1, last + 1)), 20, "the consumer to catch up")
            loading.set()
            broker.stop()
            await asyncio.sleep(OUTAGE_SECONDS)
            lag = (await client.stats())["relays"]["kafka"]
            assert lag["behind_events"] > 0 and lag["behind_seconds"] >= OUTAGE_SECONDS / 2, lag
            broker.start()
            async with Collector(broker.bootstrap, "jobdeck.events") as after:
                await asyncio.sleep(1.0)  # the stream goes on after the restart
                loading.clear()
                loader.cancel()
                await asyncio.sleep(0.1)
                final = (await client.health())["last_seq"]

                def everything() -> bool:
                    return set(keep_first_per_key(before.messages + after.messages)) >= set(range(1, final + 1))

                await until(everything, 30, "every seq after the broker came back")
                kept = keep_first_per_key(before.messages + after.messages)
                assert sorted(kept) == list(range(1, final + 1)), "each seq once, after dropping repeats"
                assert min(json.loads(m.value)["seq"] for m in after.messages) <= last + 1
            with contextlib.suppress(asyncio.CancelledError):
                await loader
    finally:
        await stop_node(node, task)


async def test_one_topic_per_family_keyed_by_what_each_event_is_about(broker: TansuBroker, tmp_path: Path) -> None:
    """kafka_topics = per-family: job events on jobdeck.events.jobs keyed by job id, a schedule's on
    .schedules ("schedule:ID"), a workflow's on .workflows ("workflow:ID"), a queue's on .queues,
    an agent's on .agents."""
    families = ("jobs", "schedules", "workflows", "queues", "agents")
    node, url, task = await start_node(kafka_settings(tmp_path, broker.bootstrap, kafka_topics="per-family"))
    try:
        topics = [f"jobdeck.events.{f}" for f in families]
        async with JobDeckClient(url) as client, Collector(broker.bootstrap, "jobdeck.events", *topics) as got:
            job = await client.submit(NOOP)
            schedule = await client.create_schedule({"name": "hourly", "cron": "0 * * * *", "job": NOOP})
            wf = await client.submit_workflow("pair", [{"ref": "a", **NOOP}, {"ref": "b", "depends_on": ["a"], **NOOP}])
            await client.wait_for(wf["ids"]["b"], timeout=30)
            await client.queue_action("default", "pause")

            async def all_relayed() -> bool:
                last = (await client.health())["last_seq"]
                return got.seqs() >= set(range(1, last + 1))

            await until(all_relayed, 20, "every committed seq on the family topics")
            assert not got.values("jobdeck.events"), "nothing on the single topic"
            by_topic: dict[str, set[str]] = {}
            for m in got.messages:
                v = json.loads(m.value)
                EVENT_VALUE.validate(v)
                by_topic.setdefault(m.topic, set()).add(v["type"].split(".")[0])
                if m.topic.endswith(".jobs"):
                    assert m.key == str(v["job_id"]).encode(), (m.key, v)
                elif m.topic.endswith(".schedules"):
                    assert m.key == f"schedule:{schedule['id']}".encode(), (m.key, v)
                elif m.topic.endswith(".workflows"):
                    assert m.key == f"workflow:{wf['workflow']['id']}".encode(), (m.key, v)
                elif m.topic.endswith(".queues"):
                    assert m.key == b"queue:default", (m.key, v)
                else:
                    assert m.key == b"agent:test-agent", (m.key, v)
            assert by_topic == {
                "jobdeck.events.jobs": {"job"}, "jobdeck.events.schedules": {"schedule"},
                "jobdeck.events.workflows": {"workflow"}, "jobdeck.events.queues": {"queue"},
                "jobdeck.events.agents": {"agent"},
            }, by_topic  # fmt: skip
            assert job["id"] in {v["job_id"] for v in got.values("jobdeck.events.jobs")}
    finally:
        await stop_node(node, task)


def readme_consumer(bootstrap: str) -> str:
    """The README's "plain aiokafka consumer" example, pointed at `bootstrap`."""
    text = (ROOT / "README.md").read_text()
    start = text.index("Reading the stream with a plain aiokafka consumer")
    code = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert code, "the README's consumer example is a python block"
    assert '"localhost:9092"' in code.group(1)
    return code.group(1).replace('"localhost:9092"', repr(bootstrap))


async def test_the_readme_consumer_example_prints_every_event_once(broker: TansuBroker, tmp_path: Path) -> None:
    """Run as written: it reads jobdeck.events with its own consumer group, and prints each event
    (seq, type, job id, state) once, in seq order per job."""
    await create_topic(broker.bootstrap, "jobdeck.events", 2)
    node, url, task = await start_node(kafka_settings(tmp_path, broker.bootstrap))
    script = tmp_path / "consume.py"
    script.write_text(readme_consumer(broker.bootstrap))
    out_path = tmp_path / "consume.out"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(script)], stdout=out, stderr=subprocess.STDOUT)
    try:
        async with JobDeckClient(url) as client:
            ids = (await client.submit_batch([NOOP] * 5))["ids"]
            for i in ids:
                await client.wait_for(i, timeout=30)
            last = (await client.health())["last_seq"]

            def printed() -> list[list[str]] | None:
                lines = [ln.split() for ln in out_path.read_text().splitlines() if ln.strip()]
                return lines if {int(ln[0]) for ln in lines if ln[0].isdigit()} >= set(range(1, last + 1)) else None

            lines = await until(printed, 40, f"the example to print seqs 1..{last}")
            assert all(ln[0].isdigit() and len(ln) == 4 for ln in lines), lines  # no traceback, no other output
            seqs = [int(ln[0]) for ln in lines]
            assert len(seqs) == len(set(seqs)), "each event printed once"
            for i in ids:
                mine = [(int(ln[0]), ln[1], ln[3]) for ln in lines if ln[2] == str(i)]
                assert [s for s, _, _ in mine] == sorted(s for s, _, _ in mine), mine
                assert mine[0][1:] == ("job.created", "queued") and mine[-1][1:] == ("job.succeeded", "succeeded"), mine
    finally:
        proc.kill()
        proc.wait(10)
        await stop_node(node, task)
