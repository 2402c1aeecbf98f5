"""What the Kafka relay writes for each event: topic, key, value (versioned JSON) and headers.

The value's JSON Schema is docs/kafka-event.schema.json (and docs/kafka-dead.schema.json for the
dead-letter topic); tests check both against what the relay really sends. A change that breaks
a consumer bumps SCHEMA_VERSION.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

import orjson
from aiokafka.partitioner import murmur2

from core.store.base import Event

SCHEMA_VERSION = 1
# An event's family (its type up to the dot) -> the suffix of its topic when topics are per family.
FAMILY_TOPICS = {"job": "jobs", "schedule": "schedules", "queue": "queues", "agent": "agents", "workflow": "workflows"}
# A value larger than this is sent without its `data` (and "truncated": true): brokers refuse
# messages over their max.message.bytes (1 MB by default), and one refused event would stop the relay.
MAX_VALUE_BYTES = 256 * 1024
DEAD_TYPE = "job.dead"
AUDIT_FAMILY = "audit"  # the audit log's topic, `<events topic>.audit`, only with per-family topics


class Record(NamedTuple):
    """One Kafka message to produce (a tuple: the relay makes one per event, thousands a second)."""

    topic: str
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]

    @property
    def size(self) -> int:
        """Roughly what it takes in a record batch (payload plus per-record and header overhead)."""
        return len(self.key) + len(self.value) + 96


@dataclass(frozen=True, slots=True)
class Topics:
    """Where events go: one topic, or one per family; and the dead-letter topic ("" for none)."""

    events: str = "jobdeck.events"
    per_family: bool = False
    dead: str = "jobdeck.dead"

    @property
    def audit(self) -> str:
        """The audit log's topic ("" when topics are not per family: one topic mixes feed events only)."""
        return f"{self.events}.{AUDIT_FAMILY}" if self.per_family else ""

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


def event_value(e: Event) -> bytes:
    """The versioned value of an event: the event exactly as the WebSocket feed sends it, with
    `schema_version` first ({"schema_version", "seq", "ts", "type", "job_id", "queue", "data"};
    a job event's data holds the job summary as "job"). Spliced, not re-encoded: the relay writes
    every event, and one JSON parse and dump each would be most of its CPU."""
    if len(e.body) <= MAX_VALUE_BYTES:
        return b'{"schema_version":%d,' % SCHEMA_VERSION + e.body[1:]
    body = orjson.loads(e.body)
    body["data"] = {}
    return orjson.dumps({"schema_version": SCHEMA_VERSION, **body, "truncated": True})


def dead_value(seq: int, body: dict[str, Any]) -> dict[str, Any]:
    """What the dead-letter topic gets when a job goes dead: the job summary and its last error."""
    data = body.get("data") or {}
    return {
        "schema_version": SCHEMA_VERSION,
        "seq": seq,
        "ts": body["ts"],
        "job": data.get("job"),
        "error": data.get("error"),
        "attempt": data.get("attempt"),
        "outcome": data.get("outcome"),
    }


@cache
def _headers(type_: str) -> list[tuple[str, bytes]]:
    return [("jobdeck-type", type_.encode()), ("jobdeck-schema-version", b"%d" % SCHEMA_VERSION)]


def records_of(e: Event, topics: Topics) -> list[Record]:
    """The messages for one stored event: its record on the event topic, and for a job that went
    dead one more on the dead-letter topic."""
    assert e.seq is not None, "only stored events are relayed"
    if e.job_id is not None and e.type.startswith("job."):
        key = str(e.job_id).encode()  # the hot path: most events are about a job, and need no parse
    else:
        key = event_key(e.type, e.job_id, e.queue, orjson.loads(e.body).get("data") or {}).encode()
    headers = _headers(e.type)
    out = [Record(topics.for_type(e.type), key, event_value(e), headers)]
    if e.type == DEAD_TYPE and topics.dead:
        out.append(Record(topics.dead, key, orjson.dumps(dead_value(e.seq, orjson.loads(e.body))), headers))
    return out


def partition_of(key: bytes, partitions: int) -> int:
    """The partition of `key` among `partitions`, as the Java client's default partitioner (murmur2)
    picks it, so any other Kafka producer would put the key in the same partition."""
    return (int(murmur2(key)) & 0x7FFFFFFF) % partitions


def audit_event(entry: dict[str, Any]) -> Event:
    """An audit entry (as /v1/audit shows it) as the relay carries it: seq = the entry's id, type
    "audit.<action>", and the value docs/kafka-audit.schema.json describes as its body. `before`
    and `after` larger than MAX_VALUE_BYTES are left out ("truncated": true)."""
    row = {k: v for k, v in entry.items() if k not in ("id", "at")}
    value = {"schema_version": SCHEMA_VERSION, "seq": entry["id"], "type": f"audit.{entry['action']}",
             "time": entry["at"], **row}  # fmt: skip
    body = orjson.dumps(value)
    if len(body) > MAX_VALUE_BYTES:
        body = orjson.dumps({**value, "before": None, "after": None, "truncated": True})
    ts = datetime.fromisoformat(entry["at"].replace("Z", "+00:00")).timestamp()
    return Event(int(entry["id"]), ts, value["type"], None, None, body)


def audit_records_of(e: Event, topics: Topics) -> list[Record]:
    """The message for one audit entry: on the audit topic, keyed by its target ("job:12",
    "queue:emails"; "audit" for an entry without one), so one target's entries stay in order."""
    assert e.seq is not None and topics.audit, "audit entries are relayed only with per-family topics"
    target = orjson.loads(e.body).get("target")
    return [Record(topics.audit, (target or AUDIT_FAMILY).encode(), e.body, _headers(e.type))]
