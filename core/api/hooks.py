"""Incoming hooks: `POST /v1/hooks/{name}` submits a job or a workflow (a DAG of jobs) from the hook's
template, with the request body available to every task; the hooks themselves are managed (admin only) under /v1/notifications/hooks.

A call proves itself with the hook's own secret: a Standard Webhooks signature (`auth: hmac`, the
default: webhook-id, webhook-timestamp within the hook's tolerance, webhook-signature) or a bearer
token (`auth: bearer`). A wrong one is a 401, submits nothing, and is in the audit log. A
webhook-id seen before is a 409: the job carries the idempotency key `hook:{name}:{id}` (a
workflow's jobs `hook:{name}:{id}:{ref}`, and the store refuses a workflow whose keys exist).

The task finds the call in JOBDECK_HOOK_NAME, JOBDECK_HOOK_ID and JOBDECK_HOOK_BODY (shell and
python tasks' environment); a python task also gets the parsed JSON body as the keyword `hook`, and
an http task without a body of its own forwards it.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import secrets as random_secrets
from typing import Annotated, Any, Literal, cast

import orjson
from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import ConfigDict, Field

from core.api.access import actor_of
from core.api.app import JSON
from core.api.deps import Route, get_engine
from core.api.fields import ID_MAX, JSON_DEPTH_MAX, json_depth
from core.api.notify_models import Name, Secret, _Out
from core.api.openapi import errors
from core.api.schemas import JobTemplate, WorkflowCreate, WorkflowJob, _Strict
from core.auth.roles import Principal
from core.engine import Engine
from core.errors import Conflict, InvalidInput, PayloadTooLarge, Unauthorized
from core.model import iso, job_summary
from core.notify import signing
from core.store import audit
from core.store.hooks import HookStore
from core.workflow import validate_workflow, workflow_to_dict

router = APIRouter(prefix="/v1", tags=["hooks"], route_class=Route)
EngineDep = Annotated[Engine, Depends(get_engine)]
HookIdPath = Annotated[int, Path(ge=1, le=ID_MAX, description="an incoming hook's id")]
HookNamePath = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$", description="the hook's name")]
MAX_BODY = 64 * 1024  # a hook's body goes into the task's environment: keep it well under the OS limit
Token = Annotated[str, Field(min_length=24, max_length=200, pattern=r"^[A-Za-z0-9._~+/=\-]+$",
                             description="a bearer token of 24-200 characters (write-only); absent: JobDeck makes one")]  # fmt: skip
Tolerance = Annotated[float, Field(gt=0, le=3600, description="seconds a signed call's timestamp may be off")]
MAX_HOOK_WORKFLOW_JOBS = 100  # each job's task gets the body (up to 64 KiB): bound what one call can store
_AUTH_RULE: dict[str, Any] = {"oneOf": [
    {"required": ["auth"], "properties": {"auth": {"const": "bearer"}, "secret": {"type": "null"}}},
    {"properties": {"auth": {"const": "hmac"}, "token": {"type": "null"}}},
]}  # fmt: skip
_ONE_TEMPLATE: dict[str, Any] = {"oneOf": [
    {"required": ["job"], "properties": {"job": {"type": "object"}, "workflow": {"type": "null"}}},
    {"required": ["workflow"], "properties": {"workflow": {"type": "object"}, "job": {"type": "null"}}},
]}  # fmt: skip
_AT_MOST_ONE_TEMPLATE: dict[str, Any] = {
    "not": {"required": ["job", "workflow"], "properties": {"job": {"type": "object"}, "workflow": {"type": "object"}}}
}


class HookWorkflow(WorkflowCreate):
    """A workflow template: each call submits these jobs and their dependencies; every task gets the body."""

    jobs: list[WorkflowJob] = Field(min_length=1, max_length=MAX_HOOK_WORKFLOW_JOBS)

    def template(self) -> dict[str, Any]:
        """The stored template (its DAG checked now, so a call cannot fail on a cycle or a bad ref)."""
        specs = self.specs()
        validate_workflow(specs)
        return {"workflow": {"name": self.name, "jobs": specs}}


def _template(job: JobTemplate | None, workflow: HookWorkflow | None) -> dict[str, Any] | None:
    if job is not None and workflow is not None:
        raise InvalidInput("workflow: a hook submits one `job` or one `workflow`, not both", field="workflow")
    return job.to_spec() if job is not None else workflow.template() if workflow is not None else None


class HookCreate(_Strict):
    """An incoming hook: calls to POST /v1/hooks/{name} that prove themselves submit `job`."""

    model_config = ConfigDict(json_schema_extra={"allOf": [_AUTH_RULE, _ONE_TEMPLATE]})

    name: Name
    auth: Literal["hmac", "bearer"] = "hmac"
    secret: Secret | None = Field(None, description="auth hmac: the signing secret (absent: JobDeck makes one)")
    token: Token | None = None
    job: JobTemplate | None = Field(None, description="the job each call submits (or give `workflow`)")
    workflow: HookWorkflow | None = Field(None, description="the workflow each call submits (or give `job`)")
    tolerance_seconds: Tolerance = signing.TOLERANCE
    enabled: bool = True


class HookUpdate(_Strict):
    """Fields of a hook to change (a new secret or token replaces the old one at once); null leaves one.
    A `job` or a `workflow` replaces the template, whichever kind it was."""

    model_config = ConfigDict(json_schema_extra=_AT_MOST_ONE_TEMPLATE)

    secret: Secret | None = None
    token: Token | None = None
    job: JobTemplate | None = None
    workflow: HookWorkflow | None = None
    tolerance_seconds: Tolerance | None = None
    enabled: bool | None = None


class HookView(_Out):
    """An incoming hook, without its secret."""

    id: int
    name: str
    auth: Literal["hmac", "bearer"]
    path: str = Field(description="where to call it")
    job: dict[str, Any] | None = Field(description="the job template (null: the hook submits a workflow)")
    workflow: dict[str, Any] | None = Field(description="the workflow template: name and jobs (null: a job)")
    tolerance_seconds: float
    enabled: bool
    created_at: str
    updated_at: str


class HookCreated(HookView):
    """The new hook, with the secret or token JobDeck made (shown this once; null if you gave one)."""

    secret: str | None
    token: str | None


class HookList(_Out):
    """Every incoming hook."""

    hooks: list[HookView]


class HookSubmitted(_Out):
    """What a hook call submitted: a job, or a workflow with its jobs' ids by ref."""

    hook: str
    job: dict[str, Any] | None = Field(description="the job's summary (id, name, queue, state ...); null: a workflow")
    workflow: dict[str, Any] | None = Field(None, description="the workflow (id, name, state, counts); null: a job")
    ids: dict[str, int] | None = Field(None, description="the workflow's job ids by ref")


