"""Request bodies of the API, validated with pydantic (which also writes the OpenAPI document).

Every model is strict: a number field takes a JSON number (not "5", not true), and unknown fields
are refused. The JSON schema of each says exactly what the server takes: where a rule spans fields
(exactly one of `command` / `argv`), it is written as `oneOf`, so a request the document allows is
one the server accepts (tests/api/test_fuzz.py holds both to it).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from core.api.fields import (
    HTTP_URL_PATTERN,
    NO_NUL,
    QUEUE_NAME,
    STATES_PATTERN,
    FreeJson,
    Id,
    Int,
    Labels,
    Text,
    Timestamp,
    TimeZone,
    bounded_depth,
    check_time_range,
    http_url,
    whole,
)
from core.errors import InvalidSchedule
from core.flow import RATE_MAX
from core.model import PRIORITY_MAX, PRIORITY_MIN
from core.schedule import BUFFER_ALL_MAX, CATCH_UP_MAX, validate_cron
from core.schedule.policy import CATCH_UP_WINDOW_MAX, JITTER_MAX, PAUSE_AFTER_FAILURES_MAX, POLICY_FIELDS
from core.workflow import MAX_PARENTS, MAX_WORKFLOW_JOBS, POLICY_HELP

_DOTTED_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]*(:[A-Za-z_][A-Za-z0-9_.]*)?$"
_DOTTED = re.compile(_DOTTED_PATTERN)


def _exactly_one(*fields: tuple[str, dict[str, Any]]) -> Any:
    """JSON schema: exactly one of these fields is present and not null."""
    return {"oneOf": [{"properties": {name: schema}, "required": [name]} for name, schema in fields]}


# Nullable integers carry their bounds inside (a Field(ge=...) on `Int | None` is lost from the JSON schema).
Priority = Annotated[int, Field(ge=PRIORITY_MIN, le=PRIORITY_MAX, strict=True), BeforeValidator(whole)]


class _Strict(BaseModel):
    # strict: numbers are numbers and booleans are booleans (no "5" or true for an integer)
    model_config = ConfigDict(extra="forbid", strict=True)


_NOT_NULL: dict[str, Any] = {"not": {"type": "null"}}


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


PARENT_RESULTS_SHELL = (
    "pass the results of the jobs this one depends on: a JSON object {ref or id: result} in the "
    "file named by $JOBDECK_PARENT_RESULTS_FILE (and in $JOBDECK_PARENT_RESULTS when under 32 KiB)"
)
PARENT_RESULTS_PYTHON = (
    "pass the results of the jobs this one depends on as the keyword argument parent_results: {ref or id: result}"
)


class ShellTask(_Strict):
    """Run a command: `command` (a /bin/sh string) or `argv` (no shell), exactly one of them."""

    model_config = ConfigDict(json_schema_extra=_exactly_one(("command", _NOT_NULL), ("argv", _NOT_NULL)))

    kind: Literal["shell"]
    command: Text | None = Field(None, min_length=1, max_length=100_000)
    argv: list[Text] | None = Field(None, min_length=1)
    env: dict[str, str | SecretRef] = Field(default_factory=dict, description=ENV_DOC)
    cwd: Text | None = None
    parent_results: bool = Field(False, description=PARENT_RESULTS_SHELL)

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
    # a host the agent can reach, no spaces or control characters (spelled out: "\s" means other
    # characters in JSON Schema than in pydantic); "http://[" was stored and failed only on the agent
    url: Annotated[str, Field(pattern=HTTP_URL_PATTERN, max_length=8192, description="http(s)://host[:port]/path"),
                   AfterValidator(http_url)]  # fmt: skip
    headers: dict[str, str | SecretRef] = Field(
        default_factory=dict,
        description='request headers; a value is a string (stored with the job) or {"secret": "name"}, resolved '
        "on the agent and never stored (e.g. an Authorization header)",
    )
    body: FreeJson = None

    _headers = field_validator("headers", mode="before")(_env_values)


class PythonTask(_Strict):
    """Call a Python function by dotted path (`package.module:function`) with JSON args."""

    kind: Literal["python"]
    # the pattern is stated for the document; _dotted checks the same one and says it in words
    function: str = Field(max_length=300, description="package.module:function",
                          json_schema_extra={"pattern": _DOTTED_PATTERN})  # fmt: skip
    args: Annotated[list[Any], AfterValidator(bounded_depth)] = Field(default_factory=list)
    kwargs: Annotated[dict[str, Any], AfterValidator(bounded_depth)] = Field(default_factory=dict)
    env: dict[str, str | SecretRef] = Field(
        default_factory=dict,
        description=ENV_DOC + "; a sync function finds them in os.environ, any in current_job().env",
    )
    parent_results: bool = Field(False, description=PARENT_RESULTS_PYTHON)

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

    model_config = ConfigDict(frozen=True)  # one default instance serves every job that gives none

    base: float = Field(1.0, gt=0, le=86_400)
    cap: float = Field(3600.0, gt=0, le=30 * 86_400)


_DEFAULT_BACKOFF = Backoff()


def _default_backoff() -> Backoff:
    # a factory, not a default value: the JSON schema stays as it was (no "default" object shown);
    # building a Backoff per job was ~10 % of validating a 10,000-job body
    return _DEFAULT_BACKOFF


def _epoch(dt: datetime | None, field: str = "time") -> float | None:
    return None if dt is None else check_time_range(dt, field)


FlowKey = Annotated[Text, Field(min_length=1, max_length=200)]


class JobTemplate(_Strict):
    """What a job is, without when it runs (used by schedules)."""

    name: Text | None = Field(None, min_length=1, max_length=200)
    queue: str = Field("default", pattern=QUEUE_NAME)
    priority: Int = Field(0, ge=PRIORITY_MIN, le=PRIORITY_MAX)
    task: Task
    max_attempts: Int = Field(3, ge=1, le=1000)
    backoff: Backoff = Field(default_factory=_default_backoff)
    timeout: float | None = Field(None, gt=0, le=30 * 86_400)
    tags: list[Annotated[Text, Field(min_length=1, max_length=64)]] = Field(default_factory=list, max_length=32)
    labels: Labels = Field(default_factory=dict, description="only agents with all these labels run the job")
    concurrency_key: FlowKey | None = Field(
        None, description="e.g. a customer id: the queue's key_concurrency caps how many jobs of one key run at once"
    )
    fairness_key: FlowKey | None = Field(
        None, description="e.g. a tenant id: within a priority, the queue's claims rotate between keys"
    )

    def to_spec(self) -> dict[str, Any]:
        """The plain dict the engine builds a job from."""
        return self.model_dump(mode="json", exclude_none=True)


class Unique(_Strict):
    """At most one job with this key at a time: while the first is waiting or running (`active`),
    or for `seconds` from the first's submit (`window`). A second submit answers with the first."""

    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"properties": {"scope": {"const": "window"}, "seconds": {"type": "number"}},
                 "required": ["scope", "seconds"]},
                {"properties": {"scope": {"const": "active"}, "seconds": {"type": "null"}}},
            ]
        }
    )  # fmt: skip

    key: Text = Field(min_length=1, max_length=200, description="e.g. 'report:team-a': jobs with the same key are one")
    scope: Literal["active", "window"] = Field(
        "active", description="active: until the first job ends; window: for `seconds` from its submit"
    )
    seconds: float | None = Field(
        None, gt=0, le=366 * 86_400, description="the window's length (scope window only, required there)"
    )

    @model_validator(mode="after")
    def _seconds(self) -> Unique:
        if self.scope == "window" and self.seconds is None:
            raise ValueError("scope 'window' needs 'seconds': how long the key is held from the first submit")
        if self.scope == "active" and self.seconds is not None:
            raise ValueError("'seconds' is for scope 'window'; scope 'active' holds the key until the job ends")
        return self


