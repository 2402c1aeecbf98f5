"""The field types every request model and route parameter is built from: ids that fit the stores'
64-bit integers, text without NUL, ISO 8601 times the stores and the formatter can hold, free-form
JSON of bounded depth, and the one error body.

Each type says its limits in the OpenAPI document too, so a client (and the schemathesis fuzz in
tests/api/test_fuzz.py) knows what the server accepts: a value the document allows is accepted.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import urlsplit
from zoneinfo import available_timezones

from fastapi import Path, Query
from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, TypeAdapter, WithJsonSchema
from starlette.convertors import Convertor, register_url_convertor

from core.errors import InvalidInput, InvalidSchedule
from core.model import ALL_STATES

# The stores hold 64-bit ids, but JSON numbers past 2^53 are not exact in JavaScript or in a float-based
# parser (a client's 2^63-1 can arrive as 2^63): ids and sequence numbers stop where every client agrees.
ID_MAX = 2**53 - 1
JSON_DEPTH_MAX = 64  # free-form JSON (task args, http body): far below the 1024 of the parser and 254 of the encoder
NO_NUL = r"^[^\x00]*$"  # PostgreSQL text cannot hold NUL; refused on every store alike
QUEUE_NAME = r"^[A-Za-z0-9_.:\-]{1,64}$"
LABEL = r"^[A-Za-z0-9_.:/\-]{1,64}$"
TIMEZONES = tuple(sorted(available_timezones()))
_ZONES = frozenset(TIMEZONES)
_STATE = "(?:" + "|".join(ALL_STATES) + ")"
STATES_PATTERN = f"^,*(?:{_STATE}(?:,+{_STATE})*)?,*$"  # comma-separated job states (empty items are skipped)
#: What each pattern means, for the error message instead of the regular expression.
PATTERN_WORDS = {
    NO_NUL: "must not contain NUL characters",
    QUEUE_NAME: "must be 1-64 letters, digits or _ . : -",
    LABEL: "must be 1-64 letters, digits or _ . : / -",
    STATES_PATTERN: f"must be comma-separated job states ({', '.join(ALL_STATES)})",
}


def whole(value: Any) -> Any:
    """5.0 to 5 (an integral float is an integer in JSON Schema); anything else as it is."""
    # JSON Schema counts 5.0 as an integer, so the server does too; "5" and true stay refused (strict).
    return int(value) if isinstance(value, float) and value.is_integer() else value


#: An integer in a JSON body: a JSON number without a fraction (5 or 5.0; never "5" or true).
Int = Annotated[int, BeforeValidator(whole), Field(strict=True)]
#: A stored object's id in a JSON body (constraints before the validator, or the JSON schema loses them).
Id = Annotated[int, Field(ge=1, le=ID_MAX, strict=True), BeforeValidator(whole)]

#: Free text in a body: no NUL character.
Text = Annotated[str, Field(pattern=NO_NUL)]
#: Agent labels (`region=eu`): only agents with all of a job's labels run it.
Labels = Annotated[
    dict[Annotated[str, Field(pattern=LABEL)], Annotated[str, Field(pattern=LABEL)]],
    Field(max_length=16),
    # pydantic writes patternProperties, which lets other keys through: say what the server does
    WithJsonSchema({"type": "object", "maxProperties": 16, "propertyNames": {"pattern": LABEL},
                    "additionalProperties": {"type": "string", "pattern": LABEL}}),
]  # fmt: skip

# Route parameters (query and path values are text, so these are parsed, not strict).
JobIdPath = Annotated[int, Path(ge=1, le=ID_MAX, description="a job id")]
ScheduleIdPath = Annotated[int, Path(ge=1, le=ID_MAX, description="a schedule id")]
WorkflowIdPath = Annotated[int, Path(ge=1, le=ID_MAX, description="a workflow id")]
QueuePath = Annotated[str, Path(pattern=QUEUE_NAME, description="a queue name")]
HostPath = Annotated[str, Path(min_length=1, max_length=300, pattern=NO_NUL,
                                description="the host (host[:port]) a circuit breaker guards")]  # fmt: skip
AgentPath = Annotated[str, Path(min_length=1, max_length=200, pattern=NO_NUL, description="an agent's name")]
Cursor = Annotated[int | None, Query(ge=0, le=ID_MAX, description="next_cursor of the previous page")]
Seq = Annotated[int, Query(ge=0, le=ID_MAX, description="events after this sequence number")]
QueryText = Annotated[str | None, Query(max_length=500, pattern=NO_NUL)]
# The pattern is the route's own parse_states (which names the unknown state): stated, not checked twice.
StatesQuery = Annotated[
    str | None,
    Query(max_length=500, description="comma-separated states", json_schema_extra={"pattern": STATES_PATTERN}),
]
QueryTime = Annotated[
    str | None,
    Query(max_length=64, pattern=NO_NUL, description="ISO 8601; UTC if no offset; empty: no limit"),
    WithJsonSchema({"anyOf": [{"type": "string", "format": "date-time", "maxLength": 64}, {"const": ""}]}),
]

_ID_OF_PATH: TypeAdapter[int] = TypeAdapter(Annotated[int, Field(ge=1, le=ID_MAX)])


def path_id(raw: str) -> int:
    """A path's id parsed exactly as the route parses it (pydantic's ValidationError if it is no id)."""
    return _ID_OF_PATH.validate_python(raw)


class IdConvertor(Convertor[int]):
    """`{job_id:id}` in a route's path: digits only, so /v1/jobs/batch is not a job id (a GET there is a
    405, not a 422). Past 4,000 digits it gives ID_MAX + 1, which the route's validation refuses
    (int() of 4,300 digits raises)."""

    regex = "[0-9]+"

    def convert(self, value: str) -> int:
        digits = value.lstrip("0") or "0"
        return int(digits) if len(digits) <= 4000 else ID_MAX + 1

    def to_string(self, value: int) -> str:
        return str(value)


register_url_convertor("id", IdConvertor())


class ErrorBody(BaseModel):
    """Every error of the API (some add fields: `index` of the bad job in a batch, `state`, `retry_after`)."""

    error: str = Field(description="a machine-readable code: invalid, not_found, conflict, payload_too_large, ...")
    message: str = Field(description="what was wrong and how to fix it")
    field: str | None = Field(description="the request field at fault, e.g. jobs[5].priority")


def check_time_range(dt: datetime, field: str) -> float:
    """Unix seconds of `dt` (UTC if naive), refusing times outside the years 1-9999 once in UTC."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    try:
        utc = dt.astimezone(UTC)
    except OverflowError:
        utc = None
    if utc is None:
        raise InvalidInput(
            f"{field}: {dt.isoformat()} is outside the times JobDeck can keep (years 1 to 9999 in UTC)", field=field
        )
    return utc.timestamp()