def hooks_of(engine: Engine) -> HookStore:
    """The node's store, as the hook definitions' store (both stores mix HookStore in)."""
    return cast(HookStore, engine.store)


def hook_view(h: dict[str, Any]) -> dict[str, Any]:
    wf = h["job"].get("workflow")
    return {"id": h["id"], "name": h["name"], "auth": h["auth"], "path": f"/v1/hooks/{h['name']}",
            "job": None if wf is not None else h["job"], "workflow": wf,
            "tolerance_seconds": h["tolerance"], "enabled": h["enabled"], "created_at": iso(h["created_at"]),
            "updated_at": iso(h["updated_at"])}  # fmt: skip


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# -- managing hooks (admin)


@router.get("/notifications/hooks", summary="Incoming hooks", response_model=HookList)
async def list_hooks(engine: EngineDep) -> JSON:
    return JSON({"hooks": [hook_view(h) for h in await hooks_of(engine).list_hooks()]})


@router.post("/notifications/hooks", status_code=201, summary="Create an incoming hook",
             response_model=HookCreated, responses=errors(409))  # fmt: skip
async def create_hook(body: HookCreate, engine: EngineDep) -> JSON:
    template = _template(body.job, body.workflow)
    if template is None:
        raise InvalidInput("job: give the `job` (or the `workflow`) each call submits", field="job")
    made_secret = made_token = None
    if body.auth == "hmac":
        if body.token is not None:
            raise InvalidInput("token: a hook with auth hmac is signed with `secret`, not a token", field="token")
        secret = body.secret or (made_secret := signing.new_secret())
        stored: dict[str, Any] = {"secret": secret}
    else:
        if body.secret is not None:
            raise InvalidInput("secret: a hook with auth bearer takes `token`, not a signing secret", field="secret")
        token = body.token or (made_token := random_secrets.token_urlsafe(32))
        stored = {"token_sha256": _token_hash(token)}
    h = await hooks_of(engine).create_hook(body.name, body.auth, stored, template, body.tolerance_seconds,
                                           body.enabled)  # fmt: skip
    return JSON({**hook_view(h), "secret": made_secret, "token": made_token}, status_code=201)


