"""What the API answers, as pydantic models: they write the OpenAPI document's response schemas.

Routes name their model with `response_model=` but answer with `JSON(...)` (orjson) themselves, so
no response is validated on the hot path; the schemathesis fuzz (tests/api/test_fuzz.py) checks
every answer against these models instead. `extra="forbid"`: a field the server sends must be listed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.api.fields import ErrorBody
from core.api.schemas import Backoff, JobTemplate, Task
from core.model import ALL_STATES

JobStateName = Literal[tuple(s.value for s in ALL_STATES)]  # type: ignore[valid-type]


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UniqueView(_Out):
    """A job's unique key: held while its job is waiting or running (active) or until `until` (window)."""

    key: str
    scope: Literal["active", "window"]
    until: datetime | None = Field(description="when a window key lets go (scope window)")
    held: bool = Field(description="false once the job ended (active) or the window passed: a new job may take it")


class JobView(_Out):
    """A job as the API shows it."""

    id: int
    name: str
    queue: str
    state: JobStateName  # type: ignore[valid-type]
    priority: int
    attempt: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    timeout: float | None
    backoff: Backoff
    task: Task
    tags: list[str]
    idempotency_key: str | None
    schedule_id: int | None
    fire_time: datetime | None
    agent: str | None
    lease_expires_at: datetime | None
    cancel_requested: bool
    labels: dict[str, str]
    concurrency_key: str | None
    fairness_key: str | None
    paused_from: str | None
    last_error: str | None
    result: Any = Field(description="what the task returned (python tasks), else null")
    waiting_for: str | None = Field(
        description="why a queued job is not running: no agent can take it, a limit "
        "holds it, every slot that could run it is busy (and, in a fair queue, where its "
        "fairness key is in the rotation); null: a claim takes it soon"
    )
    trace_id: str | None = Field(description="the W3C trace id of its submit: every step of its life is in that trace")
    trace_url: str | None = Field(None, description="the trace in your trace UI (JOBDECK_TRACE_URL_TEMPLATE), "
                                  "on GET /v1/jobs/{job_id}")  # fmt: skip
    deduplicated: bool = Field(
        False,
        description="true when this submit made no job: the answer is the job "
        "that already had its idempotency key or holds its unique key (status 200)",
    )
    deduplicated_by: Literal["idempotency_key", "unique"] | None = Field(
        None, description="which key matched, when deduplicated"
    )
    unique: UniqueView | None = Field(None, description="its unique key, if it was submitted with one")
    workflow_id: int | None = Field(None, description="the workflow it belongs to")
    ref: str | None = Field(None, description="its ref in its workflow")
    on_parent_failure: Literal["cancel", "run", "skip"] = "cancel"
    ended_by_parent: int | None = Field(
        None,
        description="the parent whose failure cancelled or skipped this job (null: it was not a dependency); "
        "retrying that parent makes this job wait again",
    )
    parents: list[int] | None = Field(None, description="GET /v1/jobs/{id} only: the jobs it waits for")
    children: list[int] | None = Field(None, description="GET /v1/jobs/{id} only: the jobs waiting for it")


class JobPage(_Out):
    """One page of the job list, in the order asked for."""

    jobs: list[JobView]
    next_cursor: int | str | None = Field(
        description="pass as `cursor` for the next page (an id in id order, else 'value:id'); null on the last page"
    )
    sort: Literal["id", "created", "priority", "state", "queue", "duration"]
    order: Literal["asc", "desc"]
    total: int | None = Field(None, description="with count=true: how many jobs match")
    total_exact: bool | None = Field(None, description="with count=true: whether `total` was counted or estimated")


class BatchCreated(_Out):
    """The ids of a batch, in the order sent (an idempotency key used before gives the earlier job's id)."""

    ids: list[int]
    created: int = Field(description="how many of them are new")


class BulkRefusal(_Out):
    """One job the bulk action did not change, and why."""

    id: int
    error: str
    message: str


class BulkResult(_Out):
    """What a bulk action did: every job matched is changed or refused alone."""

    action: str
    matched: int = Field(description="how many jobs the ids or the filter selected (all of them, however many)")
    changed: int
    errors: list[BulkRefusal] = Field(description="the first 100 refusals")
    error_count: int
    dry_run: bool = False


