"""What the Kafka relay writes for each event: topic, key, value (versioned JSON) and headers.

The value's JSON Schema is docs/kafka-event.schema.json (and docs/kafka-dead.schema.json for the
dead-letter topic); tests check both against what the relay really sends. A change that breaks
a consumer bumps SCHEMA_VERSION.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from core.store.base import Event

SCHEMA_VERSION = 1
# An event's family (its type up to the dot) -> the suffix of its topic when topics are per family.
FAMILY_TOPICS = {"job": "jobs", "schedule": "schedules", "queue": "queues", "agent": "agents", "workflow": "workflows"}
# A value larger than this is sent without its `data` (and "truncated": true): brokers refuse
# messages over their max.message.bytes (1 MB by default), and one refused event would stop the relay.
MAX_VALUE_BYTES = 256 * 1024
DEAD_TYPE = "job.dead"


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka message to produce."""

    topic: str
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]

    @property
    def size(self) -> int:
        """Roughly what it takes in a record batch (payload plus per-record overhead)."""
        return len(self.key) + len(self.value) + sum(len(k) + len(v) for k, v in self.headers) + 64


@dataclass(frozen=True, slots=True)
class Topics:
    """Where events go: one topic, or one per family; and the dead-letter topic ("" for none)."""

    events: str = "jobdeck.events"
    per_family: bool = False
    dead: str = "jobdeck.dead"

    def for_type(self, type_: str) -> str:
        if not self.per_family:
            return self.events
        family = type_.split(".", 1)[0]
        return f"{self.events}.{FAMILY_TOPICS.get(family, family)}"


def event_key(type_: str, job_id: int | None, queue: str | None, data: dict[str, Any]) -> str:
    """The partitioning key: a job's events share its id, so they stay in order in one partition;
    other events are keyed by what they are about ("schedule:3", "queue:emails", "agent:a1")."""
    family = type_.split(".", 1)[0]
    if family == "job" and job_id is not None:
        return str(job_id)
    if family == "schedule":
        sid = data.get("schedule_id") or (data.get("schedule") or {}).get("id")
        if sid is not None:
            return f"schedule:{sid}"
    if family == "workflow":
        wid = data.get("workflow_id") or (data.get("workflow") or {}).get("id")
        if wid is not None:
            return f"workflow:{wid}"
    if family == "queue":
        name = queue or (data.get("queue") or {}).get("name")
        if name:
            return f"queue:{name}"
    if family == "agent":
        agent = data.get("agent")
        name = agent.get("name") if isinstance(agent, dict) else agent
        if name:
            return f"agent:{name}"
    if job_id is not None:
        return str(job_id)
    return family


def event_value(seq: int, body: dict[str, Any]) -> dict[str, Any]:
    """The versioned value of an event: its identity and time, the job summary of job events on
    top, and the rest of the event's data as the WebSocket feed has it."""
    data = dict(body.get("data") or {})
    job = data.pop("job", None)
    return {
        "schema_version": SCHEMA_VERSION,
        "seq": seq,
        "type": body["type"],
        "time": body["ts"],
        "job_id": body.get("job_id"),
        "queue": body.get("queue"),
        "job": job,
        "data": data,
    }


def dead_value(seq: int, body: dict[str, Any]) -> dict[str, Any]:
    """What the dead-letter topic gets when a job goes dead: the job summary and its last error."""
    data = body.get("data") or {}
    return {
        "schema_version": SCHEMA_VERSION,
        "seq": seq,
        "time": body["ts"],
        "job": data.get("job"),
        "error": data.get("error"),
        "attempt": data.get("attempt"),
        "outcome": data.get("outcome"),
    }


def _encode(value: dict[str, Any]) -> bytes:
    raw = orjson.dumps(value)
    if len(raw) <= MAX_VALUE_BYTES:
        return raw
    slim = dict(value, data={}, truncated=True)
    if "error" in slim and isinstance(slim["error"], str):
        slim["error"] = slim["error"][:1000]
    return orjson.dumps(slim)


def records_of(e: Event, topics: Topics) -> list[Record]:
    """The messages for one stored event: its record on the event topic, and for a job that went
    dead one more on the dead-letter topic."""
    assert e.seq is not None, "only stored events are relayed"
    body = orjson.loads(e.body)
    key = event_key(e.type, e.job_id, e.queue, body.get("data") or {}).encode()
    headers = (("jobdeck-type", e.type.encode()), ("jobdeck-schema-version", b"%d" % SCHEMA_VERSION))
    out = [Record(topics.for_type(e.type), key, _encode(event_value(e.seq, body)), headers)]
    if e.type == DEAD_TYPE and topics.dead:
        out.append(Record(topics.dead, key, _encode(dead_value(e.seq, body)), headers))
    return out
