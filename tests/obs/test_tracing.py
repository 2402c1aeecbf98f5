"""One trace per job across a node and an agent on its WebSocket (the remote agents' protocol), with
the SDK's in-memory exporter: the caller's traceparent is the root, the submit its child, and the
wait (with the claim), run and result hang under the submit; the shell task gets the run's TRACEPARENT; the
API shows the trace id and the link. With tracing off the caller's context is still kept."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agents.runtime import AgentConfig, AgentRuntime
from core.client import JobDeckClient
from core.node import Node
from core.obs.tracing import Tracing
from tests.conftest import ROOT, node_settings, until

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
JOB = {"name": "traced", "queue": "tq", "task": {"kind": "shell", "command": 'echo "tp=$TRACEPARENT"'}}


@dataclass
class Traced:
    url: str
    node: Node
    spans: InMemorySpanExporter


async def _serve(tmp_path: Path, tracing: Tracing, **settings: Any) -> AsyncIterator[tuple[str, Node]]:
    node = Node(node_settings(tmp_path, trace_url_template="https://traces.example/t/{trace_id}", **settings),
                tracing=tracing)  # fmt: skip
    await node.start()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(node.serve(on_ready=ready.set_result))
    url = await asyncio.wait_for(ready, 10)
    # an agent over the node's WebSocket, as `jobdeck agent` connects (in this process, so one exporter sees all)
    runtime = AgentRuntime(AgentConfig(name="remote-1", slots=2, heartbeat_seconds=1.0, tracing=tracing))
    client = JobDeckClient(url)
    agent = asyncio.create_task(runtime.run_forever(client.agent_channel))
    try:
        await until(lambda: node.engine.hub.sessions, timeout=30, what="the agent to register")
        yield url, node
    finally:
        await runtime.shutdown(2)
        agent.cancel()
        await asyncio.gather(agent, return_exceptions=True)
        await client.close()
        assert node.server is not None
        node.server.should_exit = True
        await asyncio.wait_for(serving, 15)


@pytest.fixture
async def traced(tmp_path: Path) -> AsyncIterator[Traced]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async for url, node in _serve(tmp_path, Tracing(provider)):
        yield Traced(url, node, exporter)


async def _run(url: str, headers: dict[str, str]) -> tuple[dict[str, Any], str]:
    async with httpx.AsyncClient(base_url=url) as http:
        made = await http.post("/v1/jobs", json=JOB, headers=headers)
        assert made.status_code == 201, made.text
    async with JobDeckClient(url) as c:
        job = await c.wait_for(made.json()["id"], timeout=60)
        assert job["state"] == "succeeded", job
        return await c.get_job(job["id"]), (await c.attempts(job["id"]))[0]["output"]


async def test_one_trace_per_job_across_the_node_and_its_agent(traced: Traced) -> None:
    job, output = await _run(traced.url, {"traceparent": TRACEPARENT})
    assert job["trace_id"] == CALLER_TRACE
    assert job["trace_url"] == f"https://traces.example/t/{CALLER_TRACE}"

    def names() -> set[str]:
        return {s.name for s in traced.spans.get_finished_spans()}

    await until(lambda: {"jobdeck.submit", "jobdeck.wait", "jobdeck.run", "jobdeck.result"} <= names(),
                timeout=30, what="the job's four spans")  # fmt: skip
    spans = {s.name: s for s in traced.spans.get_finished_spans() if s.name.startswith("jobdeck.")}
    assert {f"{s.context.trace_id:032x}" for s in spans.values()} == {CALLER_TRACE}, "one trace, the caller's"
    submit = spans["jobdeck.submit"]
    assert f"{submit.parent.span_id:016x}" == CALLER_SPAN, "the submit is the caller's child"
    for step in ("jobdeck.wait", "jobdeck.run", "jobdeck.result"):
        s = spans[step]
        assert s.parent is not None and s.parent.span_id == submit.context.span_id, f"{step} hangs under the submit"
        assert s.attributes["jobdeck.job_id"] == job["id"], s.attributes
    assert spans["jobdeck.run"].attributes["jobdeck.attempt"] == 1
    assert spans["jobdeck.result"].attributes["jobdeck.outcome"] == "succeeded"
    wait, run, result = (spans[n] for n in ("jobdeck.wait", "jobdeck.run", "jobdeck.result"))
    assert wait.attributes["jobdeck.agent"] == "remote-1"
    assert [e.name for e in wait.events] == ["jobdeck.claim"] and wait.start_time <= wait.events[0].timestamp
    assert wait.end_time <= run.start_time + 10**9 and run.end_time <= result.end_time, "in order"
    run_ctx = run.context
    assert f"tp=00-{CALLER_TRACE}-{run_ctx.span_id:016x}-01" in output, f"the task got the run's context: {output!r}"


async def test_a_failed_run_s_span_carries_its_error_and_the_result_its_outcome(traced: Traced) -> None:
    """JobDeck's record of a run that failed says why (`jobdeck.error`); the result span says how it ended."""
    spec = {"queue": "tq", "max_attempts": 1, "task": {"kind": "shell", "command": "echo disk-full >&2; exit 3"}}
    async with JobDeckClient(traced.url) as c:
        job = await c.wait_for((await c.submit(spec))["id"], timeout=60)
    assert job["state"] == "dead", job
    await until(lambda: any(s.name == "jobdeck.result" for s in traced.spans.get_finished_spans()), timeout=30,
                what="the result span")  # fmt: skip
    spans = {s.name: s for s in traced.spans.get_finished_spans()}
    run, result = spans["jobdeck.run"], spans["jobdeck.result"]
    assert "exit code 3" in str(run.attributes.get("jobdeck.error")) and "disk-full" in str(
        run.attributes.get("jobdeck.error")), run.attributes  # fmt: skip
    assert (run.attributes["jobdeck.job_id"], run.attributes["jobdeck.attempt"]) == (job["id"], 1), run.attributes
    assert (result.attributes["jobdeck.outcome"], result.attributes["jobdeck.state"]) == ("failed", "dead")