class JobOutput(_Out):
    """The output tail of a job's latest attempt."""

    job_id: int
    attempt: int
    state: JobStateName  # type: ignore[valid-type]
    running: bool
    output: str
    limit_bytes: int


class Attempt(_Out):
    """One attempt of a job. Times are Unix seconds."""

    attempt: int
    agent: str | None
    claimed_at: float | None
    started_at: float | None
    finished_at: float | None
    outcome: str | None
    error: str | None
    exit_code: int | None
    output: str | None
    result: Any


class AttemptList(_Out):
    """A job's attempts, oldest first."""

    job_id: int
    attempts: list[Attempt]


class Event(_Out):
    """A committed change: `seq` only grows; `data` depends on `type` (job events carry the job's summary)."""

    model_config = ConfigDict(extra="allow")

    seq: int | None
    ts: datetime
    type: str = Field(description="job.queued, job.running, job.succeeded, ..., queue.paused, schedule.created, ...")
    job_id: int | None
    queue: str | None
    data: dict[str, Any]


class EventPage(_Out):
    """Stored events, oldest first."""

    events: list[Event]


class QueueSettings(_Out):
    """A queue's settings (what a change answers)."""

    name: str
    paused: bool
    concurrency: int | None
    rate_limit: float | None = Field(description="jobs started per second across all nodes; null: none")
    rate_burst: int | None = Field(description="starts the rate limit allows at once; null: the default")
    key_concurrency: int | None = Field(description="jobs of one concurrency_key running at once; null: no limit")
    fairness_weights: dict[str, float] | None = Field(description="fairness_key -> weight (default 1)")
    fair: bool = Field(description="claims rotate between the fairness keys of its jobs")
    breaker_mode: Literal["wait", "fail"] | None = Field(
        description="while a breaker is open: wait or fail; null: wait"
    )
    breaker_failure_ratio: float | None = Field(description="null: 0.5")
    breaker_window: float | None = Field(description="seconds; null: 10")
    breaker_reset: float | None = Field(description="seconds; null: 30")
    breaker_min_requests: int | None = Field(description="null: 5")


class QueueView(QueueSettings):
    """A queue: its settings and how many of its jobs wait and run."""

    depth: int = Field(description="queued jobs")
    running: int
    scheduled: int = Field(description="jobs waiting for their time (scheduled, or failed and retrying)")
    counts: dict[str, int] = Field(description="jobs by state")


class QueueList(_Out):
    """Every queue the caller sees."""

    queues: list[QueueView]


class KeyRunning(_Out):
    """Jobs of one concurrency key running now."""

    key: str
    running: int


class KeyWaiting(_Out):
    """Jobs of one fairness key waiting, and what the fair rotation has served it (starts / weight)."""

    key: str
    waiting: int
    served: float


class KeyUsage(_Out):
    """A queue's per-key usage, the busiest keys first (at most 100 of each)."""

    queue: str
    key_concurrency: int | None = Field(description="the per-key limit the running counts are held to")
    fairness_weights: dict[str, float] | None
    running_by_concurrency_key: list[KeyRunning]
    more_running_keys: bool = Field(description="more keys run jobs than are listed")
    waiting_by_fairness_key: list[KeyWaiting]
    more_waiting_keys: bool
    waiting_counted: int = Field(description="queued jobs with a fairness key that were counted")
    waiting_capped: bool = Field(description="the count stopped at 100,000 jobs: the numbers are a lower bound")


class BreakerNumbers(_Out):
    """When a breaker opens and how long it stays open (its queue's settings)."""

    failure_ratio: float
    window: float = Field(description="seconds")
    reset: float = Field(description="seconds")
    min_requests: int


