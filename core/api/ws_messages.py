"""The messages of the two WebSockets, as pydantic models: they check what a remote peer sends
and write the JSON schemas the OpenAPI document links (see core/api/openapi.py).

`/v1/events`: the server sends events (the REST Event) and `stream.*` control messages; the client
may send a filter change. `/v1/agents`: the agent protocol of core/protocol.py. Agent messages
allow extra fields, so a newer agent's additions do not break an older core; the fields listed
are checked, so a malformed message is answered with an error instead of breaking the session.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError

from core.api.fields import ID_MAX, JSON_DEPTH_MAX, Int, Labels, json_depth, whole

WsId = Annotated[int, Field(ge=0, le=ID_MAX, strict=True), BeforeValidator(whole)]
Attempt = Annotated[int, Field(ge=0, le=2**31 - 1, strict=True), BeforeValidator(whole)]
Pair = tuple[WsId, Attempt]


class _Msg(BaseModel):
    model_config = ConfigDict(extra="allow")


# ---------------------------------------------------------------- /v1/events


class FeedFilter(BaseModel):
    """What the subscriber wants from now on (each list empty or absent: everything)."""

    model_config = ConfigDict(extra="forbid")

    queues: list[str] = Field(default_factory=list, max_length=1000)
    job_ids: list[WsId] = Field(default_factory=list, max_length=10_000)
    types: list[str] = Field(default_factory=list, max_length=1000)


class FeedFilterMessage(BaseModel):
    """client -> server: change the filter of this subscription."""

    model_config = ConfigDict(extra="forbid")

    filter: FeedFilter


class StreamControl(BaseModel):
    """server -> client: `stream.caught_up` (last_seq: history sent, live from here), `stream.gap`
    (events between `since` and `oldest` were pruned), `stream.error` (error, status, message: the
    subscription was refused, or a message of the client was not understood)."""

    type: Literal["stream.caught_up", "stream.gap", "stream.error"]
    seq: None = None
    last_seq: int | None = None
    since: int | None = None
    oldest: int | None = None
    error: str | None = None
    status: int | None = None
    message: str | None = None


# ---------------------------------------------------------------- /v1/agents, agent -> core


class Register(_Msg):
    """The first message: who the agent is and what it takes."""

    type: Literal["register"]
    protocol: int
    name: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00]*$")
    instance: str = ""
    host: str = ""
    pid: int | None = None
    version: str = ""
    queues: list[str] = Field(default_factory=list)
    slots: Int = Field(ge=0, le=1_000_000)
    labels: Labels = Field(default_factory=dict)
    running: list[Pair] = Field(default_factory=list, description="[job_id, attempt] it still runs")
    finished: list[Pair] = Field(
        default_factory=list, description="[job_id, attempt] it finished and holds the unacknowledged result of"
    )


class Heartbeat(_Msg):
    """Still alive, still running these [job_id, attempt] pairs (their leases are extended)."""

    type: Literal["heartbeat"]
    running: list[Pair] = Field(default_factory=list)
    finished: list[Pair] = Field(default_factory=list, description="held results not yet acknowledged")


class Output(_Msg):
    """Live output: [job_id, attempt, text] chunks."""

    type: Literal["output"]
    chunks: list[tuple[WsId, Attempt, str]]


class RunResultMessage(_Msg):
    """How one attempt ended."""

    job_id: WsId
    attempt: Attempt
    outcome: str = Field(description="succeeded, failed, cancelled, timeout or lost")
    error: str | None = None
    output: str = ""
    exit_code: int | None = None
    result: Any = None
    started_at: float | None = None
    finished_at: float | None = None
    retryable: bool = True
    breaker_ok: bool | None = Field(
        None,
        description="an http task's request was sent: whether the host answered "
        "well (not a transport error, 5xx or 429), for its circuit breaker",
    )


class Result(_Msg):
    """Finished attempts, in a batch."""

    type: Literal["result"]
    results: list[RunResultMessage]


class HandBack(_Msg):
    """[job_id, attempt] pairs it was given but did not start (draining)."""

    type: Literal["hand_back"]
    jobs: list[Pair]


class Draining(_Msg):
    """It takes no new work."""

    type: Literal["draining"]


AgentMessage = Annotated[Register | Heartbeat | Output | Result | HandBack | Draining, Field(discriminator="type")]
_AGENT_MESSAGE: TypeAdapter[Any] = TypeAdapter(AgentMessage)
KNOWN_AGENT_TYPES = frozenset({"register", "heartbeat", "output", "result", "hand_back", "draining"})


def _ids(v: Any, n: int) -> bool:
    """`v` is [job_id, attempt] (+ one more item when n is 3) with both whole numbers in range."""
    if type(v) is not list or len(v) != n:
        return False
    job, attempt = v[0], v[1]
    return type(job) is int and type(attempt) is int and 0 <= job <= ID_MAX and 0 <= attempt < 2**31


def _hot_problem(msg: dict[str, Any]) -> str | None:
    """The messages of every second (heartbeat, output, result), checked by hand: pydantic took ~3 us
    a pair, 15 ms for a 5,000-slot agent's heartbeat."""
    kind = msg["type"]
    if kind == "heartbeat":
        for key in ("running", "finished"):
            pairs = msg.get(key, [])
            if type(pairs) is not list or not all([_ids(p, 2) for p in pairs]):
                return f"heartbeat message: {key} must be a list of [job_id, attempt] whole numbers"
    elif kind == "output":
        chunks = msg.get("chunks")
        if type(chunks) is not list or not all(_ids(c, 3) and type(c[2]) is str for c in chunks):
            return "output message: chunks must be a list of [job_id, attempt, text]"
    else:
        results = msg.get("results")
        if type(results) is not list or not all(type(r) is dict for r in results):
            return "result message: results must be a list of objects"
        for r in results:
            if not (type(r.get("job_id")) is int and type(r.get("attempt")) is int and type(r.get("outcome")) is str):
                return "result message: each result needs job_id and attempt (whole numbers) and an outcome"
            if not (0 <= r["job_id"] <= ID_MAX and 0 <= r["attempt"] < 2**31):
                return f"result message: job_id {r['job_id']} or attempt {r['attempt']} is out of range"
            if isinstance(r.get("result"), (list, dict)) and json_depth(r["result"]) > JSON_DEPTH_MAX:
                return f"result message: the result of job {r['job_id']} nests over {JSON_DEPTH_MAX} levels"
    return None


