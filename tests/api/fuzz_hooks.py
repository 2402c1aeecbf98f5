"""schemathesis hooks for tests/api/test_fuzz.py: the rules of the API that JSON Schema cannot say.

Each is written in the OpenAPI document's descriptions; here the fuzzer learns them for its
schema-valid (positive) cases, so a "schema-valid request rejected" failure means the document and
the server really disagree. Negative cases are left alone. Everything else (exactly-one-of rules,
id ranges, NUL, JSON depth, states) is in the schema itself.
- `format: cron` is a cron expression (the server parses it with croniter; the coverage phase
  ignores formats, so a positive case's invalid cron is replaced too);
- a time is within the years 1-9999 once converted to UTC (an offset can push 0001-01-01 out);
- a one-time schedule's `at` is a time to come (the past would never fire: 422);
- GET /v1/jobs's `cursor` is the `next_cursor` of a page (opaque): positive cases go without one;
- `depends_on` of a job submit names jobs that exist (a made-up id is a 422): positive cases go without;
- a workflow's refs are unique and its `depends_on` names other refs of it, with no cycle: positive
  cases get refs j0, j1, ... and each job depends on earlier ones only (a hook's workflow template too).
- a schedule's `jitter` is shorter than the time between two of its fire times, and its exclusions
  leave it some fire time: positive cases get no jitter and no exclude_cron;
- a backfill's range is in the past, from <= to, with at most 10,000 fire times: positive cases
  backfill one past hour.

One cost cut (filter_case): the coverage phase does not walk the `task` of a schedule's or a hook's
job or workflow template (620 of the unsigned run's 5,032 cases). Those are the 41 mutations of the
task models (shell / python / http) that POST /v1/jobs's coverage sends as `task -> ...`, each sent
four times more (job and workflow template, two routes); the templates' other fields and the
routes' own fields keep theirs, and the fuzzing and stateful phases still send whole random
templates, tasks included.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import schemathesis
from hypothesis import strategies as st

from core.errors import InvalidSchedule
from core.schedule import validate_cron

CRONS = ("* * * * *", "0 2 * * *", "*/5 * * * *", "30 9 * * 1-5", "0 0 1 * *", "15 14 1 * * 30", "@daily",
         "@hourly", "0 3 * * 0", "5,35 * * * *")  # fmt: skip
TIME_FIELDS = frozenset({"at", "run_at", "created_after", "created_before", "since", "until", "from", "to"})
BACKFILL_RANGE = {"from": "2026-11-01T00:00:00Z", "to": "2026-11-01T01:00:00Z"}

schemathesis.openapi.format("cron", st.sampled_from(CRONS))


TEMPLATE_ROUTES = frozenset({("POST", "/v1/schedules"), ("POST", "/v1/notifications/hooks")})
TEMPLATE_TASK = ("job -> task", "workflow -> jobs -> Array with invalid items: task")


@schemathesis.hook
def filter_case(ctx: schemathesis.HookContext, case: schemathesis.Case) -> bool:
    """Coverage cases of a template's task go (POST /v1/jobs's coverage sends the same ones)."""
    meta = case.meta
    if meta is None or meta.phase.name != "coverage" or (case.method.upper(), case.path) not in TEMPLATE_ROUTES:
        return True
    description = getattr(meta.phase.data, "description", "")
    return not description.startswith(TEMPLATE_TASK)


@schemathesis.hook
def map_case(ctx: schemathesis.HookContext, case: schemathesis.Case) -> schemathesis.Case:
    """Positive cases: times into the years JobDeck keeps, a schedule's one-time `at` into the future."""
    meta = case.meta
    if meta is not None and not meta.generation.mode.is_positive:
        return case
    schedule_write = case.path in ("/v1/schedules", "/v1/schedules/{schedule_id}") and case.method != "GET"
    if isinstance(case.body, dict):
        case.body = _mapped(case.body, future_at=schedule_write)
        if case.path == "/v1/jobs" and case.method == "POST":
            case.body.pop("depends_on", None)
        elif case.path == "/v1/jobs/batch" and isinstance(case.body.get("jobs"), list):
            case.body["jobs"] = [{k: v for k, v in j.items() if k != "depends_on"} if isinstance(j, dict) else j
                                 for j in case.body["jobs"]]  # fmt: skip
        elif case.path == "/v1/workflows" and isinstance(case.body.get("jobs"), list):
            case.body["jobs"] = _acyclic(case.body["jobs"])
        wf = case.body.get("workflow")  # a schedule's or a hook's workflow template
        if isinstance(wf, dict) and isinstance(wf.get("jobs"), list):
            case.body["workflow"] = {**wf, "jobs": _acyclic(wf["jobs"])}
        if schedule_write:
            case.body = {**case.body, **{k: v for k, v in (("jitter", 0), ("exclude_cron", "")) if k in case.body}}
        if case.path.endswith("/backfill"):
            case.body = {**case.body, **BACKFILL_RANGE}
    if isinstance(case.query, dict):
        case.query = _mapped(case.query, future_at=False)
        if case.path == "/v1/jobs" and "cursor" in case.query:
            # an opaque token: a cursor is one the server gave (next_cursor), which no schema can generate
            case.query = {k: v for k, v in case.query.items() if k != "cursor"}
    return case


def _mapped(values: dict[str, Any], *, future_at: bool) -> dict[str, Any]:
    out = dict(values)
    for key, value in values.items():
        if key == "cron" and isinstance(value, str) and not _valid_cron(value):
            out[key] = CRONS[len(value) % len(CRONS)]
        elif key in TIME_FIELDS and isinstance(value, str):
            when = _parse(value)
            if when is None:
                continue
            if key == "at" and future_at and when < datetime.now(UTC) + timedelta(minutes=5):
                out[key] = (datetime.now(UTC) + timedelta(days=1)).isoformat()
            elif when == datetime.min.replace(tzinfo=UTC):
                out[key] = "2001-02-03T04:05:06Z"
        elif isinstance(value, dict) and key in ("job", "workflow"):
            out[key] = _mapped(value, future_at=False)
        elif isinstance(value, list) and key == "jobs":
            out[key] = [_mapped(v, future_at=False) if isinstance(v, dict) else v for v in value]
    return out


def _acyclic(jobs: list[Any]) -> list[Any]:
    """Refs j0, j1, ... and each job's depends_on pointing at earlier refs only (a DAG)."""
    out = []
    for i, job in enumerate(jobs):
        if not isinstance(job, dict):
            out.append(job)
            continue
        deps = job.get("depends_on") if isinstance(job.get("depends_on"), list) else []
        earlier = sorted({f"j{len(str(d)) % i}" for d in deps}) if i else []
        out.append({**job, "ref": f"j{i}", "depends_on": earlier})
    return out


def _valid_cron(expr: str) -> bool:
    try:
        validate_cron(expr)
    except InvalidSchedule:
        return False
    return True


def _parse(value: str) -> datetime | None:
    """The time in UTC; datetime.min (UTC) for one outside the years 1-9999 in UTC; None if no time."""
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    try:
        return when.astimezone(UTC)
    except OverflowError:
        return datetime.min.replace(tzinfo=UTC)