class BreakerView(_Out):
    """One circuit breaker: a queue's http jobs calling one host, over every agent and node."""

    queue: str
    host: str
    state: Literal["closed", "open", "half_open"] = Field(
        description="open: nothing is sent; half_open: a trial request may go (or is out)"
    )
    mode: Literal["wait", "fail"] = Field(description="while open, its jobs wait (held) or fail at once")
    opened_at: datetime | None
    retry_at: datetime | None = Field(description="when an open breaker lets a trial request go")
    probe_job: int | None = Field(description="the job sent as the trial request")
    requests: float = Field(description="requests in the window (the older part weighted), while closed")
    failures: float
    times_opened: int
    reason: str | None = Field(description="what a held job's waiting_for says")
    settings: BreakerNumbers


class BreakerList(_Out):
    """Every breaker of the queues the caller sees."""

    breakers: list[BreakerView]


class ScheduleWorkflowView(_Out):
    """The workflow a schedule fires: its name and its jobs (POST /v1/workflows's jobs)."""

    name: str
    jobs: list[dict[str, Any]]


class ScheduleView(_Out):
    """A schedule as the API shows it."""

    id: int
    name: str
    kind: Literal["cron", "interval", "once"]
    cron: str | None
    interval: float | None
    at: datetime | None
    timezone: str
    job: JobTemplate | None = Field(description="the job each fire time makes (null: it fires a workflow)")
    workflow: ScheduleWorkflowView | None = Field(
        None, description="the workflow each fire time submits: name and jobs (null: it makes a job)"
    )
    paused: bool
    paused_reason: str | None = Field(
        description="why the schedule paused itself (null: it runs, or a person paused it)"
    )
    overlap: Literal["skip", "buffer_one", "buffer_all", "cancel_previous", "allow"]
    catch_up: Literal["latest", "none", "all"]
    catch_up_window: float
    jitter: float
    pause_after_failures: int = Field(description="pause after this many consecutive dead runs (0: never)")
    exclude_dates: list[str] = Field(description="local dates (YYYY-MM-DD) without runs")
    exclude_cron: str | None = Field(description="fire times this cron expression matches do not run")
    next_fire_at: datetime | None = Field(description="null when paused, or when a one-time schedule has fired")
    last_fire_at: datetime | None
    fired: int = Field(description="jobs made (buffered runs included)")
    skipped: int = Field(description="fire times the overlap policy skipped (each one is a schedule.skipped event)")
    last_skipped_at: datetime | None
    missed: int = Field(description="fire times missed during downtime or a pause (schedule.missed events)")
    failures: int = Field(description="consecutive runs that ended dead")
    created_at: datetime
    updated_at: datetime


class ScheduleList(_Out):
    """Every schedule the caller sees."""

    schedules: list[ScheduleView]


FireMark = Literal["excluded", "dst_gap", "dst_overlap", "no_run", "may_skip"]


class FireTime(_Out):
    """One fire time, in the schedule's zone and in UTC, with what a reader should know of it."""

    local: str
    utc: datetime
    marks: list[FireMark] = Field(
        description="excluded: an exclusion removes it (listed, not counted in n); dst_gap: just after "
        "clocks sprang forward (a local time in the skipped hour runs at the first time after it); "
        "dst_overlap: a local time that happens twice (it runs the first time); no_run: past, and no job "
        "has this fire time (skipped, missed, or before the schedule existed); may_skip: the next fire "
        "time, skipped if the run going now (overlap: skip) is still going then"
    )
    job_id: int | None = Field(None, description="the job of this fire time, if it has one (a schedule's preview)")


class TimingPreviewResult(_Out):
    """The next fire times of a timing not yet saved."""

    timezone: str
    fire_times: list[FireTime]


class SchedulePreview(_Out):
    """The next fire times of a schedule."""

    schedule_id: int
    timezone: str
    fire_times: list[FireTime]


class BackfillView(_Out):
    """What a backfill made (or, dry, would make)."""

    schedule_id: int
    dry_run: bool
    overlap: Literal["buffer_all", "allow"]
    fire_times: int = Field(description="fire times in the range (exclusions left out)")
    existing: int = Field(description="of them, those that had their job already (made at most once)")
    made: int = Field(description="jobs made (0 in a dry run)")
    would_make: int = Field(description="fire_times - existing")
    first_fire_time: datetime | None
    last_fire_time: datetime | None
    job_ids: list[int] = Field(description="the first 100 jobs made, oldest fire time first")