def agent_message_problem(msg: Any) -> str | None:
    """Why `msg` is not a well-formed agent message (None when it is, or is of a type this core does not know)."""
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        return 'every message must be a JSON object with a "type"'
    if msg["type"] not in KNOWN_AGENT_TYPES:
        return None  # the session logs and skips it: a newer agent may know more
    if msg["type"] in ("heartbeat", "output", "result"):
        return _hot_problem(msg)
    try:
        _AGENT_MESSAGE.validate_python(msg)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "message"
        return f"{msg['type']} message: {where}: {first['msg']}"
    return None


# ---------------------------------------------------------------- /v1/agents, core -> agent


class Welcome(BaseModel):
    """The registration is accepted."""

    type: Literal["welcome"]
    protocol: int
    lease_seconds: float


class Assignment(BaseModel):
    """One attempt of a job to run."""

    job_id: int
    attempt: int
    name: str
    queue: str
    task: dict[str, Any]
    timeout: float | None
    run_at: float


class Assign(BaseModel):
    """Jobs to run now."""

    type: Literal["assign"]
    jobs: list[Assignment]


class Cancel(BaseModel):
    """Stop this attempt (cancelled, or its lease was lost)."""

    type: Literal["cancel"]
    job_id: int
    attempt: int
    reason: str | None = Field(
        None, description="set when the run is refused, not cancelled: why the attempt is no longer this agent's"
    )


class ResultAck(BaseModel):
    """The results of a Result message are done: [job_id, attempt, refusal] each, refusal null when
    the result was recorded, else why it never will be (the agent logs it and forgets the result)."""

    type: Literal["result_ack"]
    results: list[tuple[int, int, str | None]]


class Drain(BaseModel):
    """Take no new work; finish what runs."""

    type: Literal["drain"]


class AgentError(BaseModel):
    """The registration was refused, or a message was malformed: the core closes the socket. With
    `retry_seconds` (the name is held by a connection the core still counts as live, perhaps the
    agent's own dead process): the agent may register again for that long."""

    type: Literal["error"]
    message: str
    retry_seconds: float | None = None


WS_SCHEMAS: dict[str, type[BaseModel]] = {
    m.__name__: m
    for m in (
        FeedFilterMessage,
        StreamControl,
        Register,
        Heartbeat,
        Output,
        Result,
        HandBack,
        Draining,
        Welcome,
        Assign,
        Cancel,
        ResultAck,
        Drain,
        AgentError,
    )
}