@router.get("/notifications/hooks/{hook_id:id}", summary="One incoming hook", response_model=HookView)
async def get_hook(hook_id: HookIdPath, engine: EngineDep) -> JSON:
    return JSON(hook_view(await hooks_of(engine).get_hook(hook_id)))


@router.patch("/notifications/hooks/{hook_id:id}", summary="Change an incoming hook", response_model=HookView,
              responses=errors(409))  # fmt: skip
async def update_hook(hook_id: HookIdPath, body: HookUpdate, engine: EngineDep) -> JSON:
    old = await hooks_of(engine).get_hook(hook_id)
    changes: dict[str, Any] = {}
    if body.secret is not None or body.token is not None:
        wrong = "token" if old["auth"] == "hmac" and body.token is not None else (
            "secret" if old["auth"] == "bearer" and body.secret is not None else None)  # fmt: skip
        if wrong:
            raise Conflict(f"{wrong}: hook {old['name']} has auth {old['auth']}", field=wrong)
        changes["secrets"] = ({"secret": body.secret} if old["auth"] == "hmac"
                              else {"token_sha256": _token_hash(str(body.token))})  # fmt: skip
    template = _template(body.job, body.workflow)
    if template is not None:
        changes["job"] = template
    if body.tolerance_seconds is not None:
        changes["tolerance"] = body.tolerance_seconds
    if body.enabled is not None:
        changes["enabled"] = body.enabled
    return JSON(hook_view(await hooks_of(engine).update_hook(hook_id, changes)))


@router.delete("/notifications/hooks/{hook_id:id}", status_code=204, summary="Delete an incoming hook")
async def delete_hook(hook_id: HookIdPath, engine: EngineDep) -> Response:
    await hooks_of(engine).delete_hook(hook_id)
    return Response(status_code=204)


# -- calling a hook (public: the hook's secret is the credential)


@router.post("/hooks/{name}", status_code=202, summary="Call an incoming hook: submits its job",
             response_model=HookSubmitted, responses=errors(401, 409),
             openapi_extra={"requestBody": {"content": {"application/json": {"schema": {}}},
                                            "description": "any body (at most 64 KiB): the task gets it"}})  # fmt: skip
async def call_hook(name: HookNamePath, request: Request, engine: EngineDep) -> JSON:
    hook = await hooks_of(engine).hook_named(name)
    caller = actor_of(Principal(f"hook:{name}", f"hook:{name}", "hook", via="hook"), request)
    body = await request.body()
    msg_id = request.headers.get("webhook-id") or None
    reason = _refusal(hook, request, body, msg_id, engine.clock())
    if reason is not None:
        entry = audit.AuditScope(caller, "call_hook", f"hook:{name}").row(engine.clock(), "refused", reason)
        await engine.store.record_audit(entry)
        raise Unauthorized(f"hook {name}: {reason}")
    if not hook["enabled"]:
        raise Conflict(f"hook {name} is turned off (PATCH /v1/notifications/hooks/{hook['id']} enabled: true)")
    if len(body) > MAX_BODY:
        raise PayloadTooLarge(f"a hook's body is at most {MAX_BODY // 1024} KiB (got {len(body)} bytes)")
    if msg_id is not None and (len(msg_id) > 100 or not msg_id.isprintable()):
        raise InvalidInput("webhook-id: at most 100 printable characters", field="webhook-id")
    audit.set_acting(caller, "call_hook", f"hook:{name}")
    if "workflow" in hook["job"]:
        return await _call_workflow(engine, hook, msg_id, body)
    spec = hook_job(hook, msg_id, body)
    [(job, created)] = await engine.submit([spec])
    if not created:
        raise Conflict(f"hook {name}: delivery {msg_id} was received before (job {job.id}); a replay is refused",
                       field="webhook-id", job_id=job.id)  # fmt: skip
    return JSON({"hook": name, "job": job_summary(job)}, status_code=202)


