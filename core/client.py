"""The one typed async client of the JobDeck API, used by the CLI, agents, front ends and tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any, ParamSpec, Protocol
from urllib.parse import quote

import httpx
import orjson
import websockets

from core.errors import InvalidInput, JobDeckError, TLSUntrusted, Unavailable, error_from_dict
from core.protocol import ChannelClosed, Message

P = ParamSpec("P")


#: A pooled connection is reused only this long after its last answer: less than the node's
#: keep-alive (uvicorn's 5 s), so a request never goes out on a connection the node is closing
#: (the schedules bench, 20 creates at a time at a load of 15, got a ReadError from that race).
KEEPALIVE_SECONDS = 4.0


class Enqueueable(Protocol[P]):
    """Anything that can describe a job from call arguments (an `agents.sdk.Task`)."""

    def spec(self, *args: P.args, **kwargs: P.kwargs) -> dict[str, Any]: ...


DEFAULT_SERVER = "http://127.0.0.1:8640"

Json = dict[str, Any]
CA_HINT = "give the CA's certificate with --ca-file PATH (or JOBDECK_CA_FILE)"


def tls_context(ca_file: str | None = None) -> ssl.SSLContext:
    """How clients check a node's certificate: the system's CAs plus those in `ca_file` (PEM), TLS 1.2
    at least. A certificate in the file is trusted as it is (it need not be a root: a node's own
    self-signed certificate works)."""
    ctx = ssl.create_default_context()
    if not ctx.cert_store_stats()["x509_ca"]:  # a slim container without a CA bundle: httpx's (certifi)
        import certifi

        ctx.load_verify_locations(cafile=certifi.where())
    if ca_file:
        try:
            ctx.load_verify_locations(cafile=ca_file)
        except (OSError, ssl.SSLError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise InvalidInput(
                f"--ca-file {ca_file}: cannot read it as PEM certificates ({reason})", field="ca_file"
            ) from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    return ctx


def _ssl_cause(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error under a transport error (httpx and websockets wrap it), if there is one."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def relay_lag_text(name: str, lag: Json) -> str:
    """One line saying how far an outbox relay (stats()["relays"][name]) is behind, for people:
    "Kafka relay: caught up", "Kafka relay: 1,204 events (12.5 s) behind", "... no node relays"."""
    label = "Kafka" if name == "kafka" else name.capitalize()
    behind = int(lag.get("behind_events") or 0)
    text = "caught up" if behind == 0 else f"{behind:,} events ({float(lag.get('behind_seconds') or 0):.1f} s) behind"
    if lag.get("holder") is None:
        text += ", no node relays"
    return f"{label} relay: {text}"


def key_limit_text(limit: int | None) -> str:
    """A queue's per-key limit (`key_concurrency`) for people: "at most 1 job of one concurrency key
    runs at once", "at most 3 jobs ... run at once", "no per-key limit"."""
    if limit is None:
        return "no per-key limit"
    one = limit == 1
    return f"at most {limit} job{'' if one else 's'} of one concurrency key run{'s' if one else ''} at once"


def agent_queues_text(agent: Json) -> str:
    """The queues an agent serves as its --queues said them, bulkheads first: "reports:2,emails:1,*"
    (each kept number of slots beside its queue; "*": any other queue)."""
    kept = agent.get("queue_slots") or {}
    shared = [q for q in agent.get("queues") or ["*"] if q not in kept]
    return ",".join([*(f"{q}:{n}" for q, n in kept.items()), *shared])


def breaker_window_text(breaker: Json) -> str:
    """What a circuit breaker (breakers()[i]) judges now: "4 sent, 1 failed in 10 s" while closed; open
    or half open, "nothing sent while open" (its window was cleared when it opened)."""
    if breaker["state"] != "closed":
        return "nothing sent while open"
    return f"{breaker['requests']:g} sent, {breaker['failures']:g} failed in {breaker['settings']['window']:g} s"