UNIQUE_HELP = "at most one job with this key at a time: a duplicate answers 200 with the first, deduplicated: unique"


class JobCreate(JobTemplate):
    """A job to submit. `run_at` (ISO 8601) or `delay` (seconds) defers it; otherwise it is due now."""

    model_config = ConfigDict(
        json_schema_extra={
            "not": {"properties": {"run_at": _NOT_NULL, "delay": _NOT_NULL}, "required": ["run_at", "delay"]}
        }
    )

    run_at: Timestamp | None = None
    delay: float | None = Field(None, ge=0, le=366 * 86_400)
    idempotency_key: Text | None = Field(None, min_length=1, max_length=200)
    unique: Unique | None = Field(None, description=UNIQUE_HELP)
    depends_on: list[Id] | None = Field(
        None, min_length=1, max_length=MAX_PARENTS,
        description="ids of existing jobs this one waits for: it is blocked until every one succeeded",
    )  # fmt: skip
    on_parent_failure: Literal["cancel", "run", "skip"] = Field("cancel", description=POLICY_HELP)

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
            spec["run_at"] = _epoch(spec["run_at"], "run_at")
    return specs


class JobBatch(_Strict):
    """Up to 10,000 jobs, stored all together or not at all."""

    jobs: list[JobCreate] = Field(min_length=1, max_length=10_000)


