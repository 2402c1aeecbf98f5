"""Incoming hooks on a real node (SQLite and PostgreSQL): calls signed with the Standard Webhooks
reference library, or carrying a bearer token, submit a job that sees the request's body."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook

from tests.notify.conftest import Deck, wait_until

ECHO = {"kind": "shell", "command": 'printf "%s|%s" "$JOBDECK_HOOK_ID" "$JOBDECK_HOOK_BODY"'}


def signed(secret: str, msg_id: str, body: bytes, at: float | None = None) -> dict[str, str]:
    ts = datetime.fromtimestamp(int(at if at is not None else time.time()), UTC)
    sig = Webhook(secret).sign(msg_id, ts, body.decode())
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(ts.timestamp())), "webhook-signature": sig,
            "content-type": "application/json"}  # fmt: skip


async def jobs_of(deck: Deck) -> list[dict]:
    return (await deck.call("GET", "/v1/jobs", status=200))["jobs"]


async def output(deck: Deck, job_id: int) -> str | None:
    job = await deck.call("GET", f"/v1/jobs/{job_id}", status=200)
    if job["state"] != "succeeded":
        return None
    return str((await deck.call("GET", f"/v1/jobs/{job_id}/output", status=200)).get("output"))


async def test_a_signed_call_submits_the_job_with_its_body_and_a_replay_or_forgery_submits_nothing(deck: Deck) -> None:
    hook = await deck.call("POST", "/v1/notifications/hooks", {"name": "deploy", "job": {"queue": "ci", "task": ECHO}},
                           201)  # fmt: skip
    secret = hook["secret"]
    assert secret.startswith("whsec_") and hook["path"] == "/v1/hooks/deploy"
    assert "secret" not in await deck.call("GET", f"/v1/notifications/hooks/{hook['id']}", status=200)

    body = b'{"ref": "main", "sha": "abc123"}'
    r = await deck.http.post("/v1/hooks/deploy", content=body, headers=signed(secret, "msg_1", body))
    assert r.status_code == 202, r.text
    job = r.json()["job"]
    assert job["queue"] == "ci" and job["name"] == "hook:deploy"
    out = await wait_until(lambda: output(deck, job["id"]), what="the hook's job to run")
    assert out == 'msg_1|{"ref": "main", "sha": "abc123"}', out

    again = await deck.http.post("/v1/hooks/deploy", content=body, headers=signed(secret, "msg_1", body))
    assert again.status_code == 409 and again.json()["field"] == "webhook-id", again.text
    forged = signed(secret, "msg_2", body)
    tampered = await deck.http.post("/v1/hooks/deploy", content=b'{"ref": "evil"}', headers=forged)
    assert tampered.status_code == 401 and "does not match" in tampered.json()["message"], tampered.text
    stale = await deck.http.post(
        "/v1/hooks/deploy", content=body, headers=signed(secret, "msg_3", body, time.time() - 600)
    )
    assert stale.status_code == 401 and "away from now" in stale.json()["message"], stale.text
    unsigned = await deck.http.post("/v1/hooks/deploy", content=body)
    assert unsigned.status_code == 401
    assert [j["id"] for j in await jobs_of(deck)] == [job["id"]], "only the genuine call submitted a job"

    audit = (await deck.call("GET", "/v1/audit", status=200))["entries"]
    refused = [e for e in audit if e["actor"] == "hook:deploy" and e["outcome"] == "refused"]
    assert len(refused) == 3 and any("does not match" in e["message"] for e in refused), audit[:5]


async def test_a_bearer_hook_takes_its_token_only_and_can_be_turned_off(deck: Deck) -> None:
    hook = await deck.call("POST", "/v1/notifications/hooks",
                           {"name": "alerts-in", "auth": "bearer", "job": {"task": ECHO}}, 201)  # fmt: skip
    token = hook["token"]
    assert hook["secret"] is None and len(token) >= 32
    ok = await deck.http.post(
        "/v1/hooks/alerts-in", content=b"plain text", headers={"authorization": f"Bearer {token}"}
    )
    assert ok.status_code == 202, ok.text
    out = await wait_until(lambda: output(deck, ok.json()["job"]["id"]), what="the hook's job to run")
    assert out == "|plain text"
    wrong = await deck.http.post("/v1/hooks/alerts-in", content=b"x", headers={"authorization": "Bearer " + "x" * 40})
    assert wrong.status_code == 401 and "not this hook's" in wrong.json()["message"]
    await deck.call("PATCH", f"/v1/notifications/hooks/{hook['id']}", {"enabled": False}, 200)
    off = await deck.http.post("/v1/hooks/alerts-in", content=b"x", headers={"authorization": f"Bearer {token}"})
    assert off.status_code == 409 and "turned off" in off.json()["message"]
    assert (await deck.http.post("/v1/hooks/nobody", content=b"x")).status_code == 404
    bad = await deck.http.post("/v1/notifications/hooks", json={"name": "h2", "auth": "bearer", "secret": "whsec_" + "A" * 40,
                                                                "job": {"task": ECHO}})  # fmt: skip
    assert bad.status_code == 422 and bad.json()["field"] == "secret", bad.text
    assert len(await jobs_of(deck)) == 1


async def test_the_cli_adds_a_channel_sends_a_test_and_shows_the_log(deck: Deck, receiver) -> None:  # type: ignore[no-untyped-def]
    import asyncio
    import sys

    async def jobdeck(*args: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "core.cli", *args, "--server", deck.url,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)  # fmt: skip
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        return proc.returncode or 0, out.decode()

    rc, out = await jobdeck("notify", "webhook", "cli-hook", receiver.url)
    assert rc == 0 and "its signing secret, shown once: whsec_" in out, out
    receiver.secret = out.rsplit(" ", 1)[-1].strip()
    rc, out = await jobdeck("notify", "send", "1", "--title", "from the cli")
    assert rc == 0 and "delivered after 1 attempt(s)" in out and " 200 " in out, out
    [got] = await receiver.wait_for(1)
    assert got.verified and got.payload["data"]["title"] == "from the cli"
    rc, out = await jobdeck("notify", "log")
    assert rc == 0 and "from the cli" in out and "delivered" in out, out
    rc, out = await jobdeck("notify", "channels")
    assert rc == 0 and "cli-hook" in out and receiver.url in out, out
    rc, out = await jobdeck("notify", "send", "99")
    assert rc == 1 and "no notification channel 99" in out, out


async def test_a_hook_submits_a_workflow_whose_every_task_sees_the_body_and_a_replay_submits_nothing(
    deck: Deck,
) -> None:
    flow = {"name": "release", "jobs": [{"ref": "build", "task": ECHO},
                                        {"ref": "deploy", "task": ECHO, "depends_on": ["build"]}]}  # fmt: skip
    cyclic = {"name": "x", "jobs": [{"ref": "a", "task": ECHO, "depends_on": ["b"]},
                                    {"ref": "b", "task": ECHO, "depends_on": ["a"]}]}  # fmt: skip
    bad = await deck.call("POST", "/v1/notifications/hooks", {"name": "loop", "workflow": cyclic}, 422)
    assert "a -> b -> a" in bad["message"] or "b -> a -> b" in bad["message"], bad
    both = await deck.call(
        "POST", "/v1/notifications/hooks", {"name": "x", "job": {"task": ECHO}, "workflow": flow}, 422
    )
    assert both["field"] == "workflow", both
    hook = await deck.call("POST", "/v1/notifications/hooks", {"name": "release", "workflow": flow}, 201)
    assert hook["job"] is None and [j["ref"] for j in hook["workflow"]["jobs"]] == ["build", "deploy"], hook

    body = b'{"tag": "v1.2"}'
    r = await deck.http.post("/v1/hooks/release", content=body, headers=signed(hook["secret"], "rel_1", body))
    assert r.status_code == 202, r.text
    got = r.json()
    assert got["job"] is None and got["workflow"]["name"] == "release" and set(got["ids"]) == {"build", "deploy"}
    for ref in ("build", "deploy"):
        out = await wait_until(lambda ref=ref: output(deck, got["ids"][ref]), what=f"the workflow's {ref} job to run")
        assert out == 'rel_1|{"tag": "v1.2"}', (ref, out)
    wf = await deck.call("GET", f"/v1/workflows/{got['workflow']['id']}", status=200)
    assert {n["ref"]: n["parents"] for n in wf["nodes"]}["deploy"], wf["nodes"]

    again = await deck.http.post("/v1/hooks/release", content=body, headers=signed(hook["secret"], "rel_1", body))
    assert again.status_code == 409 and again.json()["field"] == "webhook-id", again.text
    assert again.json()["job_id"] == got["ids"]["build"], again.text
    workflows = (await deck.call("GET", "/v1/workflows", status=200))["workflows"]
    assert len(workflows) == 1 and len(await jobs_of(deck)) == 2, "the replay stored no workflow and no job"

    changed = await deck.call("PATCH", f"/v1/notifications/hooks/{hook['id']}", {"job": {"task": ECHO}}, 200)
    assert changed["workflow"] is None and changed["job"]["task"]["command"] == ECHO["command"], changed