class Health(_Out):
    """The node is up."""

    status: Literal["ok"]
    version: str
    schema_version: int | None
    last_seq: int
    agents: int


class Alive(_Out):
    """The process answers."""

    status: Literal["alive"]
    uptime_seconds: float


class Ready(_Out):
    """The node can serve: what each check found."""

    status: Literal["ready"]
    checks: dict[str, str] = Field(description="store, schema and bus, each in words")


class NotReady(ErrorBody):
    """The node cannot serve yet (503): the error body, with the checks."""

    status: Literal["not ready"]
    checks: dict[str, str]


class AgentView(_Out):
    """A connected agent (of this node or, as they last announced it, of another)."""

    name: str
    host: str
    pid: int | None
    version: str
    queues: list[str] = Field(description='["*"] for every queue')
    queue_slots: dict[str, int] = Field(default_factory=dict, description="slots kept for a queue (bulkheads)")
    labels: dict[str, str]
    slots: int
    slots_used: int
    slots_free: int
    running: list[int] = Field(description="ids of the jobs it runs")
    draining: bool
    heartbeat_age: float = Field(description="seconds since its last message")
    connected_at: float = Field(description="Unix seconds")
    node: str | None = Field(None, description="the node it is connected to")


class AgentList(_Out):
    """Connected agents."""

    agents: list[AgentView]


class LastMinute(_Out):
    """Jobs that finished over the last minute, by outcome."""

    succeeded: int
    failed: int
    dead: int
    cancelled: int


class Dispatch(_Out):
    """This node's claims and result batches since it started: jobs_claimed / claims is the mean
    claim batch, results / result_batches the mean result batch (each batch one transaction)."""

    claims: int
    jobs_claimed: int
    result_batches: int
    results: int


class Stats(_Out):
    """Counts by state and queue; finished jobs per second over the last minute."""

    by_state: dict[str, int]
    by_queue: dict[str, dict[str, int]]
    last_minute: LastMinute
    jobs_per_second: float
    relays: dict[str, dict[str, Any]] = Field(description="each outbox relay (kafka ...): how far behind it is")
    dispatch: Dispatch = Field(description="this node's claims and result batches since it started")


class PickupSeries(_Out):
    """Pick-up latency of one class of waits, per interval (null where no job of the class was claimed)."""

    jobs: list[int] = Field(description="jobs claimed in the interval")
    mean_ms: list[float | None]
    p50_ms: list[float | None] = Field(description="estimated within the latency buckets (exact to a bucket)")
    p95_ms: list[float | None]
    p99_ms: list[float | None]


class PickupHistory(_Out):
    """Pick-up latency per interval (at least a minute: the store keeps it per minute), for jobs held by
    their queue's policy (paused, at a concurrency or rate limit) and for jobs that waited for a slot."""

    bucket_seconds: int
    buckets: list[datetime] = Field(description="the start of each interval")
    held: PickupSeries = Field(description="ready while their queue was paused or at its concurrency or rate limit")
    slot: PickupSeries = Field(description="ready, allowed by their queue, waiting for a free agent slot")


class StatsHistory(_Out):
    """Finished jobs per bucket by outcome, every bucket present (zeros included)."""

    range: Literal["15m", "1h", "24h"]
    bucket_seconds: int
    buckets: list[datetime] = Field(description="the start of each bucket")
    outcomes: dict[str, list[int]] = Field(description="succeeded, failed, dead, cancelled: a count per bucket")
    success_percent: list[float | None] = Field(description="per bucket; null when nothing finished")
    pickup: PickupHistory = Field(description="pick-up latency (ready -> claimed) split by why jobs waited")


class Me(_Out):
    """The caller: role, teams, queues and the actions its role allows."""

    subject: str
    name: str
    role: str
    teams: list[str]
    queues: list[str]
    auth: str = Field(description="how it signed in: none, token, oidc, session")
    allowed: list[str]


class AuthConfig(_Out):
    """How to sign in to this server; the OIDC fields only with `auth = oidc`."""

    auth: Literal["none", "token", "oidc"]
    issuer: str | None = None
    audience: str | None = None
    cli_client_id: str | None = None
    scopes: str | None = None
    authorization_endpoint: str | None = None
    token_endpoint: str | None = None
    device_authorization_endpoint: str | None = None
    web_login: bool | None = None