REF_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]{0,127}$"


class WorkflowJob(JobTemplate):
    """One job of a workflow: a `ref` unique in the workflow, and the refs it waits for."""

    model_config = ConfigDict(
        json_schema_extra={
            "not": {"properties": {"run_at": _NOT_NULL, "delay": _NOT_NULL}, "required": ["run_at", "delay"]}
        }
    )

    ref: str = Field(pattern=REF_PATTERN, description="its name in the workflow (letters, digits, _ . : -)")
    depends_on: list[Annotated[str, Field(pattern=REF_PATTERN)]] = Field(
        default_factory=list, max_length=MAX_PARENTS, description="refs of jobs of this workflow it waits for"
    )
    on_parent_failure: Literal["cancel", "run", "skip"] = Field("cancel", description=POLICY_HELP)
    unique: Unique | None = Field(
        None, description="as on POST /v1/jobs; a key held by another job makes the whole workflow a 409"
    )
    run_at: Timestamp | None = None
    delay: float | None = Field(None, ge=0, le=366 * 86_400)

    @model_validator(mode="after")
    def _when(self) -> WorkflowJob:
        if self.run_at is not None and self.delay is not None:
            raise ValueError("give 'run_at' or 'delay', not both")
        return self


class WorkflowCreate(_Strict):
    """A workflow: up to 10,000 jobs and their dependencies, stored all together or not at all."""

    name: Text = Field(min_length=1, max_length=200)
    jobs: list[WorkflowJob] = Field(min_length=1, max_length=MAX_WORKFLOW_JOBS)

    def specs(self) -> list[dict[str, Any]]:
        """The jobs as the engine builds them (run_at as Unix seconds)."""
        specs: list[dict[str, Any]] = _WORKFLOW_JOBS.dump_python(self.jobs, exclude_none=True)
        for spec in specs:
            if "run_at" in spec:
                spec["run_at"] = _epoch(spec["run_at"], "run_at")
        return specs


_WORKFLOW_JOBS: TypeAdapter[list[WorkflowJob]] = TypeAdapter(list[WorkflowJob])


class PriorityChange(_Strict):
    """The new priority: higher runs first."""

    priority: Int = Field(ge=PRIORITY_MIN, le=PRIORITY_MAX)


class ConcurrencyChange(_Strict):
    """How many jobs of the queue may run at once across all agents: 0 lets none start (running ones
    finish), null removes the limit."""

    concurrency: Annotated[int, Field(ge=0, le=1_000_000, strict=True), BeforeValidator(whole)] | None


Concurrency = Annotated[int, Field(ge=0, le=1_000_000, strict=True), BeforeValidator(whole)]
RatePerSecond = Annotated[float, Field(gt=0, le=RATE_MAX, allow_inf_nan=False, strict=True)]
Burst = Annotated[int, Field(ge=1, le=1_000_000, strict=True), BeforeValidator(whole)]
Weight = Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False, strict=True)]
FailureRatio = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False, strict=True)]
BreakerSeconds = Annotated[float, Field(ge=0.1, le=86400, allow_inf_nan=False, strict=True)]
MinRequests = Annotated[int, Field(ge=1, le=1_000_000, strict=True), BeforeValidator(whole)]