_DATETIME: TypeAdapter[datetime] = TypeAdapter(datetime)


def _iso_only(value: Any) -> datetime:
    if not isinstance(value, str):  # pydantic would take a number as Unix seconds: the document says a string
        raise ValueError("give an ISO 8601 time as a string, such as 2026-01-31T09:00:00Z")
    dt = _DATETIME.validate_python(value)
    try:
        check_time_range(dt, "time")
    except InvalidInput:
        raise ValueError("outside the times JobDeck can keep (years 1 to 9999 once in UTC)") from None
    return dt


#: A time in a body: an ISO 8601 string (UTC if it has no offset) within the years 1-9999 in UTC.
Timestamp = Annotated[
    datetime,
    BeforeValidator(_iso_only),
    WithJsonSchema(
        {"type": "string", "format": "date-time", "description": "ISO 8601 (UTC if no offset), years 1-9999 in UTC"}
    ),
]


def json_depth(value: Any) -> int:
    """How many levels of lists and objects `value` nests (0 for a scalar), without recursion."""
    depth, level = 0, [value]
    while level:
        nested = [v for x in level if isinstance(x, (list, dict)) for v in (x.values() if isinstance(x, dict) else x)]
        if not any(isinstance(x, (list, dict)) for x in level):
            break
        depth += 1
        level = nested
    return depth


def bounded_depth(value: Any) -> Any:
    """`value`, or ValueError if it nests more than JSON_DEPTH_MAX levels."""
    depth = json_depth(value)
    if depth > JSON_DEPTH_MAX:
        raise ValueError(f"nests {depth} levels of lists and objects; at most {JSON_DEPTH_MAX} are allowed")
    return value


#: Free-form JSON (task args and kwargs, an http body) at most JSON_DEPTH_MAX levels deep.
FreeJson = Annotated[Any, AfterValidator(bounded_depth)]


def _known_zone(value: str) -> str:
    if value not in _ZONES:
        raise InvalidSchedule(
            f"unknown time zone {value!r}: use an IANA name such as 'UTC' or 'Europe/Paris'", field="timezone"
        )
    return value


#: An IANA time zone name (the document lists every one the server knows).
TimeZone = Annotated[str, AfterValidator(_known_zone), WithJsonSchema({"type": "string", "enum": list(TIMEZONES)})]

# http(s)://, optional user@, a host name or IPv4 address, optional :port, then a path (no spaces);
# no IPv6 literals: a bracket in the host part is refused by the schema, not only by urlsplit
HTTP_URL_PATTERN = (
    r"^https?://([^/?#@\[\]\x00-\x20\x7f]*@)?[A-Za-z0-9][A-Za-z0-9.\-]*"
    r"(:([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?([/?#][^\x00-\x20\x7f]*)?$"
)


def http_url(value: str) -> str:
    """An http(s) URL with a host that the agent's client can send to (the pattern, then urlsplit)."""
    try:
        parts = urlsplit(value)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 1) <= 65535
    except ValueError:
        ok = False
    if not ok:
        raise ValueError("an http:// or https:// URL with a host, such as https://hooks.example.com/jobdeck")
    return value
