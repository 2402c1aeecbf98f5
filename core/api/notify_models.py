"""Request bodies and answers of the notification routes (core/api/notifications.py).

Secrets (a webhook's signing secret and header values, an SMTP password) are write-only: bodies
take them, answers only say which are set (`secrets_set`, `header_names`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from core.api.fields import HTTP_URL_PATTERN, NO_NUL, QUEUE_NAME, Id, Int, Text, http_url, whole
from core.api.schemas import _Strict
from core.errors import InvalidInput
from core.notify import signing
from core.notify.rules import EVENT_TYPES

NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$"
HEADER_NAME = r"^[A-Za-z0-9!#$%&'*+.^_`|~\-]{1,100}$"  # an HTTP token
HEADER_VALUE = r"^[\t\x20-\x7e]{0,2000}$"  # printable ASCII: no CR, LF or other control characters
EMAIL = r"^[^@\x00-\x20\x7f]{1,64}@[^@\x00-\x20\x7f]{1,255}$"
SECRET_FIELDS = ("secret", "headers", "password")
# Headers JobDeck sets itself: a channel may not replace them (the signature would no longer verify).
RESERVED_HEADERS = frozenset({"webhook-id", "webhook-timestamp", "webhook-signature", "content-type",
                              "content-length", "host", "transfer-encoding"})  # fmt: skip


def _own_headers(value: dict[str, str] | None) -> dict[str, str] | None:
    for name in value or {}:
        if name.lower() in RESERVED_HEADERS:
            raise ValueError(f"{name} is set by JobDeck itself (Standard Webhooks signing); use another header")
    return value


Name = Annotated[str, Field(pattern=NAME, description="letters, digits, '_', '.', '-'; at most 100")]
Url = Annotated[str, Field(max_length=2000, pattern=HTTP_URL_PATTERN, description="http(s)://host[:port]/path"),
                AfterValidator(http_url)]  # fmt: skip


def _any_case(word: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in word)  # letters and '-' only


# pydantic writes patternProperties for the keys, which lets other keys through: say what the server does
_RESERVED = "^(" + "|".join(_any_case(h) for h in sorted(RESERVED_HEADERS)) + ")$"
Headers = Annotated[
    dict[Annotated[str, Field(pattern=HEADER_NAME)], Annotated[str, Field(pattern=HEADER_VALUE)]],
    Field(max_length=20),
    AfterValidator(_own_headers),
    WithJsonSchema({"type": "object", "maxProperties": 20,
                    "propertyNames": {"pattern": HEADER_NAME, "not": {"pattern": _RESERVED}},
                    "additionalProperties": {"type": "string", "pattern": HEADER_VALUE},
                    "description": "extra request headers (write-only: answers list their names); not webhook-*, "
                                   "content-type, content-length, host, transfer-encoding"}),
]  # fmt: skip


def _signing_secret(value: str) -> str:
    try:
        signing.secret_key(value)
    except InvalidInput as exc:
        raise ValueError(exc.message.removeprefix("secret: ")) from None
    return value


# whsec_ + canonical base64 of 24 to 63 bytes: 8-20 groups of 4, then maybe one more (full or padded), so
# every string the schema allows is a key signing.secret_key takes (a looser pattern let a hook store a
# secret its calls then failed on)
Secret = Annotated[str, Field(max_length=200,
                              pattern=r"^whsec_([A-Za-z0-9+/]{4}){8,20}([A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
                              description="whsec_ + base64 of 24-63 random bytes (write-only); absent: JobDeck makes one"),
                   AfterValidator(_signing_secret)]  # fmt: skip
Email = Annotated[str, Field(max_length=320, pattern=EMAIL)]
Timeout = Annotated[float, Field(gt=0, le=60, description="seconds one attempt may take")]
MaxAttempts = Annotated[int, Field(ge=1, le=25, strict=True, description="attempts per delivery (1 s doubling to 60 s apart)"),
                        BeforeValidator(whole)]  # fmt: skip
DisableAfter = Annotated[int, Field(ge=0, le=10_000, strict=True,
                                    description="failed attempts in a row that turn the channel off (0: never)"),
                         BeforeValidator(whole)]  # fmt: skip
Port = Annotated[int, Field(ge=1, le=65535, strict=True), BeforeValidator(whole)]


class _Delivery(_Strict):
    timeout: Timeout = 10.0
    max_attempts: MaxAttempts = 8
    disable_after: DisableAfter = 20


class WebhookChannel(_Delivery):
    """A webhook: each notification is POSTed as JSON, signed the Standard Webhooks way."""

    kind: Literal["webhook"]
    name: Name
    url: Url
    secret: Secret | None = None
    headers: Headers | None = None


class EmailChannel(_Delivery):
    """Email over SMTP (aiosmtplib): STARTTLS, implicit TLS, or none (a local relay)."""

    kind: Literal["email"]
    name: Name
    host: Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9.\-:\[\]]+$")]
    port: Port = 587
    security: Literal["starttls", "tls", "none"] = "starttls"
    username: Annotated[str, Field(max_length=320, pattern=NO_NUL)] | None = None
    password: Annotated[str, Field(max_length=1000, pattern=NO_NUL)] | None = None
    sender: Email
    to: Annotated[list[Email], Field(min_length=1, max_length=50)]


ChannelCreate = Annotated[WebhookChannel | EmailChannel, Field(discriminator="kind")]


class ChannelUpdate(_Strict):
    """Fields to change; each must belong to the channel's kind (else 409). A secret given replaces the
    old one ("" removes a password); null leaves a field as it is (a username: removes it);
    `enabled: true` turns a disabled channel on again and clears its failure count."""

    enabled: bool | None = None
    timeout: Timeout | None = None
    max_attempts: MaxAttempts | None = None
    disable_after: DisableAfter | None = None
    url: Url | None = None
    secret: Secret | None = None
    headers: Headers | None = None
    host: Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9.\-:\[\]]+$")] | None = None
    port: Port | None = None
    security: Literal["starttls", "tls", "none"] | None = None
    username: Annotated[str, Field(max_length=320, pattern=NO_NUL)] | None = None
    password: Annotated[str, Field(max_length=1000, pattern=NO_NUL)] | None = None
    sender: Email | None = None
    to: Annotated[list[Email], Field(min_length=1, max_length=50)] | None = None


WEBHOOK_FIELDS = frozenset(WebhookChannel.model_fields) - {"kind", "name"}
EMAIL_FIELDS = frozenset(EmailChannel.model_fields) - {"kind", "name"}


class NotificationSend(_Strict):
    """A one-off notification to one channel, to try it."""

    channel_id: Id
    title: Annotated[str, Field(min_length=1, max_length=200, pattern=NO_NUL)] = "Test notification from JobDeck"
    text: Annotated[str, Field(max_length=4000, pattern=NO_NUL)] = "If you can read this, the channel works."


class RuleFilters(_Strict):
    """Which events of the rule's types count (all that are given must hold)."""

    queue: Annotated[str, Field(pattern=QUEUE_NAME)] | None = None
    name_prefix: Annotated[str, Field(min_length=1, max_length=200, pattern=NO_NUL)] | None = None
    tag: Annotated[str, Field(min_length=1, max_length=200, pattern=NO_NUL)] | None = None
    schedule_id: Id | None = None
    workflow_id: Id | None = Field(None, description="a workflow's jobs' events, and its workflow.* events")


