"""Routes for notifications (admin only): channels, alert rules, one-off sends, the delivery log, replay."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from core.api.app import JSON
from core.api.deps import Route
from core.api.fields import ID_MAX, Cursor
from core.api.notify_models import (
    EMAIL_FIELDS,
    IMPLIED_EVENTS,
    SECRET_FIELDS,
    WEBHOOK_FIELDS,
    ChannelCreate,
    ChannelCreated,
    ChannelList,
    ChannelUpdate,
    ChannelView,
    DeliveryLog,
    NotificationPage,
    NotificationSend,
    NotificationView,
    RuleCreate,
    RuleList,
    RuleUpdate,
    RuleView,
)
from core.api.openapi import errors
from core.errors import Conflict, InvalidInput, NotFound
from core.model import iso
from core.notify import signing
from core.notify.service import Notifier

router = APIRouter(prefix="/v1/notifications", tags=["notifications"], route_class=Route)
ChannelIdPath = Annotated[int, Path(ge=1, le=ID_MAX, description="a notification channel id")]
RuleIdPath = Annotated[int, Path(ge=1, le=ID_MAX, description="an alert rule id")]
NotificationIdPath = Annotated[int, Path(ge=1, le=ID_MAX, description="a notification id")]
Limit = Annotated[int, Query(ge=1, le=500, description="at most this many")]


async def get_notifier(request: Request) -> Notifier:
    """The node's notifier (set by create_app)."""
    notifier: Notifier = request.app.state.notifier
    return notifier


NotifierDep = Annotated[Notifier, Depends(get_notifier)]


def channel_view(n: Notifier, c: dict[str, Any]) -> dict[str, Any]:
    """A channel without its secret values."""
    return {"id": c["id"], "name": c["name"], "kind": c["kind"], "enabled": c["enabled"],
            "disabled_reason": c["disabled_reason"], "failures": c["failures"],
            "breaker": "open" if n.dispatcher.breaker_of(c["id"]).is_open(n.clock()) else "closed",
            "config": c["config"], "secrets_set": sorted(c["secrets"]),
            "header_names": sorted(c["secrets"].get("headers") or {}),
            "created_at": iso(c["created_at"]), "updated_at": iso(c["updated_at"])}  # fmt: skip


def attempt_view(a: dict[str, Any]) -> dict[str, Any]:
    return {"id": a["id"], "notification_id": a["delivery_id"], "channel_id": a["channel_id"], "attempt": a["attempt"],
            "at": iso(a["at"]), "ok": a["ok"], "status": a["status"], "latency_ms": a["latency_ms"],
            "response": a["response"], "error": a["error"]}  # fmt: skip


def notification_view(d: dict[str, Any]) -> dict[str, Any]:
    out = {"id": d["id"], "channel_id": d["channel_id"], "rule_id": d["rule_id"], "kind": d["kind"],
           "message_id": d["message_id"], "status": d["status"], "attempts": d["attempts"],
           "max_attempts": d["max_attempts"], "next_attempt_at": iso(d["next_at"]) if d["status"] == "pending" else None,
           "created_at": iso(d["created_at"]), "finished_at": iso(d["finished_at"]), "last_status": d["last_status"],
           "last_error": d["last_error"], "payload": d["payload"]}  # fmt: skip
    if "log" in d:
        out["log"] = [attempt_view(a) for a in d["log"]]
    return out


def rule_view(r: dict[str, Any]) -> dict[str, Any]:
    s = r["spec"]
    window = (r.get("state") or {}).get("window") or {}
    levels = (r.get("state") or {}).get("levels") or {}
    return {"id": r["id"], "name": r["name"], "events": s["events"], "filters": s.get("filters") or {},
            "condition": s.get("condition") or {"kind": "every"},
            "firing": sorted(k for k, v in levels.items() if v.get("firing")),
            "channels": s["channels"], "window_seconds": s["window_seconds"], "enabled": r["enabled"],
            "suppressed": int(window.get("suppressed", 0)), "created_at": iso(r["created_at"]),
            "updated_at": iso(r["updated_at"])}  # fmt: skip