async def test_without_a_caller_context_the_submit_starts_the_trace(traced: Traced) -> None:
    job, _ = await _run(traced.url, {})
    assert job["trace_id"] is not None and len(job["trace_id"]) == 32
    await until(lambda: any(s.name == "jobdeck.result" for s in traced.spans.get_finished_spans()), timeout=30,
                what="the result span")  # fmt: skip
    submit = next(s for s in traced.spans.get_finished_spans() if s.name == "jobdeck.submit")
    assert submit.parent is None and f"{submit.context.trace_id:032x}" == job["trace_id"]


async def test_with_tracing_off_the_callers_context_is_kept_and_passed_on(tmp_path: Path) -> None:
    async for url, _ in _serve(tmp_path, Tracing()):
        job, output = await _run(url, {"traceparent": TRACEPARENT})
        assert job["trace_id"] == CALLER_TRACE
        assert f"tp={TRACEPARENT}" in output, output
        job, output = await _run(url, {"traceparent": "00-zz-not-valid"})
        assert job["trace_id"] is None and "tp=\n" in output + "\n", (job, output)


async def test_a_sync_python_task_runs_in_the_run_span_s_context(traced: Traced) -> None:
    """A sync task runs in a worker process of the agent: it gets the run's context as its current
    OpenTelemetry context (so its own spans join the job's trace) and as TRACEPARENT."""
    spec = {"queue": "tq", "task": {"kind": "python", "function": "tests.agents.tasks_for_tests:trace_context"}}
    async with httpx.AsyncClient(base_url=traced.url) as http:
        made = await http.post("/v1/jobs", json=spec, headers={"traceparent": TRACEPARENT})
        assert made.status_code == 201, made.text
    async with JobDeckClient(traced.url) as c:
        job = await c.wait_for(made.json()["id"], timeout=60)
    assert job["state"] == "succeeded", job
    await until(lambda: any(s.name == "jobdeck.run" for s in traced.spans.get_finished_spans()), timeout=30,
                what="the run span")  # fmt: skip
    run = next(s for s in traced.spans.get_finished_spans() if s.name == "jobdeck.run")
    seen = job["result"]
    assert (seen["trace_id"], seen["span_id"]) == (CALLER_TRACE, f"{run.context.span_id:016x}"), seen
    assert seen["env"] == f"00-{CALLER_TRACE}-{run.context.span_id:016x}-01", seen


async def test_an_async_python_task_runs_with_the_run_span_as_its_current_span(traced: Traced) -> None:
    """An async task runs in the agent's process: the run's span context is its current span, and a
    span the task starts itself is the run's child."""
    spec = {"queue": "tq", "task": {"kind": "python", "function": "tests.agents.tasks_for_tests:trace_context_async"}}
    async with httpx.AsyncClient(base_url=traced.url) as http:
        made = await http.post("/v1/jobs", json=spec, headers={"traceparent": TRACEPARENT})
        assert made.status_code == 201, made.text
    async with JobDeckClient(traced.url) as c:
        job = await c.wait_for(made.json()["id"], timeout=60)
    assert job["state"] == "succeeded", job
    await until(lambda: any(s.name == "jobdeck.run" for s in traced.spans.get_finished_spans()), timeout=30,
                what="the run span")  # fmt: skip
    run = next(s for s in traced.spans.get_finished_spans() if s.name == "jobdeck.run")
    seen, run_span = job["result"], f"{run.context.span_id:016x}"
    assert (seen["trace_id"], seen["span_id"], seen["child_parent"]) == (CALLER_TRACE, run_span, run_span), seen