EventType = Literal[EVENT_TYPES]  # type: ignore[valid-type]
Minutes = Annotated[float, Field(gt=0, le=1440, description="minutes")]
Seconds = Annotated[float, Field(ge=0, le=86_400, description="seconds the condition must hold first")]
Count = Annotated[int, Field(ge=0, le=1_000_000, strict=True), BeforeValidator(whole)]


class EveryMatch(_Strict):
    """Each matching event alerts (through the window)."""

    kind: Literal["every"]


class FailedTimes(_Strict):
    """A job failed `times` times: its job.failed / job.dead event once its attempt reaches `times`."""

    kind: Literal["failed_times"]
    times: Annotated[int, Field(ge=1, le=1000, strict=True), BeforeValidator(whole)]


class CountOver(_Strict):
    """More than `above` matching events within `minutes` (e.g. dead jobs over 100 in 5 minutes)."""

    kind: Literal["count"]
    above: Count
    minutes: Minutes


class QueueDepth(_Strict):
    """A queue (the rule's queue filter, or each queue) with more than `above` jobs waiting for `for_seconds`."""

    kind: Literal["queue_depth"]
    above: Count
    for_seconds: Seconds = 0.0


class NoAgent(_Strict):
    """A queue with waiting jobs and no connected agent that takes it, for `for_seconds`."""

    kind: Literal["no_agent"]
    for_seconds: Seconds = 60.0


class SuccessRatio(_Strict):
    """Of the jobs (matching the filters) that finished in `minutes`, fewer than `below` succeeded
    (judged once at least `min_jobs` finished)."""

    kind: Literal["success_ratio"]
    below: Annotated[float, Field(gt=0, le=1)]
    minutes: Minutes
    min_jobs: Annotated[int, Field(ge=1, le=1_000_000, strict=True), BeforeValidator(whole)] = 10


class PausedItself(_Strict):
    """A schedule paused itself (its dead runs in a row reached its pause_after): its schedule.paused
    event names the reason. A person pausing a schedule does not alert."""

    kind: Literal["paused_itself"]


Condition = Annotated[EveryMatch | FailedTimes | CountOver | QueueDepth | NoAgent | SuccessRatio | PausedItself,
                      Field(discriminator="kind")]  # fmt: skip