async def _call_workflow(engine: Engine, hook: dict[str, Any], msg_id: str | None, body: bytes) -> JSON:
    name, specs = hook["name"], hook_workflow(hook, msg_id, body)
    try:
        wf, jobs = await engine.submit_workflow(hook["job"]["workflow"]["name"], specs)
    except Conflict as seen:
        raise Conflict(f"hook {name}: delivery {msg_id} was received before (job {seen.extra.get('job_id')}); "
                       "a replay is refused", field="webhook-id", job_id=seen.extra.get("job_id")) from None  # fmt: skip
    counts: dict[str, int] = {}
    for j in jobs:
        counts[j.state] = counts.get(j.state, 0) + 1
    return JSON({"hook": name, "job": None, "workflow": workflow_to_dict(wf, counts),
                 "ids": {j.ref: j.id for j in jobs}}, status_code=202)  # fmt: skip


def _refusal(hook: dict[str, Any], request: Request, body: bytes, msg_id: str | None, now: float) -> str | None:
    """Why a call does not prove itself (None: it does)."""
    if hook["auth"] == "bearer":
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return "an Authorization: Bearer <the hook's token> header is required"
        if not hmac.compare_digest(_token_hash(token.strip()), hook["secrets"]["token_sha256"]):
            return "the bearer token is not this hook's"
        return None
    key = signing.secret_key(hook["secrets"]["secret"])
    h = request.headers
    return signing.verify(key, msg_id or "", h.get("webhook-timestamp", ""), h.get("webhook-signature", ""), body,
                          now, hook["tolerance"])  # fmt: skip


def _parse_body(body: bytes) -> tuple[str, Any]:
    """The body as text and as JSON (the text itself if it is not JSON); InvalidInput naming `body`."""
    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise InvalidInput("body: a hook's body must be UTF-8 text (JSON or not)", field="body") from None
    if "\x00" in text:
        raise InvalidInput("body: a hook's body may not contain NUL characters", field="body")
    try:
        parsed: Any = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        parsed = text
    depth = json_depth(parsed)
    if depth > JSON_DEPTH_MAX:
        raise InvalidInput(f"body: nests {depth} levels of lists and objects; at most {JSON_DEPTH_MAX}", field="body")
    return text, parsed


def _give_body(spec: dict[str, Any], hook: dict[str, Any], msg_id: str | None, text: str, parsed: Any) -> None:
    task = spec["task"]
    env = {"JOBDECK_HOOK_NAME": hook["name"], "JOBDECK_HOOK_ID": msg_id or "", "JOBDECK_HOOK_BODY": text}
    if task["kind"] in ("shell", "python"):
        task["env"] = {**task.get("env", {}), **env}
    if task["kind"] == "python":
        task["kwargs"] = {**task.get("kwargs", {}), "hook": parsed}
    if task["kind"] == "http" and task.get("body") is None:
        task["body"] = parsed


def hook_job(hook: dict[str, Any], msg_id: str | None, body: bytes) -> dict[str, Any]:
    """The job a call submits: the template, with the call's body given to the task."""
    text, parsed = _parse_body(body)
    spec: dict[str, Any] = copy.deepcopy(hook["job"])
    _give_body(spec, hook, msg_id, text, parsed)
    spec.setdefault("name", f"hook:{hook['name']}")
    if msg_id is not None:
        spec["idempotency_key"] = f"hook:{hook['name']}:{msg_id}"
    return spec


def hook_workflow(hook: dict[str, Any], msg_id: str | None, body: bytes) -> list[dict[str, Any]]:
    """The workflow's job specs a call submits: each task gets the call's body, each job a key from the call."""
    text, parsed = _parse_body(body)
    specs: list[dict[str, Any]] = copy.deepcopy(hook["job"]["workflow"]["jobs"])
    for spec in specs:
        _give_body(spec, hook, msg_id, text, parsed)
        spec.setdefault("name", f"hook:{hook['name']}:{spec['ref']}")
        if msg_id is not None:
            spec["idempotency_key"] = f"hook:{hook['name']}:{msg_id}:{spec['ref']}"
    return specs