class QueueChange(_Strict):
    """Limits of a queue to change, live, on every node: a field left out keeps its value; null
    removes that limit. At least one field. (Pause and resume have routes of their own.)"""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    concurrency: Concurrency | None = Field(None, description="how many of its jobs run at once across all agents")
    rate_limit: RatePerSecond | None = Field(
        None, description="jobs started per second across all nodes (0.5: one every 2 s); null: no rate limit"
    )
    rate_burst: Burst | None = Field(
        None,
        description="starts the rate limit allows at once after a quiet spell; null: a tenth of a "
        "second's worth, at least 1",
    )
    key_concurrency: Concurrency | None = Field(
        None, description="how many jobs of one concurrency_key (e.g. a customer) run at once across all agents"
    )
    fairness_weights: dict[FlowKey, Weight] | None = Field(
        None,
        max_length=1000,
        description="fairness_key -> weight (default 1): a key of weight 3 gets 3 starts "
        "for every 1 of a key of weight 1 while both wait",
    )
    fair: bool = Field(
        False,
        description="rotate claims between fairness keys (left out: unchanged; the first job with a "
        "fairness_key sets it)",
    )
    breaker_mode: Literal["wait", "fail"] | None = Field(
        None,
        description="what its http jobs do while their host's circuit breaker is open: wait (held back, "
        "no attempt used; the default) or fail (the attempt fails at once, unsent)",
    )
    breaker_failure_ratio: FailureRatio | None = Field(
        None, description="a breaker opens when this share of the requests in its window failed (default 0.5)"
    )
    breaker_window: BreakerSeconds | None = Field(None, description="seconds of requests a breaker judges (default 10)")
    breaker_reset: BreakerSeconds | None = Field(
        None, description="seconds an open breaker waits before one trial request (default 30)"
    )
    breaker_min_requests: MinRequests | None = Field(
        None, description="fewer requests than this in the window never open a breaker (default 5)"
    )

    @model_validator(mode="after")
    def _something(self) -> QueueChange:
        if not self.model_fields_set:
            raise ValueError(
                "give at least one setting: concurrency, rate_limit, rate_burst, key_concurrency, "
                "fairness_weights, fair or a breaker_* setting"
            )
        return self

    def changes(self) -> dict[str, Any]:
        """The settings given, as the store takes them."""
        return {k: getattr(self, k) for k in self.model_fields_set}


#: A cron expression: 5 fields (minute hour day month weekday), 6 with seconds last, or a shortcut.
Cron = Annotated[
    str,
    Field(max_length=200),
    WithJsonSchema({"type": "string", "format": "cron", "maxLength": 200,
                    "description": "5 fields (minute hour day month weekday), 6 with seconds last, or @daily etc."}),
]  # fmt: skip
_TIMINGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("cron", {"type": "string"}),
    ("interval", {"type": "number"}),
    ("at", {"type": "string"}),
    ("delay", {"type": "number"}),
)


class ScheduleFields(_Strict):
    """Timing of a schedule: exactly one of `cron`, `interval` (seconds), `at` (one time) or `delay`.

    A one-time schedule's `at` must not be in the past (it would never fire): use `delay: 0` to run it now.
    """

    cron: Cron | None = None
    interval: float | None = Field(None, ge=1, le=366 * 86_400)
    at: Timestamp | None = None
    delay: float | None = Field(None, ge=0, le=366 * 86_400)
    timezone: TimeZone = "UTC"

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        if v is not None:
            validate_cron(v)
        return v


def _real_date(v: str) -> str:
    try:
        datetime.strptime(v, "%Y-%m-%d")
    except ValueError:
        raise ValueError(f"{v!r} is not a date such as 2026-12-25") from None
    return v


LocalDate = Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}$"), AfterValidator(_real_date),
                      WithJsonSchema({"type": "string", "format": "date"})]  # fmt: skip
EXCLUDE_DATES_MAX = 1000
ExcludeCron = Annotated[
    str,
    Field(max_length=200),
    WithJsonSchema({"anyOf": [{"type": "string", "format": "cron", "maxLength": 200}, {"const": ""}]}),
]


class Exclusions(_Strict):
    """Fire times that do not run (like Temporal's exclude calendars); in the schedule's zone."""

    exclude_dates: list[LocalDate] | None = Field(
        None, max_length=EXCLUDE_DATES_MAX,
        description="local dates (YYYY-MM-DD, at most 1,000) without runs, e.g. holidays; [] removes them",
    )  # fmt: skip
    exclude_cron: ExcludeCron | None = Field(
        None,
        description="a cron expression: fire times it matches (in the schedule's zone) do not run, e.g. "
        "'* * * * 6,0' for no weekends; '' removes it",
    )

    @field_validator("exclude_cron")
    @classmethod
    def _exclude_cron(cls, v: str | None) -> str | None:
        if v:
            try:
                validate_cron(v)
            except InvalidSchedule as exc:
                raise InvalidSchedule(f"exclude_cron: {exc.message}", field="exclude_cron") from None
        return v