# Conditions that need no `events` (their events are implied, or they watch the queues, not events).
IMPLIED_EVENTS: dict[str, list[str]] = {
    "failed_times": ["job.failed", "job.dead"],
    "success_ratio": ["job.succeeded", "job.failed", "job.dead"],
    "queue_depth": [],
    "no_agent": [],
    "paused_itself": ["schedule.paused"],
}
_EVENTS_OR_IMPLIED: dict[str, Any] = {"anyOf": [
    {"required": ["events"], "properties": {"events": {"type": "array"}}},
    {"required": ["condition"], "properties": {"condition": {"required": ["kind"], "properties": {
        "kind": {"enum": sorted(IMPLIED_EVENTS)}}}}},
]}  # fmt: skip


class RuleCreate(_Strict):
    """An alert rule: events of these types that pass the filters, under its condition (default: every
    match), alert these channels at most once per window (then one summary of how many were
    suppressed). `events` may be left out for the conditions that imply them."""

    model_config = ConfigDict(json_schema_extra=_EVENTS_OR_IMPLIED)

    name: Name
    events: Annotated[list[EventType], Field(min_length=1, max_length=len(EVENT_TYPES))] | None = None
    condition: Condition = EveryMatch(kind="every")
    filters: RuleFilters = RuleFilters()
    channels: Annotated[list[Id], Field(min_length=1, max_length=50, description="channel ids")]
    window_seconds: Annotated[float, Field(ge=0, le=86_400, description="suppression window; 0: every match")] = 300.0
    enabled: bool = True


class RuleUpdate(_Strict):
    """Fields of a rule to change."""

    events: Annotated[list[EventType], Field(min_length=1, max_length=len(EVENT_TYPES))] | None = None
    condition: Condition | None = None
    filters: RuleFilters | None = None
    channels: Annotated[list[Id], Field(min_length=1, max_length=50)] | None = None
    window_seconds: Annotated[float, Field(ge=0, le=86_400)] | None = None
    enabled: bool | None = None


# -- answers


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChannelView(_Out):
    """A channel as the API shows it: its settings without secret values."""

    id: int
    name: str
    kind: Literal["webhook", "email"]
    enabled: bool
    disabled_reason: str | None = Field(description="why it was turned off (auto-disable), if it was")
    failures: int = Field(description="failed attempts in a row")
    breaker: Literal["closed", "open"] = Field(description="this node's circuit breaker for the channel")
    config: dict[str, Any] = Field(description="the channel's settings (url, host, recipients...), no secrets")
    secrets_set: list[str] = Field(description="which secrets are set (secret, headers, password)")
    header_names: list[str]
    created_at: datetime
    updated_at: datetime


class ChannelCreated(ChannelView):
    """The new channel; `secret` is the signing secret JobDeck made (shown this once), else null."""

    secret: str | None


class ChannelList(_Out):
    """Every channel."""

    channels: list[ChannelView]


class AttemptView(_Out):
    """One attempt to deliver a notification: the delivery log's line."""

    id: int
    notification_id: int
    channel_id: int
    attempt: int
    at: datetime
    ok: bool
    status: int | None = Field(description="the HTTP status (or SMTP code) the receiver answered")
    latency_ms: float
    response: str | None = Field(description="the start of the receiver's answer")
    error: str | None


class DeliveryLog(_Out):
    """A channel's attempts, newest first."""

    attempts: list[AttemptView]
    next_cursor: int | None


class NotificationView(_Out):
    """One notification to one channel, and where its delivery stands."""

    id: int
    channel_id: int
    rule_id: int | None
    kind: str = Field(description="test, alert, summary, resolved or channel_disabled")
    message_id: str = Field(description="the webhook-id header (the same on every attempt and on a replay)")
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    max_attempts: int
    next_attempt_at: datetime | None
    created_at: datetime
    finished_at: datetime | None
    last_status: int | None
    last_error: str | None
    payload: Any = Field(description="the JSON body sent ({type, timestamp, data})")
    log: list[AttemptView] | None = Field(None, description="every attempt (GET /v1/notifications/{id} only)")


class NotificationPage(_Out):
    """Notifications, newest first."""

    notifications: list[NotificationView]
    next_cursor: int | None


class RuleView(_Out):
    """An alert rule."""

    id: int
    name: str
    events: list[str]
    condition: dict[str, Any] = Field(description="kind and its numbers (every, failed_times, count, ...)")
    firing: list[str] = Field(description="what the condition holds for now (a queue, count, ratio)")
    filters: dict[str, Any]
    channels: list[int]
    window_seconds: float
    enabled: bool
    suppressed: int = Field(description="matches suppressed in the current window")
    created_at: datetime
    updated_at: datetime


class RuleList(_Out):
    """Every rule."""

    rules: list[RuleView]


__all__ = ["Int", "Text"]