# -- channels


@router.get("/channels", summary="Notification channels", response_model=ChannelList)
async def list_channels(n: NotifierDep) -> JSON:
    return JSON({"channels": [channel_view(n, c) for c in await n.store.list_channels()]})


@router.post("/channels", status_code=201, summary="Create a channel (webhook or email)",
             response_model=ChannelCreated, responses=errors(409))  # fmt: skip
async def create_channel(body: ChannelCreate, n: NotifierDep) -> JSON:
    fields = body.model_dump(exclude={"kind", "name"}, exclude_none=True)
    made = None
    if body.kind == "webhook" and "secret" not in fields:
        fields["secret"] = made = signing.new_secret()
    secrets = {k: fields.pop(k) for k in SECRET_FIELDS if k in fields}
    c = await n.store.create_channel(body.name, body.kind, fields, secrets)
    return JSON({**channel_view(n, c), "secret": made}, status_code=201)


@router.get("/channels/{channel_id:id}", summary="One channel", response_model=ChannelView)
async def get_channel(channel_id: ChannelIdPath, n: NotifierDep) -> JSON:
    return JSON(channel_view(n, await n.store.get_channel(channel_id)))


@router.patch("/channels/{channel_id:id}", summary="Change a channel (or turn it on or off)",
              response_model=ChannelView, responses=errors(409))  # fmt: skip
async def update_channel(channel_id: ChannelIdPath, body: ChannelUpdate, n: NotifierDep) -> JSON:
    old = await n.store.get_channel(channel_id)
    # null leaves a field as it is (a username: removes it)
    given = {k: v for k, v in body.model_dump(exclude_unset=True).items() if v is not None or k == "username"}
    allowed = (WEBHOOK_FIELDS if old["kind"] == "webhook" else EMAIL_FIELDS) | {"enabled"}
    for name in given:
        if name not in allowed:
            raise Conflict(f"{name}: channel {channel_id} is a {old['kind']} channel, which has no {name!r} "
                           f"(it has {', '.join(sorted(allowed))})", field=name)  # fmt: skip
    enabled = given.pop("enabled", None)
    secrets = {k: given.pop(k) for k in SECRET_FIELDS if k in given}
    c = await n.store.update_channel(channel_id, config=given or None, secrets=secrets or None, enabled=enabled)
    if enabled:
        n.dispatcher.breaker_of(channel_id).succeeded()
        n.dispatcher.wake()
    return JSON(channel_view(n, c))


@router.delete("/channels/{channel_id:id}", status_code=204, summary="Delete a channel and its delivery log")
async def delete_channel(channel_id: ChannelIdPath, n: NotifierDep) -> Response:
    await n.store.delete_channel(channel_id)
    return Response(status_code=204)


@router.get("/channels/{channel_id:id}/log", summary="A channel's delivery log: every attempt, newest first",
            response_model=DeliveryLog)  # fmt: skip
async def channel_log(channel_id: ChannelIdPath, n: NotifierDep, cursor: Cursor = None, limit: Limit = 100) -> JSON:
    await n.store.get_channel(channel_id)
    got = await n.store.list_delivery_attempts(channel_id, cursor or None, limit)
    nxt = got[-1]["id"] if len(got) == limit else None
    return JSON({"attempts": [attempt_view(a) for a in got], "next_cursor": nxt})


# -- notifications (deliveries)


@router.post("", status_code=202, summary="Send a one-off notification to a channel (to test it)",
             response_model=NotificationView, responses=errors(404))  # fmt: skip
async def send_notification(body: NotificationSend, n: NotifierDep) -> JSON:
    return JSON(notification_view(await n.send_test(body.channel_id, body.title, body.text)), status_code=202)