class TicketExchange(_Out):
    """A session token for the web UI's backend."""

    token: str
    expires_at: float = Field(description="Unix seconds")
    user: Me


class SignedOut(_Out):
    """The browser session cookie is cleared."""

    signed_out: Literal[True]
    end_session_endpoint: str | None = Field(None, description="the IdP's logout page, to end its session too")


class AuditEntry(_Out):
    """Who did what, when and from where, with the target's state before and after."""

    id: int
    at: datetime
    actor: str
    subject: str
    role: str
    via: str
    ip: str | None
    user_agent: str | None
    action: str
    target: str | None
    outcome: str = Field(description="ok, refused or failed")
    message: str | None
    before: Any
    after: Any


class AuditPage(_Out):
    """One page of the audit log, newest first."""

    entries: list[AuditEntry]
    next_cursor: int | None


__all__ = ["ErrorBody"]


class ArchiveFile(_Out):
    """One archive file: the finished jobs of one day (by finish time, UTC), on the node that wrote it."""

    file: str
    day: str
    bytes: int
    jobs: int | None = Field(description="records appended to it (null: written before the store kept count)")
    node: str = Field(description="archive_node of the node that wrote it (default: its host name)")
    folder: str = Field(description="its archive_dir on that node")
    here: bool = Field(description="this node reads it: archive show and restore through this node see it")


class ArchiveList(_Out):
    """Every node's archive files, newest day first (core/retention.py), and this node's own folder."""

    folder: str
    node: str
    files: list[ArchiveFile]


class ArchivedJob(_Out):
    """A job as it was archived, with its attempts and the file it is in."""

    file: str
    job: JobView
    attempts: list[Attempt]


class ArchiveRestored(_Out):
    """What a restore put back: jobs whose id the store has already are skipped."""

    file: str
    records: int
    restored: int
    skipped: int


WorkflowStateName = Literal["running", "succeeded", "failed", "cancelled"]


class WorkflowView(_Out):
    """A workflow: its state, its jobs counted by state, when it started and ended."""

    id: int
    name: str
    state: WorkflowStateName
    total: int = Field(description="how many jobs it has")
    queues: list[str]
    paused: bool
    cancel_requested: bool
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    counts: dict[str, int] = Field(description="its jobs by state")


class WorkflowNode(_Out):
    """One job of a workflow, for drawing the graph."""

    id: int
    ref: str | None
    name: str
    state: JobStateName  # type: ignore[valid-type]
    queue: str
    last_error: str | None = Field(
        description="why it failed, is dead, or was cancelled or skipped (a parent's failure, say); null otherwise"
    )
    parents: list[int]


class WorkflowDetail(WorkflowView):
    """A workflow with every job as a node of its graph."""

    nodes: list[WorkflowNode]


class WorkflowCreated(_Out):
    """The workflow stored, and the id each ref was given."""

    workflow: WorkflowView
    ids: dict[str, int]


class WorkflowPage(_Out):
    """One page of workflows, newest first."""

    workflows: list[WorkflowView]
    next_cursor: int | None = Field(description="pass as `cursor` for the next page; null on the last page")


class PickupObjective(_Out):
    """One pick-up objective: at least `percentile` % of the jobs start within `within_ms`."""

    percentile: int
    within_ms: int
    jobs_within: int
    share: float | None = Field(description="the share of the window's jobs that started within it (null: no jobs)")
    met: bool | None


class SloWindow(_Out):
    """The objectives over one window, from the jobs that finished in it."""

    window: Literal["1h", "24h"]
    jobs: int
    pickup: list[PickupObjective]
    succeeded: int
    dead: int
    success_ratio: float | None
    error_budget_left: float | None = Field(description="1: untouched, 0: spent, below 0: overspent (null: no jobs)")
    dead_allowed: float = Field(description="how many dead jobs the 99 % success objective allows in the window")


class Slo(_Out):
    """Pick-up p50 / p95 / p99 within 100 ms / 500 ms / 2 s, and 99 % success, over the last hour and day."""

    success_target: float
    windows: list[SloWindow]