class SchedulePolicies(Exclusions):
    """What happens around a fire time (docs/schedules.md). Left out: the default on create, unchanged
    on PATCH; a change applies from the next fire time."""

    overlap: Literal["skip", "buffer_one", "buffer_all", "cancel_previous", "allow"] | None = Field(
        None,
        description="a fire time while an earlier run still waits or runs: skip it (default; recorded), "
        f"buffer_one (at most one waits), buffer_all (at most {BUFFER_ALL_MAX} wait), cancel_previous "
        "(cancel it; the new run starts once it has stopped), allow (run side by side)",
    )
    catch_up: Literal["latest", "none", "all"] | None = Field(
        None,
        description="fire times missed during downtime or a pause: latest (default: run the most recent "
        f"once), none (run none), all (run each one inside catch_up_window, at most {CATCH_UP_MAX}, oldest first)",
    )
    catch_up_window: float | None = Field(
        None, ge=0, le=CATCH_UP_WINDOW_MAX,
        description="seconds (default 3600): how late a missed fire time may be and still run under catch_up 'all'",
    )  # fmt: skip

    jitter: float | None = Field(
        None, ge=0, le=JITTER_MAX,
        description="seconds (default 0): each run starts up to this long after its fire time, by an offset "
        "derived from the schedule and the fire time (the same on every node); shorter than the time between "
        "two fire times",
    )  # fmt: skip
    pause_after_failures: Annotated[int, Field(ge=0, le=PAUSE_AFTER_FAILURES_MAX, strict=True),
                                    BeforeValidator(whole)] | None = Field(
        None,
        description="pause the schedule after this many consecutive runs ended dead (0: never, the default); "
        "the reason shows on the schedule and in a schedule.paused event, and resuming clears it",
    )  # fmt: skip

    def policy_changes(self) -> dict[str, Any]:
        """The policy fields this body sets."""
        return {k: getattr(self, k) for k in POLICY_FIELDS if getattr(self, k) is not None}


class ScheduledWorkflowJob(WorkflowJob):
    """A job of a schedule's workflow: as in POST /v1/workflows, without a unique key (the schedule's
    overlap policy decides whether a run starts beside an earlier one)."""

    unique: None = Field(None, description="not taken here: the schedule's overlap policy decides repeats")


class ScheduleWorkflow(WorkflowCreate):
    """The workflow each fire time submits: its jobs (with refs and depends_on), all or nothing."""

    jobs: list[ScheduledWorkflowJob] = Field(min_length=1, max_length=MAX_WORKFLOW_JOBS)  # type: ignore[assignment]

    def template(self) -> dict[str, Any]:
        """As the schedule keeps it (its DAG checked now, so a fire cannot fail on a cycle or a bad ref)."""
        from core.workflow import validate_workflow

        specs = self.specs()
        validate_workflow(specs)
        return {"workflow": {"name": self.name, "jobs": specs}, "queue": specs[0].get("queue") or "default"}

    def queues(self) -> list[str]:
        return sorted({j.queue for j in self.jobs})


