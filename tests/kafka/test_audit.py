"""The audit log to Kafka (kafka_topics = per-family): every committed entry once on
jobdeck.events.audit, in id order, keyed by its target, valid against docs/kafka-audit.schema.json;
with one topic the audit log stays off Kafka."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from tests.auth.principals import TOKENS, auth_settings
from tests.auth.test_access import JOB
from tests.conftest import ROOT, start_node, stop_node, until
from tests.kafka.broker import Collector, TansuBroker, create_topic

AUDIT_VALUE = jsonschema.Draft202012Validator(json.loads((ROOT / "docs" / "kafka-audit.schema.json").read_text()))


def _http(url: str, who: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {TOKENS[who][0]}"}, timeout=10)


async def _admin_actions(url: str) -> list[dict[str, Any]]:
    """A few audited calls (allowed, refused, failed); the audit log as GET /v1/audit shows it, oldest first."""
    async with _http(url, "operator") as op, _http(url, "viewer") as viewer, _http(url, "admin") as admin:
        job = (await op.post("/v1/jobs", json={**JOB, "delay": 3600})).json()
        assert (await viewer.post(f"/v1/jobs/{job['id']}/cancel")).status_code == 403
        assert (await op.post(f"/v1/jobs/{job['id']}/cancel")).status_code == 200
        assert (await op.post(f"/v1/jobs/{job['id']}/pause")).status_code == 409
        assert (await admin.post("/v1/queues/payments/pause")).status_code == 200
        entries: list[dict[str, Any]] = (await admin.get("/v1/audit", params={"limit": 100})).json()["entries"]
    return list(reversed(entries))


async def test_each_audit_entry_once_on_the_audit_topic_in_id_order(broker: TansuBroker, tmp_path: Path) -> None:
    await create_topic(broker.bootstrap, "jobdeck.events.audit", 1)  # one partition: one order to check
    settings = auth_settings(tmp_path, kafka_bootstrap=broker.bootstrap, kafka_topics="per-family",
                             relay_lease_seconds=2.0, rate_limit_per_second=0)  # fmt: skip
    node, url, task = await start_node(settings, local_agent=False)
    try:
        async with Collector(broker.bootstrap, "jobdeck.events.audit", "jobdeck.events.jobs") as got:
            entries = await _admin_actions(url)
            assert [(e["action"], e["outcome"]) for e in entries] == [
                ("create_job", "ok"), ("cancel_job", "refused"), ("cancel_job", "ok"), ("pause_job", "failed"),
                ("pause_queue", "ok"),
            ]  # fmt: skip
            ids = [e["id"] for e in entries]
            await until(lambda: got.seqs("jobdeck.events.audit") >= set(ids), 20, "every audit entry on its topic")
            async with _http(url, "admin") as admin:
                lag = (await admin.get("/v1/stats")).json()["relays"]["kafka-audit"]
            assert lag["acked_seq"] <= ids[-1] and lag["behind_events"] <= ids[-1] - lag["acked_seq"]
        messages = [m for m in got.messages if m.topic == "jobdeck.events.audit"]
        values = [json.loads(m.value) for m in messages]
        assert [v["seq"] for v in values] == ids, "each entry once, in id order"
        for m, v, e in zip(messages, values, entries, strict=True):
            AUDIT_VALUE.validate(v)
            assert v["type"] == f"audit.{e['action']}" and v["time"] == e["at"]
            assert {k: v[k] for k in e if k not in ("id", "at")} == {k: e[k] for k in e if k not in ("id", "at")}
            assert m.key == e["target"].encode(), (m.key, e["target"])
            assert dict(m.headers)["jobdeck-type"] == v["type"].encode()
        assert values[1]["role"] == "viewer" and "jobs.write needs operator" in values[1]["message"]
        assert values[2]["before"][values[2]["target"]]["state"] == "scheduled"
        assert messages[-1].key == b"queue:payments"
        tokens = [tok for tok, _, _ in TOKENS.values()]
        assert not any(tok.encode() in m.value for m in messages for tok in tokens), "no secret on the topic"
        assert not [v for v in got.values("jobdeck.events.jobs") if v["type"].startswith("audit.")]
    finally:
        await stop_node(node, task)


async def test_with_one_topic_the_audit_log_stays_off_kafka(broker: TansuBroker, tmp_path: Path) -> None:
    """One topic carries the feed's events only (what /v1/events sends, to every reader of the
    topic); the audit log is admin-only, so it goes out only to a topic of its own."""
    settings = auth_settings(tmp_path, kafka_bootstrap=broker.bootstrap, relay_lease_seconds=2.0,
                             rate_limit_per_second=0)  # fmt: skip
    node, url, task = await start_node(settings, local_agent=False)
    try:
        async with Collector(broker.bootstrap, "jobdeck.events", "jobdeck.events.audit") as got:
            entries = await _admin_actions(url)
            assert len(entries) == 5
            async with _http(url, "admin") as admin:

                async def all_relayed() -> bool:
                    last = (await admin.get("/healthz")).json()["last_seq"]
                    return got.seqs("jobdeck.events") >= set(range(1, last + 1))

                await until(all_relayed, 20, "every event on jobdeck.events")
                assert "kafka-audit" not in (await admin.get("/v1/stats")).json()["relays"]
        assert got.values("jobdeck.events.audit") == []
        assert not [v for v in got.values("jobdeck.events") if v["type"].startswith("audit.")]
    finally:
        await stop_node(node, task)