def first_sight(seen: deque[str], alert_id: Any) -> bool:
    """Whether a notify.alert with this id is new to a front end (remembered in `seen`, a bounded
    deque): the feed is at least once, so an alert may come twice; one without an id always shows."""
    if not isinstance(alert_id, str):
        return True
    if alert_id in seen:
        return False
    seen.append(alert_id)
    return True


def workflow_layers(nodes: Sequence[Json]) -> list[list[Json]]:
    """The nodes of GET /v1/workflows/ID in layers for drawing: a job one layer below its deepest
    parent; within a layer, ordered by where its parents sit (fewer crossing edges)."""
    by_id = {n["id"]: n for n in nodes}
    children: dict[int, list[int]] = {i: [] for i in by_id}
    waiting = {i: 0 for i in by_id}
    for n in nodes:
        for p in n["parents"]:
            if p in by_id:
                children[p].append(n["id"])
                waiting[n["id"]] += 1
    depth = dict.fromkeys(by_id, 0)
    ready = [i for i, k in waiting.items() if k == 0]
    while ready:  # Kahn's order: every parent's depth is final before its children's
        i = ready.pop()
        for c in children[i]:
            depth[c] = max(depth[c], depth[i] + 1)
            waiting[c] -= 1
            if waiting[c] == 0:
                ready.append(c)
    layers: list[list[Json]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for n in nodes:
        layers[depth[n["id"]]].append(n)
    place: dict[int, float] = {}
    for layer in layers:
        layer.sort(key=lambda n: (sum(place.get(p, 0) for p in n["parents"]) / max(1, len(n["parents"])), n["id"]))
        place.update({n["id"]: k for k, n in enumerate(layer)})
    return layers


class WebSocketChannel:
    """An agent's end of its WebSocket to a core node, as a protocol Channel."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws

    async def send(self, msg: Message) -> None:
        try:
            await self._ws.send(orjson.dumps(msg))
        except websockets.ConnectionClosed as exc:
            raise ChannelClosed(str(exc)) from None

    async def recv(self) -> Message:
        try:
            data = await self._ws.recv()
        except websockets.ConnectionClosed as exc:
            raise ChannelClosed(str(exc)) from None
        msg: Message = orjson.loads(data)
        return msg

    async def close(self) -> None:
        await self._ws.close()


class JobDeckClient:
    """REST calls return the API's JSON as dicts; errors raise the matching `core.errors` class."""

    def __init__(
        self,
        server: str = DEFAULT_SERVER,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        ca_file: str | None = None,
    ) -> None:
        server = server.strip().rstrip("/")
        if "://" not in server:  # "localhost:8640" means http
            server = "http://" + server
        self.server = server.removesuffix("/v1")
        self.ca_file = ca_file or None
        # https:// and wss:// check the node's certificate against the system's CAs and `ca_file`.
        self._tls = tls_context(self.ca_file) if self.server.startswith("https://") else None
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            base_url=self.server, headers=headers, timeout=timeout, verify=self._tls if self._tls else True,
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_SECONDS),
        )  # fmt: skip
        self._token = token

    async def __aenter__(self) -> JobDeckClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None) -> Any:
        try:
            content = orjson.dumps(json) if json is not None else None
            headers = {"content-type": "application/json"} if content is not None else None
            clean = {k: v for k, v in (params or {}).items() if v is not None}
            resp = await self._http.request(method, path, content=content, params=clean, headers=headers)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        if resp.status_code == 204:
            return None
        try:
            body = orjson.loads(resp.content) if resp.content else None
        except orjson.JSONDecodeError:
            body = {"error": "bad_response", "message": resp.text[:300]}
        if resp.status_code >= 400:
            raise error_from_dict(resp.status_code, body if isinstance(body, dict) else {})
        return body

    def _unreachable(self, exc: BaseException, what: str = "JobDeck") -> Unavailable:
        """One line that says why the node could not be reached and what to change."""
        tls = _ssl_cause(exc)
        if isinstance(tls, ssl.SSLCertVerificationError):
            why = f"the CA file {self.ca_file} does not sign it either" if self.ca_file else (
                f"if your own CA signed it, {CA_HINT}")  # fmt: skip
            return TLSUntrusted(f"cannot verify the TLS certificate of {self.server}: {tls.verify_message}; {why}")
        if tls is not None:
            reason = tls.reason or str(tls)
            return Unavailable(f"TLS with {self.server} failed ({reason}); is it a JobDeck node serving https?")
        prog = os.environ.get("JOBDECK_PROG") or "jobdeck"  # what the user types: `./dev` sets it
        hint = f"is it running? (`{prog} up` starts one; --server or JOBDECK_SERVER says where it is)"
        if self.server.startswith("http://") and isinstance(
            exc, (httpx.RemoteProtocolError, httpx.ReadError, websockets.InvalidMessage, EOFError)
        ):
            hint = "if the node serves TLS, its URL starts with https://"
        return Unavailable(f"cannot reach {what} at {self.server} ({type(exc).__name__}); {hint}")

    def _ws_options(self) -> dict[str, Any]:
        return {"ssl": self._tls} if self._tls is not None else {}

    # -- jobs

    async def submit(self, spec: Json) -> Json:
        """Submit one job (see the JobCreate schema) and return it."""
        return await self._call("POST", "/v1/jobs", json=spec)  # type: ignore[no-any-return]

    async def submit_batch(self, specs: Sequence[Json]) -> Json:
        """Submit up to 10,000 jobs in one transaction; returns `{"ids", "created"}`."""
        return await self._call("POST", "/v1/jobs/batch", json={"jobs": list(specs)})  # type: ignore[no-any-return]

    async def get_job(self, job_id: int) -> Json:
        return await self._call("GET", f"/v1/jobs/{job_id}")  # type: ignore[no-any-return]

    async def list_jobs(self, **filters: Any) -> Json:
        """Filters: state, queue, name_prefix, tag, q (search), created_after, created_before; sort
        (id, created, priority, state, queue, duration) and order (asc, desc); cursor, limit;
        count=True adds `total` (and `total_exact`)."""
        return await self._call("GET", "/v1/jobs", params=filters)  # type: ignore[no-any-return]

    async def attempts(self, job_id: int) -> list[Json]:
        return (await self._call("GET", f"/v1/jobs/{job_id}/attempts"))["attempts"]  # type: ignore[no-any-return]

    async def job_events(self, job_id: int) -> list[Json]:
        return (await self._call("GET", f"/v1/jobs/{job_id}/events"))["events"]  # type: ignore[no-any-return]

    async def job_action(self, job_id: int, action: str) -> Json:
        """action: cancel, pause, resume, retry or run-now."""
        return await self._call("POST", f"/v1/jobs/{job_id}/{action}")  # type: ignore[no-any-return]

    async def set_priority(self, job_id: int, priority: int) -> Json:
        return await self._call("POST", f"/v1/jobs/{job_id}/priority", json={"priority": priority})  # type: ignore[no-any-return]

    async def bulk(
        self,
        action: str,
        *,
        ids: Sequence[int] | None = None,
        filter: Json | None = None,
        priority: int | None = None,
        dry_run: bool = False,
    ) -> Json:
        """Act on many jobs at once: the listed `ids`, or every job matching `filter` (the keys of
        `list_jobs`: state, queue, name_prefix, tag). action: cancel, pause, resume, retry or
        priority (with `priority`). Returns `{"matched", "changed", "errors": [{"id", "error", "message"}]}`;
        with `dry_run` nothing changes and `matched` says how many jobs the selection takes."""
        body: Json = {"action": action, **({"dry_run": True} if dry_run else {})}
        if ids is not None:
            body["ids"] = list(ids)
        if filter is not None:
            body["filter"] = filter
        if priority is not None:
            body["priority"] = priority
        return await self._call("POST", "/v1/jobs/bulk", json=body)  # type: ignore[no-any-return]

    async def wait_for(
        self, job_id: int, states: Sequence[str] = ("succeeded", "dead", "cancelled"), timeout: float = 60.0
    ) -> Json:
        """Wait until the job is in one of `states` (by default: finished); return the job."""
        async with asyncio.timeout(timeout):
            since = (await self.health())["last_seq"]  # read before the job, so no change slips between
            job = await self.get_job(job_id)
            if job["state"] in states:
                return job
            async for _ in self.events(
                since=since,
                job_ids=[job_id],
                stop_when=lambda e: e.get("data", {}).get("job", {}).get("state") in states,
            ):
                pass
        return await self.get_job(job_id)

    # -- workflows

    async def submit_workflow(self, name: str, jobs: Sequence[Json]) -> Json:
        """Jobs with a `ref` each and `depends_on` refs; returns {workflow, ids: {ref: id}}."""
        return await self._call("POST", "/v1/workflows", json={"name": name, "jobs": list(jobs)})  # type: ignore[no-any-return]

    async def workflows(self, **filters: Any) -> Json:
        """state, cursor, limit: {workflows, next_cursor}."""
        params = {k: v for k, v in filters.items() if v is not None}
        return await self._call("GET", "/v1/workflows", params=params)  # type: ignore[no-any-return]

    async def get_workflow(self, workflow_id: int) -> Json:
        """A workflow with its counts and its graph's nodes."""
        return await self._call("GET", f"/v1/workflows/{workflow_id}")  # type: ignore[no-any-return]

    async def workflow_action(self, workflow_id: int, action: str) -> Json:
        """action: cancel, pause or resume."""
        return await self._call("POST", f"/v1/workflows/{workflow_id}/{action}")  # type: ignore[no-any-return]

    # -- queues

    async def queues(self) -> list[Json]:
        return (await self._call("GET", "/v1/queues"))["queues"]  # type: ignore[no-any-return]

    async def queue_action(self, name: str, action: str) -> Json:
        """action: pause or resume."""
        return await self._call("POST", f"/v1/queues/{name}/{action}")  # type: ignore[no-any-return]

    async def set_concurrency(self, name: str, concurrency: int | None) -> Json:
        return await self._call("PUT", f"/v1/queues/{name}/concurrency", json={"concurrency": concurrency})  # type: ignore[no-any-return]

    async def update_queue(self, name: str, **limits: Any) -> Json:
        """Change a queue's limits live (concurrency, rate_limit, rate_burst; None removes one)."""
        return await self._call("PATCH", f"/v1/queues/{name}", json=limits)  # type: ignore[no-any-return]

    async def queue_keys(self, name: str) -> Json:
        """A queue's per-key usage: running jobs per concurrency key, waiting jobs per fairness key."""
        return await self._call("GET", f"/v1/queues/{name}/keys")  # type: ignore[no-any-return]

    async def breakers(self) -> list[Json]:
        """The circuit breakers of http tasks, per queue and host (closed ones too)."""
        return (await self._call("GET", "/v1/breakers"))["breakers"]  # type: ignore[no-any-return]

    async def reset_breaker(self, queue: str, host: str) -> Json:
        """Close a queue's circuit breaker for `host` now; the jobs it held are released. The breaker after."""
        return await self._call("POST", f"/v1/queues/{queue}/breakers/{quote(host, safe='')}/reset")  # type: ignore[no-any-return]

    # -- schedules

    async def create_schedule(self, spec: Json) -> Json:
        return await self._call("POST", "/v1/schedules", json=spec)  # type: ignore[no-any-return]

    async def schedules(self) -> list[Json]:
        return (await self._call("GET", "/v1/schedules"))["schedules"]  # type: ignore[no-any-return]

    async def get_schedule(self, schedule_id: int) -> Json:
        return await self._call("GET", f"/v1/schedules/{schedule_id}")  # type: ignore[no-any-return]

    async def update_schedule(self, schedule_id: int, changes: Json) -> Json:
        return await self._call("PATCH", f"/v1/schedules/{schedule_id}", json=changes)  # type: ignore[no-any-return]

    async def delete_schedule(self, schedule_id: int) -> None:
        await self._call("DELETE", f"/v1/schedules/{schedule_id}")

    async def schedule_action(self, schedule_id: int, action: str) -> Json:
        """action: pause, resume or run (run returns the job made)."""
        return await self._call("POST", f"/v1/schedules/{schedule_id}/{action}")  # type: ignore[no-any-return]

    async def preview(self, schedule_id: int, n: int = 10, from_: str | None = None) -> Json:
        """`n` fire times after now (or `from_`, an ISO instant), each with its marks and, past ones, its job."""
        params: Json = {"n": n} if from_ is None else {"n": n, "from": from_}
        return await self._call("GET", f"/v1/schedules/{schedule_id}/preview", params=params)  # type: ignore[no-any-return]

    async def backfill(self, schedule_id: int, start: str, end: str, overlap: str = "buffer_all",
                       dry_run: bool = False) -> Json:  # fmt: skip
        """Make the runs of every past fire time in [start, end] that has none (dry_run: only count)."""
        body = {"from": start, "to": end, "overlap": overlap, "dry_run": dry_run}
        return await self._call("POST", f"/v1/schedules/{schedule_id}/backfill", json=body)  # type: ignore[no-any-return]

    async def preview_timing(self, timing: Json, n: int = 5) -> Json:
        """The next `n` fire times of a timing not yet saved (`{"cron", "timezone"}` or `{"interval"}`,
        ...): `{"timezone", "fire_times": [{"local", "utc"}]}`; a bad one raises InvalidSchedule."""
        return await self._call("POST", "/v1/schedules/preview", json={**timing, "n": n})  # type: ignore[no-any-return]

    # -- node

    async def agents(self) -> list[Json]:
        return (await self._call("GET", "/v1/agents"))["agents"]  # type: ignore[no-any-return]

    async def stats_history(self, range_: str = "1h") -> Json:
        """Finished jobs per interval by outcome over "15m", "1h" or "24h", from the store."""
        return await self._call("GET", "/v1/stats/history", params={"range": range_})  # type: ignore[no-any-return]

    async def stats(self) -> Json:
        return await self._call("GET", "/v1/stats")  # type: ignore[no-any-return]

    async def slo(self) -> Json:
        """Pick-up SLA and success over the last hour and day: `{"success_target", "windows": [...]}`."""
        return await self._call("GET", "/v1/stats/slo")  # type: ignore[no-any-return]

    async def archive_files(self) -> Json:
        """The archive's files of finished jobs: `{"folder", "files": [{"file", "day", "bytes"}]}` (admins)."""
        return await self._call("GET", "/v1/archive")  # type: ignore[no-any-return]

    async def archived_job(self, job_id: int) -> Json:
        """One archived job: `{"file", "job", "attempts"}` (admins)."""
        return await self._call("GET", f"/v1/archive/jobs/{job_id}")  # type: ignore[no-any-return]

    async def restore_archive(self, file: str) -> Json:
        """Put an archive file's jobs back: `{"file", "records", "restored", "skipped"}` (admins)."""
        return await self._call("POST", "/v1/archive/restore", json={"file": file})  # type: ignore[no-any-return]

    async def health(self) -> Json:
        return await self._call("GET", "/healthz")  # type: ignore[no-any-return]

    async def me(self) -> Json:
        """Who this client is signed in as: `{"subject", "name", "role", "teams", "auth", "queues",
        "allowed"}`; `queues` are the patterns of the queues it may act on, `allowed` its actions."""
        return await self._call("GET", "/auth/me")  # type: ignore[no-any-return]

    async def exchange_ticket(self, ticket: str) -> Json:
        """Trade the one-time ticket the browser sign-in returned for a session token:
        `{"token", "expires_at", "user"}` (the web UI's backend keeps the token for that browser)."""
        return await self._call("POST", "/auth/ticket", json={"ticket": ticket})  # type: ignore[no-any-return]

    async def auth_config(self) -> Json:
        """How this server signs people in (`{"auth": "none"|"token"|"oidc", ...}`); needs no credentials."""
        return await self._call("GET", "/auth/config")  # type: ignore[no-any-return]

    async def audit(self, **filters: Any) -> Json:
        """The audit log, newest first (admins). Filters: actor, action, target, since, until, cursor, limit."""
        return await self._call("GET", "/v1/audit", params=filters)  # type: ignore[no-any-return]

    async def agent_channel(self) -> WebSocketChannel:
        """Open the agent protocol's WebSocket (`/v1/agents`) to this node."""
        url = self.server.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + "/v1/agents"
        try:  # no per-message compression: it cost the agent ~5% of its CPU for little gain on loopback/LANs
            ws = await websockets.connect(url, max_size=2**25, open_timeout=10, additional_headers=self._ws_headers(),
                                          compression=None, **self._ws_options())  # fmt: skip
        except ssl.SSLCertVerificationError as exc:  # a setting to fix (TLSUntrusted); other errors are retried
            raise self._unreachable(exc, "the agent endpoint") from None
        except websockets.exceptions.InvalidMessage as exc:  # a node starting or dying: no HTTP answer yet
            raise ConnectionError(f"{url}: no WebSocket handshake answer ({exc})") from None
        except websockets.exceptions.InvalidStatus as exc:
            if exc.response.status_code < 500:  # refused (401, 403, 404): a setting to fix, said as it is
                raise
            raise ConnectionError(f"{url}: the node answered {exc.response.status_code}") from None
        return WebSocketChannel(ws)

    async def drain_agent(self, name: str) -> Json:
        """Ask an agent to take no new work (it finishes what it runs)."""
        return await self._call("POST", f"/v1/agents/{name}/drain")  # type: ignore[no-any-return]

    async def output(self, job_id: int) -> Json:
        """The output tail of a job's latest attempt (live while it runs)."""
        return await self._call("GET", f"/v1/jobs/{job_id}/output")  # type: ignore[no-any-return]

    # -- notifications (admins; docs/notifications.md)

    async def channels(self) -> list[Json]:
        """Notification channels (webhook, email), without their secrets."""
        return (await self._call("GET", "/v1/notifications/channels"))["channels"]  # type: ignore[no-any-return]

    async def create_channel(self, spec: Json) -> Json:
        """A new channel; the answer shows a signing secret JobDeck made this once."""
        return await self._call("POST", "/v1/notifications/channels", json=spec)  # type: ignore[no-any-return]

    async def update_channel(self, channel_id: int, changes: Json) -> Json:
        """Change a channel (`{"enabled": true}` turns a disabled one on again)."""
        return await self._call("PATCH", f"/v1/notifications/channels/{channel_id}", json=changes)  # type: ignore[no-any-return]

    async def send_notification(self, channel_id: int, title: str | None = None, text: str | None = None) -> Json:
        """A one-off notification to a channel (to try it); the delivery, pending."""
        body = {"channel_id": channel_id, **({"title": title} if title else {}), **({"text": text} if text else {})}
        return await self._call("POST", "/v1/notifications", json=body)  # type: ignore[no-any-return]

    async def notifications(self, channel_id: int | None = None, limit: int = 100) -> list[Json]:
        """Deliveries, newest first."""
        return (await self.notifications_page(channel_id, limit=limit))["notifications"]  # type: ignore[no-any-return]

    async def notifications_page(
        self, channel_id: int | None = None, cursor: int | None = None, limit: int = 100
    ) -> Json:
        """One page of deliveries, newest first: {notifications, next_cursor} (pass it as `cursor`)."""
        params = {"limit": limit, **({"channel_id": channel_id} if channel_id else {}),
                  **({"cursor": cursor} if cursor else {})}  # fmt: skip
        return await self._call("GET", "/v1/notifications", params=params)  # type: ignore[no-any-return]

    async def notification(self, notification_id: int) -> Json:
        """One delivery with every attempt (`log`)."""
        return await self._call("GET", f"/v1/notifications/{notification_id}")  # type: ignore[no-any-return]

    async def replay_notification(self, notification_id: int) -> Json:
        """Send a finished delivery again."""
        return await self._call("POST", f"/v1/notifications/{notification_id}/replay")  # type: ignore[no-any-return]

    async def delivery_log(self, channel_id: int, limit: int = 100) -> list[Json]:
        """A channel's attempts, newest first."""
        got = await self._call("GET", f"/v1/notifications/channels/{channel_id}/log", params={"limit": limit})
        return got["attempts"]  # type: ignore[no-any-return]

    async def alert_rules(self) -> list[Json]:
        """Alert rules."""
        return (await self._call("GET", "/v1/notifications/rules"))["rules"]  # type: ignore[no-any-return]

    async def create_alert_rule(self, spec: Json) -> Json:
        """A new alert rule."""
        return await self._call("POST", "/v1/notifications/rules", json=spec)  # type: ignore[no-any-return]

    async def enqueue(self, task: Enqueueable[P], *args: P.args, **kwargs: P.kwargs) -> Json:
        """Submit a task declared with `agents.sdk.task`, checked against its signature."""
        return await self.submit(task.spec(*args, **kwargs))

    # -- the live feed

    def _ws_headers(self) -> dict[str, str] | None:
        return {"authorization": f"Bearer {self._token}"} if self._token else None

    def _ws_url(self, params: dict[str, Any]) -> str:
        base = self.server.replace("http://", "ws://", 1).replace("https://", "wss://", 1)
        query = "&".join(f"{k}={v}" for k, v in params.items() if v not in (None, ""))
        return f"{base}/v1/events" + (f"?{query}" if query else "")

    async def events(
        self,
        since: int | None = None,
        *,
        queues: Sequence[str] = (),
        job_ids: Sequence[int] = (),
        types: Sequence[str] = (),
        until_caught_up: bool = False,
        stop_when: Any = None,
        reconnect: bool = True,
        control: bool = False,
    ) -> AsyncIterator[Json]:
        """Yield events as they commit, resuming after `since`. On a dropped connection it
        reconnects with backoff and resumes from the last sequence number seen: no gap."""
        last = since
        delay = 0.2
        connected = False
        while True:
            params = {
                "since": last,
                "queues": ",".join(queues),
                "job_ids": ",".join(map(str, job_ids)),
                "types": ",".join(types),
                "frames": "lines",  # up to 1,000 events a message, one per line (one each from an older core)
            }
            try:
                async with websockets.connect(
                    self._ws_url(params),
                    max_size=2**24,
                    open_timeout=10,
                    additional_headers=self._ws_headers(),
                    **self._ws_options(),
                ) as ws:
                    delay = 0.2
                    connected = True
                    async for frame in ws:
                        text = frame.decode() if isinstance(frame, bytes) else frame
                        for raw in text.split("\n"):
                            event = orjson.loads(raw)
                            if event.get("seq") is not None:
                                last = event["seq"]
                            elif event.get("type") == "stream.caught_up":
                                last = event.get("last_seq", last)
                                if until_caught_up:
                                    return
                                if not control:
                                    continue
                            elif event.get("type") == "stream.error":  # refused: bad filter, or not allowed
                                raise error_from_dict(int(event.get("status") or 400), event)
                            elif str(event.get("type", "")).startswith("stream.") and not control:
                                continue
                            yield event
                            if stop_when is not None and stop_when(event):
                                return
            except (OSError, websockets.WebSocketException) as exc:
                if not connected:  # never reached: a wrong URL, not a blip
                    raise self._unreachable(exc, "JobDeck's event feed") from None
                if not reconnect:
                    raise Unavailable(f"lost the event feed of {self.server}: {exc}") from None
            if last is None:
                with contextlib.suppress(JobDeckError):
                    last = (await self.health())["last_seq"]
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
