"""Roles x routes: every API route, called by each role on a real node with static tokens.

The table below is the test's own statement of who may call what. A route the app serves
that is not in it fails `test_every_route_is_in_the_matrix`, so a new route cannot ship
without someone deciding who may call it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute, APIWebSocketRoute

from tests.auth.principals import TOKENS, Deck, auth_settings
from tests.conftest import node_settings, start_node, stop_node

JOB = {"name": "charge", "queue": "payments", "task": {"kind": "shell", "command": "true"}}
SCHEDULE = {"name": "nightly", "cron": "0 3 * * *", "job": JOB}
HOOK = {"kind": "webhook", "name": "matrix-hook", "url": "http://127.0.0.1:9/hook"}
WORKFLOW = {"name": "etl", "jobs": [{**JOB, "ref": "a", "delay": 3600}, {**JOB, "ref": "b", "depends_on": ["a"]}]}

# (method, path) -> (a request maker, which roles get past the access check).
# The maker gets fresh objects (a waiting job and a schedule in the operator's queue).
R, OP, A = "viewer", "operator", "admin"
MATRIX: dict[tuple[str, str], tuple[Any, set[str]]] = {
    ("GET", "/healthz"): (lambda o: ("/healthz", None), {"anonymous", R, OP, A, "agent"}),
    ("GET", "/livez"): (lambda o: ("/livez", None), {"anonymous", R, OP, A, "agent"}),
    ("GET", "/readyz"): (lambda o: ("/readyz", None), {"anonymous", R, OP, A, "agent"}),
    ("GET", "/auth/config"): (lambda o: ("/auth/config", None), {"anonymous", R, OP, A, "agent"}),
    ("GET", "/auth/me"): (lambda o: ("/auth/me", None), {R, OP, A, "agent"}),
    # the browser sign-in routes are public (their own checks are tested with the real IdP)
    ("GET", "/auth/login"): (lambda o: ("/auth/login", None), {"anonymous", R, OP, A, "agent"}),
    ("GET", "/auth/callback"): (lambda o: ("/auth/callback", None), {"anonymous", R, OP, A, "agent"}),
    # a ticket is itself the credential: a made-up one is refused (401) whoever sends it
    ("POST", "/auth/ticket"): (lambda o: ("/auth/ticket", {"ticket": "x.y"}), set()),
    ("POST", "/auth/logout"): (lambda o: ("/auth/logout", None), {"anonymous", R, OP, A, "agent"}),
    ("POST", "/v1/jobs"): (lambda o: ("/v1/jobs", JOB), {OP, A}),
    ("POST", "/v1/jobs/batch"): (lambda o: ("/v1/jobs/batch", {"jobs": [JOB, JOB]}), {OP, A}),
    ("POST", "/v1/jobs/bulk"): (lambda o: ("/v1/jobs/bulk", {"action": "pause", "ids": [o["job"]]}), {OP, A}),
    ("GET", "/v1/jobs"): (lambda o: ("/v1/jobs", None), {R, OP, A}),
    ("GET", "/v1/jobs/{job_id}"): (lambda o: (f"/v1/jobs/{o['job']}", None), {R, OP, A}),
    ("GET", "/v1/jobs/{job_id}/output"): (lambda o: (f"/v1/jobs/{o['job']}/output", None), {R, OP, A}),
    ("GET", "/v1/jobs/{job_id}/attempts"): (lambda o: (f"/v1/jobs/{o['job']}/attempts", None), {R, OP, A}),
    ("GET", "/v1/jobs/{job_id}/events"): (lambda o: (f"/v1/jobs/{o['job']}/events", None), {R, OP, A}),
    ("POST", "/v1/jobs/{job_id}/cancel"): (lambda o: (f"/v1/jobs/{o['job']}/cancel", None), {OP, A}),
    ("POST", "/v1/jobs/{job_id}/pause"): (lambda o: (f"/v1/jobs/{o['job']}/pause", None), {OP, A}),
    ("POST", "/v1/jobs/{job_id}/resume"): (lambda o: (f"/v1/jobs/{o['job']}/resume", None), {OP, A}),
    ("POST", "/v1/jobs/{job_id}/retry"): (lambda o: (f"/v1/jobs/{o['job']}/retry", None), {OP, A}),
    ("POST", "/v1/jobs/{job_id}/run-now"): (lambda o: (f"/v1/jobs/{o['job']}/run-now", None), {OP, A}),
    ("POST", "/v1/jobs/{job_id}/priority"): (lambda o: (f"/v1/jobs/{o['job']}/priority", {"priority": 5}), {OP, A}),
    ("POST", "/v1/workflows"): (lambda o: ("/v1/workflows", WORKFLOW), {OP, A}),
    ("GET", "/v1/workflows"): (lambda o: ("/v1/workflows", None), {R, OP, A}),
    ("GET", "/v1/workflows/{workflow_id}"): (lambda o: (f"/v1/workflows/{o['workflow']}", None), {R, OP, A}),
    ("POST", "/v1/workflows/{workflow_id}/cancel"): (
        lambda o: (f"/v1/workflows/{o['workflow']}/cancel", None),
        {OP, A},
    ),
    ("POST", "/v1/workflows/{workflow_id}/pause"): (lambda o: (f"/v1/workflows/{o['workflow']}/pause", None), {OP, A}),
    ("POST", "/v1/workflows/{workflow_id}/resume"): (
        lambda o: (f"/v1/workflows/{o['workflow']}/resume", None),
        {OP, A},
    ),
    ("GET", "/v1/queues"): (lambda o: ("/v1/queues", None), {R, OP, A}),
    ("POST", "/v1/queues/{name}/pause"): (lambda o: ("/v1/queues/payments/pause", None), {OP, A}),
    ("POST", "/v1/queues/{name}/resume"): (lambda o: ("/v1/queues/payments/resume", None), {OP, A}),
    ("PUT", "/v1/queues/{name}/concurrency"): (
        lambda o: ("/v1/queues/payments/concurrency", {"concurrency": 3}),
        {A},
    ),
    ("PATCH", "/v1/queues/{name}"): (lambda o: ("/v1/queues/payments", {"rate_limit": 5}), {A}),
    ("GET", "/v1/breakers"): (lambda o: ("/v1/breakers", None), {R, OP, A}),
    # an operator resets the breakers of its teams' queues (no breaker here: a 404 past the check)
    ("POST", "/v1/queues/{name}/breakers/{host}/reset"): (
        lambda o: ("/v1/queues/payments/breakers/127.0.0.1:9/reset", None),
        {OP, A},
    ),
    ("GET", "/v1/queues/{name}/keys"): (lambda o: ("/v1/queues/payments/keys", None), {R, OP, A}),
    ("POST", "/v1/schedules"): (lambda o: ("/v1/schedules", SCHEDULE), {OP, A}),
    ("POST", "/v1/schedules/preview"): (lambda o: ("/v1/schedules/preview", {"cron": "*/5 * * * *"}), {R, OP, A}),
    ("GET", "/v1/schedules"): (lambda o: ("/v1/schedules", None), {R, OP, A}),
    ("GET", "/v1/schedules/{schedule_id}"): (lambda o: (f"/v1/schedules/{o['schedule']}", None), {R, OP, A}),
    ("PATCH", "/v1/schedules/{schedule_id}"): (
        lambda o: (f"/v1/schedules/{o['schedule']}", {"name": "renamed"}),
        {OP, A},
    ),
    ("DELETE", "/v1/schedules/{schedule_id}"): (lambda o: (f"/v1/schedules/{o['schedule']}", None), {OP, A}),
    ("POST", "/v1/schedules/{schedule_id}/pause"): (lambda o: (f"/v1/schedules/{o['schedule']}/pause", None), {OP, A}),
    ("POST", "/v1/schedules/{schedule_id}/resume"): (
        lambda o: (f"/v1/schedules/{o['schedule']}/resume", None),
        {OP, A},
    ),
    ("POST", "/v1/schedules/{schedule_id}/run"): (lambda o: (f"/v1/schedules/{o['schedule']}/run", None), {OP, A}),
    ("GET", "/v1/schedules/{schedule_id}/preview"): (
        lambda o: (f"/v1/schedules/{o['schedule']}/preview", None),
        {R, OP, A},
    ),
    ("POST", "/v1/schedules/{schedule_id}/backfill"): (
        lambda o: (
            f"/v1/schedules/{o['schedule']}/backfill",
            {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T01:00:00Z", "dry_run": True},
        ),
        {OP, A},
    ),
    ("GET", "/v1/agents"): (lambda o: ("/v1/agents", None), {R, OP, A}),
    ("POST", "/v1/agents/{name}/drain"): (lambda o: ("/v1/agents/nobody/drain", None), {A}),
    ("GET", "/v1/stats"): (lambda o: ("/v1/stats", None), {R, OP, A}),
    ("GET", "/v1/stats/history"): (lambda o: ("/v1/stats/history", None), {R, OP, A}),
    ("GET", "/metrics"): (lambda o: ("/metrics", None), {R, OP, A}),
    ("GET", "/metrics/cluster"): (lambda o: ("/metrics/cluster", None), {R, OP, A}),
    ("GET", "/v1/stats/slo"): (lambda o: ("/v1/stats/slo", None), {R, OP, A}),
    ("GET", "/v1/archive"): (lambda o: ("/v1/archive", None), {A}),
    ("GET", "/v1/archive/jobs/{job_id}"): (lambda o: ("/v1/archive/jobs/1", None), {A}),
    ("POST", "/v1/archive/restore"): (lambda o: ("/v1/archive/restore", {"file": "jobs-2026-01-01.jsonl.gz"}), {A}),
    ("GET", "/v1/events"): (lambda o: ("/v1/events", None), {R, OP, A}),
    ("GET", "/v1/audit"): (lambda o: ("/v1/audit", None), {A}),
    # notifications: admin only (ids that do not exist: a 404 past the check is still "reached")
    ("GET", "/v1/notifications/channels"): (lambda o: ("/v1/notifications/channels", None), {A}),
    ("POST", "/v1/notifications/channels"): (lambda o: ("/v1/notifications/channels", HOOK), {A}),
    ("GET", "/v1/notifications/channels/{channel_id}"): (lambda o: ("/v1/notifications/channels/999", None), {A}),
    ("PATCH", "/v1/notifications/channels/{channel_id}"): (
        lambda o: ("/v1/notifications/channels/999", {"enabled": False}),
        {A},
    ),
    ("DELETE", "/v1/notifications/channels/{channel_id}"): (lambda o: ("/v1/notifications/channels/999", None), {A}),
    ("GET", "/v1/notifications/channels/{channel_id}/log"): (
        lambda o: ("/v1/notifications/channels/999/log", None),
        {A},
    ),
    ("POST", "/v1/notifications"): (lambda o: ("/v1/notifications", {"channel_id": 999}), {A}),
    ("GET", "/v1/notifications"): (lambda o: ("/v1/notifications", None), {A}),
    ("GET", "/v1/notifications/{notification_id}"): (lambda o: ("/v1/notifications/999", None), {A}),
    ("POST", "/v1/notifications/{notification_id}/replay"): (lambda o: ("/v1/notifications/999/replay", None), {A}),
    ("GET", "/v1/notifications/rules"): (lambda o: ("/v1/notifications/rules", None), {A}),
    ("POST", "/v1/notifications/rules"): (
        lambda o: ("/v1/notifications/rules", {"name": "r", "events": ["job.dead"], "channels": [999]}),
        {A},
    ),
    ("GET", "/v1/notifications/rules/{rule_id}"): (lambda o: ("/v1/notifications/rules/999", None), {A}),
    ("PATCH", "/v1/notifications/rules/{rule_id}"): (
        lambda o: ("/v1/notifications/rules/999", {"enabled": False}),
        {A},
    ),
    ("DELETE", "/v1/notifications/rules/{rule_id}"): (lambda o: ("/v1/notifications/rules/999", None), {A}),
    ("GET", "/v1/notifications/hooks"): (lambda o: ("/v1/notifications/hooks", None), {A}),
    ("POST", "/v1/notifications/hooks"): (
        lambda o: ("/v1/notifications/hooks", {"name": f"h{o['job']}", "job": {"task": JOB["task"]}}),
        {A},
    ),
    ("GET", "/v1/notifications/hooks/{hook_id}"): (lambda o: ("/v1/notifications/hooks/999", None), {A}),
    ("PATCH", "/v1/notifications/hooks/{hook_id}"): (
        lambda o: ("/v1/notifications/hooks/999", {"enabled": False}),
        {A},
    ),
    ("DELETE", "/v1/notifications/hooks/{hook_id}"): (lambda o: ("/v1/notifications/hooks/999", None), {A}),
    # public: the hook's own secret is the credential (an unknown hook is a 404 for everyone)
    ("POST", "/v1/hooks/{name}"): (lambda o: ("/v1/hooks/nohook", {}), {"anonymous", R, OP, A, "agent"}),
}
WEBSOCKETS = {"/v1/events", "/v1/agents"}  # authenticated in their handlers: see test_websocket_*


def test_every_route_is_in_the_matrix(tmp_path: Path) -> None:
    from core.node import Node

    app = Node(auth_settings(tmp_path)).app
    routes = []
    for r in app.routes:  # FastAPI keeps included routers nested
        contexts = r.effective_route_contexts() if hasattr(r, "effective_route_contexts") else []
        routes += [c.original_route for c in contexts]
    served = {(m, r.path_format) for r in routes if isinstance(r, APIRoute) for m in r.methods if m != "HEAD"}
    sockets = {r.path for r in routes if isinstance(r, APIWebSocketRoute)}
    assert served - set(MATRIX) == set(), "routes without a row in the matrix: decide who may call them"
    assert set(MATRIX) - served == set(), "rows for routes the app no longer serves"
    assert sockets == WEBSOCKETS


async def _fresh_objects(deck: Deck) -> dict[str, Any]:
    async with deck.http("admin") as admin:
        job = (await admin.post("/v1/jobs", json={**JOB, "delay": 3600})).json()
        schedule = (await admin.post("/v1/schedules", json=SCHEDULE)).json()
        workflow = (await admin.post("/v1/workflows", json=WORKFLOW)).json()["workflow"]
    return {"job": job["id"], "schedule": schedule["id"], "workflow": workflow["id"]}


@pytest.mark.parametrize("who", ["anonymous", "viewer", "operator", "admin", "agent"])
async def test_each_role_reaches_exactly_its_routes(deck: Deck, who: str) -> None:
    wrong = []
    async with deck.http(None if who == "anonymous" else who) as http:
        for (method, route), (make, allowed) in MATRIX.items():
            path, body = make(await _fresh_objects(deck))
            resp = await http.request(method, path, json=body)
            passed = resp.status_code not in (401, 403)
            if passed != (who in allowed):
                wrong.append(f"{method} {route}: {resp.status_code} {resp.text[:120]}")
            if not passed and who == "anonymous":
                assert resp.status_code == 401 and resp.headers["www-authenticate"].startswith("Bearer"), route
    assert wrong == [], f"{who} got past (or was stopped at) the wrong routes:\n" + "\n".join(wrong)


async def test_an_operator_acts_only_in_the_teams_queues(deck: Deck) -> None:
    async with deck.http("admin") as admin:
        ml_job = (await admin.post("/v1/jobs", json={**JOB, "queue": "ml", "delay": 3600})).json()
        pay_job = (await admin.post("/v1/jobs", json={**JOB, "queue": "payments-eu", "delay": 3600})).json()
    async with deck.http("operator") as op:
        resp = await op.post(f"/v1/jobs/{ml_job['id']}/cancel")
        assert resp.status_code == 403
        assert "queue 'ml' is not one of operator's teams' queues" in resp.json()["message"]
        assert (await op.post(f"/v1/jobs/{pay_job['id']}/pause")).status_code == 200  # payments-* is theirs
        resp = await op.post("/v1/jobs/batch", json={"jobs": [JOB, {**JOB, "queue": "ml"}]})
        assert resp.status_code == 403, "one job in a foreign queue refuses the whole batch"
        listed = (await op.get("/v1/jobs")).json()["jobs"]
        assert {j["queue"] for j in listed} == {"payments-eu"}, "the list shows only the team's queues"
        bulk = (await op.post("/v1/jobs/bulk", json={"action": "cancel", "ids": [ml_job["id"], pay_job["id"]]})).json()
        assert bulk["changed"] == 1 and bulk["errors"][0]["id"] == ml_job["id"]
        assert bulk["errors"][0]["error"] == "forbidden"
        before = len((await op.get("/v1/jobs")).json()["jobs"])
        resp = await op.post("/v1/jobs", json={**JOB, "queue": "payments-eu", "depends_on": [ml_job["id"]]})
        assert resp.status_code == 403 and resp.json()["field"] == "depends_on[0]", resp.text
        assert resp.json()["message"].startswith("depends_on[0]: job"), resp.text
        resp = await op.post("/v1/jobs/batch", json={"jobs": [{**JOB, "queue": "payments-eu"},
                                                              {**JOB, "queue": "payments-eu", "depends_on": [ml_job["id"]]}]})  # fmt: skip
        assert resp.status_code == 403 and resp.json()["field"] == "jobs[1].depends_on[0]", resp.text
        assert len((await op.get("/v1/jobs")).json()["jobs"]) == before, "no partial write: the batch's first job too"
    async with deck.http("admin") as admin:
        ml_flow = {"name": "ml", "jobs": [{**JOB, "ref": "a", "delay": 3600}, {**JOB, "ref": "b", "queue": "ml"}]}
        ml_wf = (await admin.post("/v1/workflows", json=ml_flow)).json()["workflow"]
    async with deck.http("operator") as op:
        assert (await op.get(f"/v1/workflows/{ml_wf['id']}")).status_code == 403, "one job in a foreign queue hides it"
        assert (await op.post(f"/v1/workflows/{ml_wf['id']}/cancel")).status_code == 403
        assert ml_wf["id"] not in [w["id"] for w in (await op.get("/v1/workflows")).json()["workflows"]]
    async with deck.http("admin") as admin:
        assert (await admin.get(f"/v1/jobs/{ml_job['id']}")).json()["state"] == "scheduled", "refused: unchanged"


async def test_a_viewer_sees_but_cannot_act_and_is_told_why(deck: Deck) -> None:
    objects = await _fresh_objects(deck)
    async with deck.http("viewer") as viewer:
        me = (await viewer.get("/auth/me")).json()
        assert me["role"] == "viewer" and me["queues"] == ["payments", "payments-*"]
        assert "jobs.write" not in me["allowed"] and "jobs.read" in me["allowed"]
        resp = await viewer.post(f"/v1/jobs/{objects['job']}/cancel")
        assert resp.status_code == 403
        assert resp.json()["message"] == "viewer has the role viewer; jobs.write needs operator or above"


async def test_bad_tokens_get_401_saying_which_check_failed(deck: Deck) -> None:
    async with httpx.AsyncClient(base_url=deck.url) as http:
        resp = await http.get("/v1/jobs")
        assert resp.status_code == 401 and "no credentials" in resp.json()["message"]
        assert resp.headers["www-authenticate"] == 'Bearer realm="jobdeck"'
        resp = await http.get("/v1/jobs", headers={"authorization": "Bearer jd_not_a_configured_token"})
        assert resp.status_code == 401 and "unknown API token" in resp.json()["message"]
        assert 'error="invalid_token"' in resp.headers["www-authenticate"]
        resp = await http.get("/v1/jobs", headers={"authorization": "Basic dXNlcjpwYXNz"})
        assert resp.status_code == 401 and "Bearer <token>" in resp.json()["message"]


async def test_sign_in_none_refuses_to_listen_beyond_loopback(tmp_path: Path) -> None:
    from core.errors import InvalidInput
    from core.node import Node

    with pytest.raises(InvalidInput, match="bind to 127\\.0\\.0\\.1"):
        Node(node_settings(tmp_path, host="0.0.0.0"))
    with pytest.raises(InvalidInput, match="no tokens are configured"):
        Node(node_settings(tmp_path, auth="token"))


async def test_rate_limit_answers_429_with_retry_after(tmp_path: Path) -> None:
    node, url, task = await start_node(
        auth_settings(tmp_path, rate_limit_per_second=2, rate_limit_burst=5), local_agent=False
    )
    try:
        async with httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {TOKENS['viewer'][0]}"}) as v:
            statuses = [(await v.get("/v1/queues")).status_code for _ in range(8)]
            assert statuses[:5] == [200] * 5 and 429 in statuses[5:], statuses
            resp = await v.get("/v1/queues")
            assert resp.status_code == 429 and int(resp.headers["retry-after"]) >= 1
            assert "at most 2 a second" in resp.json()["message"]
            async with httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {TOKENS['admin'][0]}"}) as a:
                assert (await a.get("/v1/queues")).status_code == 200, "each principal has its own bucket"
            await asyncio.sleep(float(resp.headers["retry-after"]))
            assert (await v.get("/v1/queues")).status_code == 200, "after Retry-After it goes through"
    finally:
        await stop_node(node, task)


async def test_an_agent_token_serves_only_its_queues(deck: Deck, tmp_path: Path) -> None:
    from tests.conftest import spawn_agent, until

    token = TOKENS["agent"][0]
    greedy = spawn_agent(deck.url, "greedy", tmp_path, "--queues", "*", "--token", token)
    assert await asyncio.to_thread(greedy.wait, 30) == 1
    log = (tmp_path / "agent-greedy.log").read_text()
    assert "may serve only payments, payments-*: list them with --queues" in log, log
    nameless = spawn_agent(deck.url, "nameless", tmp_path, "--queues", "payments")  # no token at all
    assert await asyncio.to_thread(nameless.wait, 30) == 1
    assert "sign-in refused: no credentials" in (tmp_path / "agent-nameless.log").read_text()
    agent = spawn_agent(deck.url, "payer", tmp_path, "--queues", "payments", "--token", token)
    try:
        async with deck.http("operator") as op:
            job = (await op.post("/v1/jobs", json=JOB)).json()

            async def finished() -> bool:
                return (await op.get(f"/v1/jobs/{job['id']}")).json()["state"] == "succeeded"

            await until(finished, timeout=20, what="the agent token's agent ran the job")
        async with deck.http("agent") as as_agent:  # an agent token is no key to the REST API
            assert (await as_agent.get("/v1/jobs")).status_code == 403
    finally:
        agent.terminate()
        await asyncio.to_thread(agent.wait, 30)


async def test_login_with_a_pasted_token_checks_it_before_caching_it(deck: Deck, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    env.pop("JOBDECK_TOKEN", None)

    async def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "core.cli", "--server", deck.url, *args]
        return await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, env=env, cwd=ROOT,
                                       timeout=30)  # fmt: skip

    bad = await cli("login", "--token", "jd_wrong")
    assert bad.returncode == 1 and bad.stderr.strip().startswith("error: unknown API token"), bad.stderr
    assert not (tmp_path / "jobdeck" / "credentials.json").exists(), "a refused token is not cached"
    anonymous = await cli("jobs", "ls")
    assert anonymous.returncode == 1 and "jobdeck login --server URL" in anonymous.stderr
    ok = await cli("login", "--token", TOKENS["viewer"][0])
    assert ok.returncode == 0 and "as viewer (viewer)" in ok.stdout, ok.stdout + ok.stderr
    assert (await cli("jobs", "ls")).returncode == 0, "later commands use the cached token"
    assert (await cli("logout")).stdout.startswith("signed out of")
    assert (await cli("jobs", "ls")).returncode == 1
