"""Request bodies of the API, validated with pydantic (which also writes the OpenAPI document)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from core.model import PRIORITY_MAX, PRIORITY_MIN
from core.schedule import validate_cron, zone

QUEUE_NAME = r"^[A-Za-z0-9_.:\-]{1,64}$"
LABEL = r"^[A-Za-z0-9_.:/\-]{1,64}$"
_DOTTED = re.compile(r"^[A-Za-z_][\w.]*(:[A-Za-z_][\w.]*)?$")


class ErrorBody(BaseModel):
    """Every error of the API."""

    error: str = Field(description="a machine-readable code: invalid, not_found, conflict, payload_too_large, ...")
    message: str = Field(description="what was wrong and how to fix it")
    field: str | None = Field(None, description="the request field at fault, e.g. jobs[5].priority")


ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in (
        (404, "no such job, queue, schedule or agent"),
        (409, "not allowed in the current state (named in the message)"),
        (413, "body over the size limit"),
        (422, "an invalid field (named in `field`)"),
    )
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


SECRET_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,252}$"
_SECRET_NAME = re.compile(SECRET_NAME)


class SecretRef(_Strict):
    """An env value that stays out of the job: the agent puts the secret of this name there at run time."""

    secret: str = Field(pattern=SECRET_NAME, description="the secret's name on the agent (a file name: no '/')")


ENV_DOC = ("variables for the task; a value is a string (stored with the job: anyone who can read the job "
           'sees it) or {"secret": "name"}, resolved on the agent and never stored')  # fmt: skip


def _env_values(env: Any) -> Any:
    """Each env value is a string or {"secret": "name"}: say which key is wrong, and how."""
    if not isinstance(env, dict):
        return env  # pydantic says it is not an object
    for key, value in env.items():
        if isinstance(value, str):
            continue
        if isinstance(value, dict) and set(value) == {"secret"} and isinstance(value["secret"], str):
            if not _SECRET_NAME.match(value["secret"]):
                raise ValueError(f"{key!r}: {value['secret']!r} is not a secret name (letters, digits, _ . -; no '/')")
            continue
        shown = json.dumps(value, default=str)
        raise ValueError(f'{key!r} must be a string or {{"secret": "name"}}, not {shown[:60]}')
    return env


class ShellTask(_Strict):
    """Run a command: `command` (a /bin/sh string) or `argv` (no shell)."""

    kind: Literal["shell"]
    command: str | None = Field(None, min_length=1, max_length=100_000)
    argv: list[str] | None = Field(None, min_length=1)
    env: dict[str, str | SecretRef] = Field(default_factory=dict, description=ENV_DOC)
    cwd: str | None = None

    _env = field_validator("env", mode="before")(_env_values)

    @model_validator(mode="after")
    def _one_of(self) -> ShellTask:
        if (self.command is None) == (self.argv is None):
            raise ValueError("give exactly one of 'command' (a shell string) or 'argv' (a list)")
        return self


class HttpTask(_Strict):
    """Send one HTTP request; a 2xx status is success."""

    kind: Literal["http"]
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"] = "GET"
    url: str = Field(pattern=r"^https?://\S+$", max_length=8192)
    headers: dict[str, str] = Field(default_factory=dict)
    body: Any = None


class PythonTask(_Strict):
    """Call a Python function by dotted path (`package.module:function`) with JSON args."""

    kind: Literal["python"]
    function: str = Field(max_length=300)
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str | SecretRef] = Field(
        default_factory=dict,
        description=ENV_DOC + "; a sync function finds them in os.environ, any in current_job().env",
    )

    _env = field_validator("env", mode="before")(_env_values)

    @field_validator("function")
    @classmethod
    def _dotted(cls, v: str) -> str:
        if not _DOTTED.match(v):
            raise ValueError(f"{v!r} is not a dotted path like 'package.module:function'")
        return v


Task = Annotated[ShellTask | HttpTask | PythonTask, Field(discriminator="kind")]


class Backoff(_Strict):
    """Retry delays: base * 2^(attempt-1), capped, with jitter."""

    base: float = Field(1.0, gt=0, le=86_400)
    cap: float = Field(3600.0, gt=0, le=30 * 86_400)


def _epoch(dt: datetime | None) -> float | None:
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


class JobTemplate(_Strict):
    """What a job is, without when it runs (used by schedules)."""

    name: str | None = Field(None, min_length=1, max_length=200)
    queue: str = Field("default", pattern=QUEUE_NAME)
    priority: int = Field(0, ge=PRIORITY_MIN, le=PRIORITY_MAX)
    task: Task
    max_attempts: int = Field(3, ge=1, le=1000)
    backoff: Backoff = Field(default_factory=Backoff)
    timeout: float | None = Field(None, gt=0, le=30 * 86_400)
    tags: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(default_factory=list, max_length=32)
    labels: dict[Annotated[str, Field(pattern=LABEL)], Annotated[str, Field(pattern=LABEL)]] = Field(
        default_factory=dict, max_length=16, description="only agents with all these labels run the job"
    )

    def to_spec(self) -> dict[str, Any]:
        """The plain dict the engine builds a job from."""
        return self.model_dump(mode="json", exclude_none=True)


class JobCreate(JobTemplate):
    """A job to submit. `run_at` (ISO 8601) or `delay` (seconds) defers it; otherwise it is due now."""

    run_at: datetime | None = None
    delay: float | None = Field(None, ge=0, le=366 * 86_400)
    idempotency_key: str | None = Field(None, min_length=1, max_length=200)

    @model_validator(mode="after")
    def _when(self) -> JobCreate:
        if self.run_at is not None and self.delay is not None:
            raise ValueError("give 'run_at' or 'delay', not both")
        return self

    def to_spec(self) -> dict[str, Any]:
        return specs_of([self])[0]


_JOB_LIST: TypeAdapter[list[JobCreate]] = TypeAdapter(list[JobCreate])


def specs_of(jobs: list[JobCreate]) -> list[dict[str, Any]]:
    """`to_spec` of many jobs in one call into pydantic's core (a third faster on big batches)."""
    specs: list[dict[str, Any]] = _JOB_LIST.dump_python(jobs, exclude_none=True)
    for spec in specs:
        if "run_at" in spec:
            spec["run_at"] = _epoch(spec["run_at"])
    return specs


