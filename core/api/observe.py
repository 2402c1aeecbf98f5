"""What each HTTP request leaves behind: its request id (in every log line and the response), its
trace id (from a W3C `traceparent`), its duration in the node's metrics; and the two Prometheus
routes, /metrics (this node's series) and /metrics/cluster (the store's, the same on every node).
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.api.access import principal_of
from core.api.app import JSON
from core.api.deps import Route, get_engine
from core.api.responses import Slo
from core.engine import Engine
from core.errors import NotFound
from core.obs import logs
from core.obs.metrics import CONTENT_TYPE, NodeMetrics, cluster_text
from core.obs.slo import SUCCESS_TARGET, WINDOWS, slo_view
from core.relay import relay_lag

log = logging.getLogger("jobdeck.http")
router = APIRouter(tags=["system"], route_class=Route)
EngineDep = Annotated[Engine, Depends(get_engine)]
REQUEST_ID_MAX = 128
# A new request id: this process's random prefix and a counter (unique, not a secret; uuid4 cost ~7 % of a
# single submit's server time in a py-spy profile, its 16 bytes of os.urandom a request).
_ID_PREFIX = os.urandom(8).hex()
_ID_COUNTER = itertools.count(1)


def _request_id(raw: bytes | None) -> str:
    """The caller's X-Request-ID if it is printable ASCII and short, else a new one."""
    if raw and len(raw) <= REQUEST_ID_MAX:
        text = raw.decode("latin-1")
        if text.isascii() and text.isprintable() and text.strip():
            return text.strip()
    return f"{_ID_PREFIX}{next(_ID_COUNTER):016x}"


class RequestContext:
    """ASGI middleware: request id and trace id in the log context, X-Request-ID on the answer,
    the request's duration by route template (not by raw path: one series per route)."""

    def __init__(self, app: ASGIApp, metrics: NodeMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        rid = _request_id(headers.get(b"x-request-id"))
        tp = headers.get(b"traceparent")
        tp_text = tp.decode("latin-1").strip() if tp else None
        tid = logs.trace_id_of(tp_text)
        rtoken = logs.request_id.set(rid)
        ttoken = logs.trace_id.set(tid)
        ptoken = logs.traceparent.set(tp_text if tid is not None else None)
        status = 500
        echoed = rid.encode()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message["headers"] = [*message.get("headers", ()), (b"x-request-id", echoed)]
            await send(message)

        began = time.perf_counter()
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            seconds = time.perf_counter() - began
            route = scope.get("route")
            template = getattr(route, "path_format", None) or "unmatched"  # raw paths would be unbounded
            self.metrics.request(scope["method"], template, status, seconds)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s %s %d %.1f ms", scope["method"], scope["path"], status, seconds * 1000)
            logs.request_id.reset(rtoken)
            logs.trace_id.reset(ttoken)
            logs.traceparent.reset(ptoken)


class PrometheusText(Response):
    """The Prometheus text exposition format."""

    media_type = CONTENT_TYPE


_TEXT: dict[int | str, dict[str, Any]] = {
    200: {"content": {CONTENT_TYPE: {"schema": {"type": "string"}}}, "description": "Prometheus text format"},
    # the error body is JSON like every error (the route's text/plain is for its 200 only)
    404: {
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
        "description": "metrics are off on this node (JOBDECK_METRICS=false)",
    },
}


def _visible(request: Request) -> Any:
    p = principal_of(request)
    return None if p.sees_everything else p.sees


def _metrics_of(engine: Engine) -> NodeMetrics:
    if not engine.metrics.enabled:
        raise NotFound("metrics are off on this node: start it with JOBDECK_METRICS=true", field=None)
    return engine.metrics


@router.get("/metrics", summary="This node's Prometheus metrics (counters, histograms, its agents)",
            response_class=PrometheusText, responses=_TEXT)  # fmt: skip
async def node_metrics(request: Request, engine: EngineDep) -> Response:
    """Series of queues the caller may not see are left out (a team's viewer sees its queues')."""
    return PrometheusText(_metrics_of(engine).text(_visible(request)))


@router.get("/metrics/cluster", summary="Store-wide Prometheus gauges: jobs by queue and state, depth, relay lag",
            response_class=PrometheusText, responses=_TEXT)  # fmt: skip
async def cluster_metrics(request: Request, engine: EngineDep) -> Response:
    """The same numbers on every node (read from the shared store): scrape one node, or the load
    balancer, or aggregate with `max without (instance)`."""
    _metrics_of(engine)
    now = engine.clock()
    stats = await engine.store.stats(now)
    relays = await relay_lag(engine.store, now)
    schedules = len(await engine.store.list_schedules())
    return PrometheusText(cluster_text(stats, relays, schedules, _visible(request)))


@router.get("/v1/stats/slo", summary="Pick-up SLA (p50 100 ms, p95 500 ms, p99 2 s) and success ratio, last hour and day",
            response_model=Slo)  # fmt: skip
async def slo(engine: EngineDep) -> JSON:
    """From the jobs that finished in each window (every queue: figures, no queue names)."""
    now = engine.clock()
    windows = [slo_view(name, await engine.store.slo_counts(now - span)) for name, span in WINDOWS.items()]  # type: ignore[attr-defined]
    return JSON({"success_target": SUCCESS_TARGET, "windows": windows})
