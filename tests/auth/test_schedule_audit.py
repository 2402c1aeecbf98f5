"""A policy change on a live schedule is in the audit log with the schedule before and after."""

from __future__ import annotations

from tests.auth.principals import Deck
from tests.auth.test_access import JOB


async def test_a_policy_change_is_audited_with_before_and_after(deck: Deck) -> None:
    async with deck.http("operator") as op, deck.http("admin") as admin:
        s = (await op.post("/v1/schedules", json={"name": "p", "interval": 60, "job": JOB})).json()
        r = await op.patch(f"/v1/schedules/{s['id']}", json={"overlap": "cancel_previous", "catch_up": "none"})
        assert r.status_code == 200, r.text
        page = (await admin.get("/v1/audit", params={"target": f"schedule:{s['id']}"})).json()
    [entry] = [e for e in page["entries"] if e["action"] == "update_schedule"]
    before = entry["before"][f"schedule:{s['id']}"]
    after = entry["after"][0]["data"]["schedule"]
    assert (before["overlap"], before["catch_up"]) == ("skip", "latest"), before
    assert (after["overlap"], after["catch_up"]) == ("cancel_previous", "none"), after