class ScheduleCreate(ScheduleFields, SchedulePolicies):
    """A recurring (cron, interval) or one-time (at, delay) schedule that makes a job from `job` or a
    workflow from `workflow` at each fire time."""

    model_config = ConfigDict(json_schema_extra={"allOf": [
        _exactly_one(*_TIMINGS),
        {"oneOf": [{"required": ["job"], "properties": {"job": {"type": "object"}, "workflow": {"type": "null"}}},
                   {"required": ["workflow"], "properties": {"workflow": {"type": "object"}, "job": {"type": "null"}}}]},
    ]})  # fmt: skip

    name: Text = Field(min_length=1, max_length=200)
    job: JobTemplate | None = Field(None, description="the job each fire time makes (or give `workflow`)")
    workflow: ScheduleWorkflow | None = Field(
        None,
        description="the workflow each fire time submits, all or nothing (or give `job`); a run is the whole workflow",
    )
    paused: bool = False

    @model_validator(mode="after")
    def _one_timing(self) -> ScheduleCreate:
        given = [k for k in ("cron", "interval", "at", "delay") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of 'cron', 'interval', 'at' or 'delay'"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if (self.job is None) == (self.workflow is None):
            raise ValueError("give the `job` or the `workflow` each fire time makes (one of them)")
        return self

    def template(self) -> dict[str, Any]:
        """The schedule's template as stored: a job spec, or {"workflow": {name, jobs}, "queue"}."""
        return self.workflow.template() if self.workflow is not None else self.job.to_spec()  # type: ignore[union-attr]

    def queues(self) -> list[str]:
        return self.workflow.queues() if self.workflow is not None else [self.job.queue]  # type: ignore[union-attr]


def _at_most_one(fields: tuple[tuple[str, dict[str, Any]], ...]) -> Any:
    pairs = [
        {"properties": {a: sa, b: sb}, "required": [a, b]}
        for i, (a, sa) in enumerate(fields)
        for b, sb in fields[i + 1 :]
    ]
    return {"not": {"anyOf": pairs}}


class ScheduleUpdate(ScheduleFields, SchedulePolicies):
    """Fields to change; a timing field (at most one) replaces the old timing."""

    model_config = ConfigDict(json_schema_extra={"allOf": [
        _at_most_one(_TIMINGS),
        {"not": {"required": ["job", "workflow"],
                 "properties": {"job": {"type": "object"}, "workflow": {"type": "object"}}}},
    ]})  # fmt: skip

    name: Text | None = Field(None, min_length=1, max_length=200)
    job: JobTemplate | None = None
    workflow: ScheduleWorkflow | None = Field(None, description="replaces the template with a workflow")
    timezone: TimeZone | None = None  # type: ignore[assignment]
    paused: bool | None = None

    @model_validator(mode="after")
    def _one_template(self) -> ScheduleUpdate:
        if self.job is not None and self.workflow is not None:
            raise ValueError("give a new `job` or a new `workflow`, not both")
        return self


class TimingPreview(ScheduleFields, Exclusions):
    """A timing not yet saved, to see its next `n` fire times after `from` (default now): the as-you-type
    preview of a form, exclusions included."""

    model_config = ConfigDict(json_schema_extra=_exactly_one(*_TIMINGS), populate_by_name=False)

    n: Int = Field(5, ge=1, le=100)
    from_: Timestamp | None = Field(None, alias="from", description="the instant to preview from (default: now)")

    @model_validator(mode="after")
    def _one_timing(self) -> TimingPreview:
        given = [k for k in ("cron", "interval", "at", "delay") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of 'cron', 'interval', 'at' or 'delay'")
        return self


class Backfill(_Strict):
    """Make the runs of every fire time of a past range that has none yet."""

    from_: Timestamp = Field(alias="from", description="the first instant of the range (inclusive)")
    to: Timestamp = Field(description="the last instant of the range (inclusive), not in the future")
    overlap: Literal["buffer_all", "allow"] = Field(
        "buffer_all", description="buffer_all: one run after another, oldest first; allow: side by side"
    )
    dry_run: bool = Field(False, description="only count the fire times and the runs it would make")


class JobSelection(_Strict):
    """Which jobs a bulk action takes: the filters of the job list."""

    state: str | None = Field(  # checked by the route (parse_states names the unknown state)
        None, max_length=500, description="comma-separated states", json_schema_extra={"pattern": STATES_PATTERN}
    )
    queue: str | None = Field(None, max_length=500, pattern=NO_NUL)
    name_prefix: str | None = Field(None, max_length=500, pattern=NO_NUL)
    tag: str | None = Field(None, max_length=500, pattern=NO_NUL)


BULK_IDS_MAX = 100_000
_BULK_ACTIONS = ("cancel", "pause", "resume", "retry", "priority")


class BulkAction(_Strict):
    """One action on many jobs: the listed `ids` (up to 100,000), or every job matching `filter`."""

    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                _exactly_one(("ids", _NOT_NULL), ("filter", _NOT_NULL)),
                {"oneOf": [
                    {"properties": {"action": {"const": "priority"}, "priority": _NOT_NULL},
                     "required": ["action", "priority"]},
                    {"properties": {"action": {"enum": [a for a in _BULK_ACTIONS if a != "priority"]},
                                    "priority": {"type": "null"}}},
                ]},
            ]
        }
    )  # fmt: skip

    action: Literal["cancel", "pause", "resume", "retry", "priority"]
    ids: list[Id] | None = Field(None, min_length=1, max_length=BULK_IDS_MAX)
    filter: JobSelection | None = None
    priority: Priority | None = None
    dry_run: bool = Field(False, description="only count what the selection matches (for 'cancel 3,412 jobs?')")

    @model_validator(mode="after")
    def _one_selection(self) -> BulkAction:
        if (self.ids is None) == (self.filter is None):
            raise ValueError("give either 'ids' or 'filter' (a filter {} takes every job)")
        if (self.action == "priority") != (self.priority is not None):
            raise ValueError("'priority' goes with the action 'priority', and only with it")
        return self