class JobBatch(_Strict):
    """Up to 10,000 jobs, stored all together or not at all."""

    jobs: list[JobCreate] = Field(min_length=1, max_length=10_000)


class PriorityChange(_Strict):
    """The new priority: higher runs first."""

    priority: int = Field(ge=PRIORITY_MIN, le=PRIORITY_MAX)


class ConcurrencyChange(_Strict):
    """How many jobs of the queue may run at once across all agents: 0 lets none start (running ones
    finish), null removes the limit."""

    concurrency: int | None = Field(ge=0, le=1_000_000)


class ScheduleFields(_Strict):
    """Timing of a schedule: exactly one of `cron`, `interval` (seconds), `at` (one time) or `delay`."""

    cron: str | None = Field(None, max_length=200)
    interval: float | None = Field(None, ge=1, le=366 * 86_400)
    at: datetime | None = None
    delay: float | None = Field(None, ge=0, le=366 * 86_400)
    timezone: str = "UTC"

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        if v is not None:
            validate_cron(v)
        return v

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str | None) -> str | None:
        if v is not None:
            zone(v)
        return v


class ScheduleCreate(ScheduleFields):
    """A recurring (cron, interval) or one-time (at, delay) schedule that makes jobs from `job`."""

    name: str = Field(min_length=1, max_length=200)
    job: JobTemplate
    paused: bool = False

    @model_validator(mode="after")
    def _one_timing(self) -> ScheduleCreate:
        given = [k for k in ("cron", "interval", "at", "delay") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of 'cron', 'interval', 'at' or 'delay'"
                + (f" (got {', '.join(given)})" if given else "")
            )
        return self


class ScheduleUpdate(ScheduleFields):
    """Fields to change; timing fields replace the old timing."""

    name: str | None = Field(None, min_length=1, max_length=200)
    job: JobTemplate | None = None
    timezone: str | None = None  # type: ignore[assignment]
    paused: bool | None = None


class TimingPreview(ScheduleFields):
    """A timing not yet saved, to see its next `n` fire times (the as-you-type cron preview)."""

    n: int = Field(5, ge=1, le=100)


class JobSelection(_Strict):
    """Which jobs a bulk action takes: the filters of the job list."""

    state: str | None = None
    queue: str | None = None
    name_prefix: str | None = None
    tag: str | None = None


BULK_MAX = 100_000


class BulkAction(_Strict):
    """One action on many jobs: the listed `ids`, or every job matching `filter`."""

    action: Literal["cancel", "pause", "resume", "retry", "priority"]
    ids: list[int] | None = Field(None, min_length=1, max_length=BULK_MAX)
    filter: JobSelection | None = None
    priority: int | None = Field(None, ge=PRIORITY_MIN, le=PRIORITY_MAX)
    dry_run: bool = False  # only count what the selection matches (for "cancel 3,412 jobs?")

    @model_validator(mode="after")
    def _one_selection(self) -> BulkAction:
        if (self.ids is None) == (self.filter is None):
            raise ValueError("give either 'ids' or 'filter' (a filter {} takes every job)")
        if (self.action == "priority") != (self.priority is not None):
            raise ValueError("'priority' goes with the action 'priority', and only with it")
        return self
