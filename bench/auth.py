"""What sign-in costs: the same requests to a node without sign-in and to one with static tokens.

With `auth = "token"` every request is authenticated (a SHA-256 of the token and a dict
lookup) and role-checked, reads of one job look up its queue, and every submit also writes
its audit row in the same transaction. Rate limits are off here (they would refuse the load).
"""

from __future__ import annotations

import orjson

from bench.context import RunContext
from bench.rawhttp import build_request, request_rate
from bench.report import Figure, percentile
from bench.server import jobdeck_server
from bench.workload import noop_job
from core.auth.tokens import new_token, token_hash

QUEUE = "bench"


async def auth_overhead(ctx: RunContext) -> list[Figure]:
    """POST /v1/jobs and GET /v1/jobs/1, one client, without sign-in and with a static operator token."""
    token = new_token()
    tokens = [{"name": "bench", "sha256": token_hash(token), "role": "operator", "teams": ["bench"]}]
    signed_in = {"JOBDECK_AUTH": "token", "JOBDECK_TOKENS": orjson.dumps(tokens).decode(),
                 "JOBDECK_TEAM_QUEUES": orjson.dumps({"bench": [QUEUE]}).decode(),
                 "JOBDECK_RATE_LIMIT_PER_SECOND": "0"}  # fmt: skip
    body = orjson.dumps(noop_job(QUEUE))
    rates: dict[tuple[str, str], float] = {}
    figures = []
    for mode, extra, tok in (("no sign-in", {}, None), ("token", signed_in, token)):
        async with ctx.backend.fresh(f"auth-{mode}") as env, jobdeck_server(
            f"auth-{mode.replace(' ', '-')}", 0, ctx.servers, env={**env, **extra}
        ) as srv:  # fmt: skip
            submit = build_request("POST", "/v1/jobs", body, tok)
            await request_rate(srv.url, submit, 1, 0.5)  # warm-up; also makes job 1
            for label, request in (("POST /v1/jobs", submit), ("GET /v1/jobs/1", build_request("GET", "/v1/jobs/1",
                                                                                              None, tok))):  # fmt: skip
                rate = await request_rate(srv.url, request, 1, ctx.scale.single_seconds)
                lat = sorted(rate.latencies)
                rates[(mode, label)] = rate.per_second
                note = f"{rate.count:,} in {rate.seconds:.1f} s; p50 {percentile(lat, 50) * 1000:.2f} ms, " + (
                    f"p99 {percentile(lat, 99) * 1000:.2f} ms"
                )
                figures.append(Figure("sign-in cost", f"{label}, {mode}", rate.per_second, "req/s", None, note))
    for label in ("POST /v1/jobs", "GET /v1/jobs/1"):
        ratio = rates[("token", label)] / rates[("no sign-in", label)]
        note = "1.00 = free" + ("; each submit also writes its audit row" if label.startswith("POST") else "")
        figures.append(Figure("sign-in cost", f"{label}: token / no sign-in", ratio, "ratio", None, note))
    return figures
