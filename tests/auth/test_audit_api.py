"""The audit log through the API and the CLI: allowed, refused and failed calls, who and from where."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from tests.api.test_bad_input import refused
from tests.auth.principals import TOKENS, Deck
from tests.auth.test_access import JOB
from tests.conftest import ROOT


async def test_allowed_refused_and_failed_calls_are_audited(deck: Deck) -> None:
    async with deck.http("operator") as op, deck.http("viewer") as viewer, deck.http("admin") as admin:
        job = (await op.post("/v1/jobs", json={**JOB, "delay": 3600}, headers={"user-agent": "ops-script/1"})).json()
        assert (await viewer.post(f"/v1/jobs/{job['id']}/cancel")).status_code == 403
        assert (await op.post(f"/v1/jobs/{job['id']}/cancel")).status_code == 200
        assert (await op.post(f"/v1/jobs/{job['id']}/pause")).status_code == 409  # cancelled: cannot pause
        assert (await op.get(f"/v1/jobs/{job['id']}")).status_code == 200  # reads are not audited
        assert (await op.get("/v1/audit")).status_code == 403, "only admins read the audit log"
        page = (await admin.get("/v1/audit")).json()
    rows = [(e["actor"], e["action"], e["target"], e["outcome"]) for e in reversed(page["entries"])]
    assert rows == [
        ("operator", "create_job", f"job:{job['id']}", "ok"),
        ("viewer", "cancel_job", f"job:{job['id']}", "refused"),
        ("operator", "cancel_job", f"job:{job['id']}", "ok"),
        ("operator", "pause_job", f"job:{job['id']}", "failed"),
    ]
    created, refused, cancelled, failed = reversed(page["entries"])
    assert created["user_agent"] == "ops-script/1" and created["ip"] == "127.0.0.1" and created["role"] == "operator"
    assert created["before"] is None and created["after"][0]["type"] == "job.created"
    assert refused["message"] == "viewer has the role viewer; jobs.write needs operator or above"
    assert cancelled["before"][f"job:{job['id']}"]["state"] == "scheduled"
    assert cancelled["after"][0]["data"]["job"]["state"] == "cancelled"
    assert "cancelled" in failed["message"]


async def test_the_cli_shows_the_audit_log_to_admins_only(deck: Deck) -> None:
    async with deck.http("operator") as op:
        await op.post("/v1/queues/payments/pause")

    async def cli(who: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "JOBDECK_TOKEN": TOKENS[who][0], "XDG_CONFIG_HOME": "/nonexistent"}
        cmd = [sys.executable, "-m", "core.cli", "--server", deck.url, *args]
        # in a thread: the node under test serves on this test's event loop
        return await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, env=env, cwd=ROOT,
                                       timeout=30)  # fmt: skip

    out = await cli("admin", "audit", "--actor", "operator")
    assert out.returncode == 0, out.stderr
    assert "pause_queue" in out.stdout and "queue:payments" in out.stdout
    out = await cli("operator", "audit")
    assert out.returncode == 1 and out.stderr.strip() == (
        "error: operator has the role operator; audit.read needs admin or above"
    ), out.stderr
    out = await cli("operator", "whoami")
    assert (
        out.stdout.strip() == "operator (operator, signed in by token); teams: payments; queues: payments, payments-*"
    )


async def test_a_breaker_reset_is_an_operators_in_its_queues_and_audited(deck: Deck) -> None:
    from core.breaker import BreakerSettings

    store = deck.node.engine.store
    await store.record_breaker_outcomes([("payments", "10.0.0.9:80", i, False) for i in range(5)],
                                        {"payments": BreakerSettings()})  # fmt: skip
    await store.record_breaker_outcomes([("ml", "10.0.0.9:80", 9, False)] * 5, {"ml": BreakerSettings()})
    async with deck.http("operator") as op, deck.http("viewer") as viewer, deck.http("admin") as admin:
        path = "/v1/queues/payments/breakers/10.0.0.9:80/reset"
        assert (await viewer.post(path)).status_code == 403
        assert (await op.post("/v1/queues/ml/breakers/10.0.0.9:80/reset")).status_code == 403, "not its team's queue"
        refused(await op.post("/v1/queues/payments/breakers/10.0.0.9:81/reset"), "host", "no circuit breaker",
                status=404)  # fmt: skip
        done = await op.post(path)
        assert done.status_code == 200, done.text
        assert (done.json()["state"], done.json()["times_opened"], done.json()["requests"]) == ("closed", 1, 0), (
            done.json()
        )
        page = (await admin.get("/v1/audit", params={"action": "reset_breaker"})).json()
    rows = [(e["actor"], e["target"], e["outcome"]) for e in reversed(page["entries"])]
    assert rows == [("viewer", "queue:payments", "refused"), ("operator", "queue:ml", "refused"),
                    ("operator", "queue:payments", "failed"), ("operator", "queue:payments", "ok")], rows  # fmt: skip
    after = page["entries"][0]["after"][0]
    assert (after["type"], after["data"]["reset"], after["data"]["breaker"]["host"]) == ("breaker.closed", True,
                                                                                          "10.0.0.9:80"), after  # fmt: skip
    assert [b.key for b in await store.list_breakers(open_only=True)] == ["10.0.0.9:80"], "ml's stays open"


async def test_a_queue_limit_change_is_audited_with_the_settings_before_and_after(deck: Deck) -> None:
    async with deck.http("operator") as op, deck.http("admin") as admin:
        first = await admin.patch("/v1/queues/payments", json={"rate_limit": 5, "rate_burst": 2, "key_concurrency": 2})
        assert first.status_code == 200, first.text
        assert (await op.patch("/v1/queues/payments", json={"concurrency": 1})).status_code == 403
        lifted = await admin.patch("/v1/queues/payments", json={"rate_limit": None, "fairness_weights": {"gold": 3}})
        assert lifted.status_code == 200, lifted.text
        page = (await admin.get("/v1/audit", params={"target": "queue:payments"})).json()
    rows = [(e["actor"], e["action"], e["outcome"]) for e in reversed(page["entries"])]
    assert rows == [("admin", "change_queue", "ok"), ("operator", "change_queue", "refused"),
                    ("admin", "change_queue", "ok")], rows  # fmt: skip
    lift, refusal, first = page["entries"]
    limits = ("rate_limit", "rate_burst", "key_concurrency", "fairness_weights")

    def settings(q: dict[str, object]) -> tuple[object, ...]:
        return tuple(q[k] for k in limits)

    assert settings(first["before"]["queue:payments"]) == (None, None, None, None), first["before"]
    assert settings(first["after"][0]["data"]["queue"]) == (5.0, 2, 2, None), first["after"]
    assert refusal["message"] == "operator has the role operator; queues.configure needs admin or above"
    assert settings(lift["before"]["queue:payments"]) == (5.0, 2, 2, None), "the settings it changed"
    assert settings(lift["after"][0]["data"]["queue"]) == (None, 2, 2, {"gold": 3.0}), lift["after"]