@router.get("", summary="Notifications, newest first", response_model=NotificationPage)
async def list_notifications(n: NotifierDep, channel_id: Annotated[int | None, Query(ge=1, le=ID_MAX)] = None,
                             cursor: Cursor = None, limit: Limit = 100) -> JSON:  # fmt: skip
    got = await n.store.list_deliveries(channel_id, cursor or None, limit)
    nxt = got[-1]["id"] if len(got) == limit else None
    return JSON({"notifications": [notification_view(d) for d in got], "next_cursor": nxt})


@router.get("/{notification_id:id}", summary="A notification's delivery status and attempts",
            response_model=NotificationView)  # fmt: skip
async def get_notification(notification_id: NotificationIdPath, n: NotifierDep) -> JSON:
    return JSON(notification_view(await n.store.get_delivery(notification_id)))


@router.post("/{notification_id:id}/replay", status_code=202, summary="Send a notification again",
             response_model=NotificationView, responses=errors(409))  # fmt: skip
async def replay_notification(notification_id: NotificationIdPath, n: NotifierDep) -> JSON:
    return JSON(notification_view(await n.replay(notification_id)), status_code=202)


# -- rules


def _events_of(events: list[str] | None, kind: str) -> list[str]:
    """The rule's events: given, or implied by its condition (a 422 naming `events` when neither)."""
    if events:
        return events
    if kind in IMPLIED_EVENTS:
        return IMPLIED_EVENTS[kind]
    raise InvalidInput(f"events: a rule with the condition {kind!r} needs the event types it counts "
                       '(e.g. ["job.dead"])', field="events")  # fmt: skip


async def _check_channels(n: Notifier, ids: list[int]) -> None:
    known = {c["id"] for c in await n.store.list_channels()}
    missing = [i for i in ids if i not in known]
    if missing:
        raise NotFound(f"channels: no notification channel {missing[0]} (GET /v1/notifications/channels)",
                       field="channels")  # fmt: skip


@router.get("/rules", summary="Alert rules", response_model=RuleList)
async def list_rules(n: NotifierDep) -> JSON:
    return JSON({"rules": [rule_view(r) for r in await n.store.list_rules()]})


@router.post("/rules", status_code=201, summary="Create an alert rule", response_model=RuleView,
             responses=errors(404, 409))  # fmt: skip
async def create_rule(body: RuleCreate, n: NotifierDep) -> JSON:
    await _check_channels(n, body.channels)
    spec = body.model_dump(exclude={"name", "enabled"})
    spec["filters"] = body.filters.model_dump(exclude_none=True)
    spec["events"] = _events_of(body.events, spec["condition"]["kind"])
    return JSON(rule_view(await n.store.create_rule(body.name, spec, body.enabled)), status_code=201)


@router.get("/rules/{rule_id:id}", summary="One alert rule", response_model=RuleView)
async def get_rule(rule_id: RuleIdPath, n: NotifierDep) -> JSON:
    return JSON(rule_view(await n.store.get_rule(rule_id)))


@router.patch("/rules/{rule_id:id}", summary="Change an alert rule", response_model=RuleView)
async def update_rule(rule_id: RuleIdPath, body: RuleUpdate, n: NotifierDep) -> JSON:
    old = await n.store.get_rule(rule_id)
    given = {k: v for k, v in body.model_dump(exclude_unset=True).items() if v is not None}  # null: unchanged
    if body.channels is not None:
        await _check_channels(n, body.channels)
    enabled = given.pop("enabled", None)
    if body.filters is not None:
        given["filters"] = body.filters.model_dump(exclude_none=True)
    spec = {**old["spec"], **given} if given else None
    if spec is not None:
        kind = (spec.get("condition") or {"kind": "every"})["kind"]
        spec["events"] = _events_of(given.get("events") or (None if "condition" in given else spec["events"]), kind)
    return JSON(rule_view(await n.store.update_rule(rule_id, spec=spec, enabled=enabled)))


@router.delete("/rules/{rule_id:id}", status_code=204, summary="Delete an alert rule")
async def delete_rule(rule_id: RuleIdPath, n: NotifierDep) -> Response:
    await n.store.delete_rule(rule_id)
    return Response(status_code=204)