async def test_a_local_agent_s_run_is_in_the_job_s_trace(tmp_path: Path) -> None:
    """The agent inside the node (`jobdeck up`'s) records the run under the job's submit too."""
    from core.cli.nodes import attach_local_agent

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    node = Node(node_settings(tmp_path), tracing=Tracing(provider))
    await node.start()
    attach_local_agent(node, name="local-test")
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(node.serve(on_ready=ready.set_result))
    try:
        url = await asyncio.wait_for(ready, 10)
        job, output = await _run(url, {"traceparent": TRACEPARENT})
        await until(lambda: {"jobdeck.wait", "jobdeck.run", "jobdeck.result"} <= {s.name for s in exporter.get_finished_spans()},
                    timeout=30, what="the local run's spans")  # fmt: skip
        spans = {s.name: s for s in exporter.get_finished_spans()}
        submit, run = spans["jobdeck.submit"], spans["jobdeck.run"]
        assert run.parent is not None and run.parent.span_id == submit.context.span_id, "the run hangs under the submit"
        assert f"{run.context.trace_id:032x}" == CALLER_TRACE and run.attributes["jobdeck.job_id"] == job["id"]
        assert spans["jobdeck.wait"].attributes["jobdeck.agent"] == "local-test"
        assert f"tp=00-{CALLER_TRACE}-{run.context.span_id:016x}-01" in output, output
    finally:
        assert node.server is not None
        node.server.should_exit = True
        await asyncio.wait_for(serving, 15)


def test_with_tracing_off_no_sdk_is_loaded() -> None:
    """Off (the default) costs nothing: a node's tracing hooks return at once, no export thread runs and
    the tracing SDK is never imported (redis-py imports the metrics SDK for its own instruments)."""
    code = ("import sys, threading; from core.obs.tracing import tracing_for; t = tracing_for('off'); "
            "from core.node import Node; assert not t.enabled; "
            "assert not [x for x in threading.enumerate() if x.name == 'jobdeck-span-export']; "
            "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk.trace', 'opentelemetry.exporter'))))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", (out.stdout, out.stderr)


async def test_a_schedule_s_jobs_each_firing_gets_a_trace_of_its_own(traced: Traced) -> None:
    async with JobDeckClient(traced.url) as c:
        s = await c.create_schedule({"name": "traced-every-second", "interval": 1,
                                     "job": {"queue": "tq", "task": {"kind": "shell", "command": "true"}}})  # fmt: skip

        got: list[dict[str, Any]] = []
        deadline = asyncio.get_running_loop().time() + 30
        while len(got) < 2:
            assert asyncio.get_running_loop().time() < deadline, f"two firings within 30 s: {got}"
            await asyncio.sleep(0.2)
            got = [j for j in (await c.list_jobs(queue="tq"))["jobs"] if j.get("schedule_id") == s["id"]]
    traces = {j["trace_id"] for j in got}
    assert None not in traces and len(traces) == len(got), f"one trace per firing: {[j['trace_id'] for j in got]}"
    fires = {f"{x.context.trace_id:032x}": x for x in traced.spans.get_finished_spans()
             if x.name == "jobdeck.schedule.fire"}  # fmt: skip
    for j in got:
        assert fires[j["trace_id"]].attributes["jobdeck.schedule_id"] == s["id"], fires[j["trace_id"]].attributes


def test_the_traces_a_node_starts_are_sampled_and_a_sampled_caller_is_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    """At ratio 0 a submit without a caller's context has no trace (no id, no spans for its jobs);
    a caller's sampled context is followed whatever the ratio; OTEL_TRACES_SAMPLER decides when set."""
    from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio

    from core.model import Policy, build_job
    from core.obs import logs
    from core.obs.tracing import tracing_for

    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBasedTraceIdRatio(0.0))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider)
    with tracing.submit(1) as tp:
        assert tp is None, "a dropped trace is no trace"
    token = logs.traceparent.set(TRACEPARENT)
    try:
        with tracing.submit(1) as tp:
            assert tp is not None and logs.trace_id_of(tp) == CALLER_TRACE
    finally:
        logs.traceparent.reset(token)
    job = build_job({"task": {"kind": "shell", "command": "true"}}, 0.0, Policy())
    job.traceparent = tp
    unsampled = build_job({"task": {"kind": "shell", "command": "true"}}, 0.0, Policy())
    unsampled.traceparent = f"00-{CALLER_TRACE}-{CALLER_SPAN}-00"
    tracing.claimed([job, unsampled], 1.0, "a1")
    tracing.result(unsampled, "succeeded", 1, 1.0)
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["jobdeck.submit", "jobdeck.wait"], f"only the sampled caller's job is traced: {names}"
    assert isinstance(tracing_for("console", sample_ratio=0.25).provider.sampler, ParentBasedTraceIdRatio)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_on")
    assert not isinstance(tracing_for("console").provider.sampler, ParentBasedTraceIdRatio), "the operator's choice"


def test_a_sample_ratio_out_of_range_is_refused_naming_the_setting(tmp_path: Path) -> None:
    from core.config import load_settings
    from core.errors import InvalidInput

    assert load_settings(environ={"JOBDECK_TRACE_SAMPLE_RATIO": "1"}, data_dir=tmp_path).trace_sample_ratio == 1.0
    with pytest.raises(InvalidInput) as refused:
        load_settings(environ={"JOBDECK_TRACE_SAMPLE_RATIO": "1.5"}, data_dir=tmp_path)
    assert refused.value.field == "trace_sample_ratio" and "between 0 and 1" in refused.value.message
