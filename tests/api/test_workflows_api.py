"""Workflows and depends_on through the API of a real node with its local agent: jobs run in
dependency order, bad graphs are 422s naming the job and field, and nothing is half-written."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import datetime
from typing import Any

import pytest

from core.errors import Conflict, InvalidInput
from tests.conftest import RunningNode


def sh(ref: str, command: str = "true", *deps: str, **extra: Any) -> dict[str, Any]:
    return {"ref": ref, "task": {"kind": "shell", "command": command}, "depends_on": list(deps), **extra}


async def wait_workflow(running: RunningNode, wf_id: int, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        wf = await running.client.get_workflow(wf_id)
        if wf["state"] != "running":
            return wf  # type: ignore[no-any-return]
        await asyncio.sleep(0.05)
    raise AssertionError(f"workflow {wf_id} still running after {timeout} s: {wf}")


async def test_a_diamond_runs_in_dependency_order_and_succeeds(running: RunningNode, tmp_path: Any) -> None:
    log = tmp_path / "order.log"
    step = lambda ref, *deps: sh(ref, f"sleep 0.05; echo {ref} >> {log}", *deps)  # noqa: E731
    out = await running.client.submit_workflow(
        "diamond", [step("a"), step("b", "a"), step("c", "a"), {**step("d", "b", "c"), "name": "merge"}]
    )
    assert set(out["ids"]) == {"a", "b", "c", "d"} and out["workflow"]["counts"] == {"queued": 1, "blocked": 3}
    wf = await wait_workflow(running, out["workflow"]["id"])
    assert wf["state"] == "succeeded" and wf["counts"] == {"succeeded": 4}, wf
    order = log.read_text().split()
    assert order[0] == "a" and order[-1] == "d" and sorted(order[1:3]) == ["b", "c"], order
    d = await running.client.get_job(out["ids"]["d"])
    assert sorted(d["parents"]) == sorted([out["ids"]["b"], out["ids"]["c"]]) and d["children"] == []
    assert d["workflow_id"] == wf["id"] and d["ref"] == "d" and d["name"] == "merge"
    b = await running.client.get_job(out["ids"]["b"])
    assert b["name"] == "b", "a workflow job without a name is listed by its ref, not by its command"
    nodes = {n["ref"]: n for n in wf["nodes"]}
    assert nodes["d"]["parents"] == sorted([out["ids"]["b"], out["ids"]["c"]])
    listed = await running.client.workflows(state="succeeded")
    assert [w["id"] for w in listed["workflows"]] == [wf["id"]]


async def test_a_failed_step_cancels_downstream_naming_it_and_the_workflow_fails(running: RunningNode) -> None:
    out = await running.client.submit_workflow("etl", [
        sh("extract", "exit 3", max_attempts=1), sh("load", "true", "extract"), sh("report", "true", "load"),
        sh("cleanup", "true", "extract", on_parent_failure="run"), sh("notify", "true", "extract", on_parent_failure="skip"),
    ])  # fmt: skip
    wf = await wait_workflow(running, out["workflow"]["id"])
    states = {n["ref"]: n["state"] for n in wf["nodes"]}
    assert states == {"extract": "dead", "load": "cancelled", "report": "cancelled", "cleanup": "succeeded",
                      "notify": "skipped"}, states  # fmt: skip
    assert wf["state"] == "failed"
    load = await running.client.get_job(out["ids"]["load"])
    assert load["last_error"] == f"parent job {out['ids']['extract']} ended dead or cancelled"


async def test_depends_on_existing_job_ids_waits_for_them(running: RunningNode, tmp_path: Any) -> None:
    gate = tmp_path / "gate"
    first = await running.client.submit(
        {"task": {"kind": "shell", "command": f"while [ ! -e {gate} ]; do sleep 0.02; done"}}
    )
    second = await running.client.submit({"task": {"kind": "shell", "command": "true"}, "depends_on": [first["id"]]})
    assert second["state"] == "blocked"
    await asyncio.sleep(0.3)
    assert (await running.client.get_job(second["id"]))["state"] == "blocked", "must not start before its parent ends"
    gate.touch()
    done = await running.client.wait_for(second["id"], timeout=30)
    assert done["state"] == "succeeded" and done["parents"] == [first["id"]]


@pytest.mark.parametrize(
    ("jobs", "field", "words"),
    [
        ([sh("a", "true", "c"), sh("b", "true", "a"), sh("c", "true", "b")], "jobs[0].depends_on", "a -> b -> c -> a"),
        ([sh("a"), sh("b", "true", "nope")], "jobs[1].depends_on[0]", "no job with ref 'nope'"),
        ([sh("a", "true", "a")], "jobs[0].depends_on[0]", "depends on itself"),
        ([sh("a"), sh("a")], "jobs[1].ref", "is the ref of jobs[0] already"),
    ],
)
async def test_bad_graphs_are_422s_naming_the_job_and_nothing_is_written(
    running: RunningNode, jobs: list[dict[str, Any]], field: str, words: str
) -> None:
    before = (await running.client.list_jobs(count=True))["total"]
    with pytest.raises(InvalidInput) as err:
        await running.client.submit_workflow("bad", jobs)
    assert err.value.field == field and words in err.value.message, (err.value.field, err.value.message)
    assert (await running.client.list_jobs(count=True))["total"] == before
    assert (await running.client.workflows())["workflows"] == []


async def test_depends_on_bad_ids_are_422s_and_a_finished_workflow_cannot_be_paused(running: RunningNode) -> None:
    with pytest.raises(InvalidInput) as err:
        await running.client.submit({"task": {"kind": "shell", "command": "true"}, "depends_on": [999999]})
    assert err.value.field == "depends_on[0]" and "no job with id 999999" in err.value.message
    dead = await running.client.submit({"task": {"kind": "shell", "command": "exit 1"}, "max_attempts": 1})
    await running.client.wait_for(dead["id"], timeout=30)
    with pytest.raises(InvalidInput) as err:
        await running.client.submit_batch([{"task": {"kind": "shell", "command": "true"}},
                                           {"task": {"kind": "shell", "command": "true"}, "depends_on": [dead["id"]]}])  # fmt: skip
    assert err.value.field == "jobs[1].depends_on[0]" and "ended dead" in err.value.message
    out = await running.client.submit_workflow("quick", [sh("a")])
    await wait_workflow(running, out["workflow"]["id"])
    with pytest.raises(Conflict) as refused:
        await running.client.workflow_action(out["workflow"]["id"], "pause")
    assert "it is succeeded" in refused.value.message


async def test_cancel_a_running_workflow_stops_it_and_it_ends_cancelled(running: RunningNode) -> None:
    out = await running.client.submit_workflow("long", [sh("a", "sleep 30"), sh("b", "true", "a")])
    a = out["ids"]["a"]
    deadline = time.monotonic() + 30
    while (await running.client.get_job(a))["state"] != "running":
        assert time.monotonic() < deadline, "job a never started"
        await asyncio.sleep(0.05)
    got = await running.client.workflow_action(out["workflow"]["id"], "cancel")
    assert got["cancel_requested"] is True
    wf = await wait_workflow(running, out["workflow"]["id"])
    assert wf["state"] == "cancelled" and wf["counts"] == {"cancelled": 2}, wf


def py(ref: str, function: str, *deps: str, args: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    task = {"kind": "python", "function": function, "args": args or [], **extra.pop("task_extra", {})}
    return {"ref": ref, "task": task, "depends_on": list(deps), **extra}


async def test_results_flow_down_to_python_and_shell_children(running: RunningNode, tmp_path: Any) -> None:
    seen = tmp_path / "seen.json"
    out = await running.client.submit_workflow("results", [
        py("two", "tests.agents.tasks_for_tests:add", args=[1, 1]),
        py("three", "tests.agents.tasks_for_tests:add", args=[1, 2]),
        py("sum", "agents.builtin:echo", "two", "three", task_extra={"parent_results": True}),
        {"ref": "shell", "depends_on": ["two"],
         "task": {"kind": "shell", "parent_results": True,
                  "command": f'cat "$JOBDECK_PARENT_RESULTS_FILE" > {seen}; echo "env=$JOBDECK_PARENT_RESULTS"'}},
        py("plain", "agents.builtin:echo", "two"),
    ])  # fmt: skip
    wf = await wait_workflow(running, out["workflow"]["id"])
    assert wf["state"] == "succeeded", wf
    got = await running.client.get_job(out["ids"]["sum"])
    assert got["result"] == {"args": [], "kwargs": {"parent_results": {"two": 2, "three": 3}}}, got["result"]
    plain = await running.client.get_job(out["ids"]["plain"])
    assert plain["result"] == {"args": [], "kwargs": {}}, "a task that did not ask gets nothing"
    assert seen.read_text() == '{"two":2}'
    attempts = await running.client.attempts(out["ids"]["shell"])
    assert 'env={"two":2}' in attempts[-1]["output"], attempts[-1]["output"]


async def test_parents_results_over_the_limit_fail_the_child_saying_why(running: RunningNode) -> None:
    # each result is kept up to 256 KiB (agents/runtime.py): five of 250,000 bytes are over 1 MiB together
    bigs = [py(f"big{i}", "tests.agents.tasks_for_tests:big_result", args=[250_000, 0]) for i in range(5)]
    child = py("child", "agents.builtin:echo", *(b["ref"] for b in bigs), task_extra={"parent_results": True})
    out = await running.client.submit_workflow("too-big", [*bigs, child])
    wf = await wait_workflow(running, out["workflow"]["id"])
    got = await running.client.get_job(out["ids"]["child"])
    assert got["state"] == "dead" and got["attempt"] == 1, got
    assert "over the limit of 1,048,576" in got["last_error"] and wf["state"] == "failed", got["last_error"]


async def test_a_workflow_job_whose_unique_key_is_held_is_a_409_naming_it_and_nothing_is_written(
    running: RunningNode,
) -> None:
    holder = await running.client.submit({"task": {"kind": "shell", "command": "true"}, "delay": 3600,
                                          "unique": {"key": "nightly-extract"}})  # fmt: skip
    before = len((await running.client.workflows())["workflows"])
    with pytest.raises(Conflict) as err:
        await running.client.submit_workflow(
            "nightly", [sh("a"), sh("b", "true", "a", unique={"key": "nightly-extract"})]
        )
    assert err.value.field == "jobs[1].unique" and f"held by job {holder['id']}" in err.value.message, err.value
    assert len((await running.client.workflows())["workflows"]) == before, "a refused workflow writes nothing"


async def test_a_schedule_fires_a_workflow_each_time_and_skips_while_one_runs(
    running: RunningNode, tmp_path: Any
) -> None:
    """A nightly DAG, every second: each fire time submits the whole workflow; while one runs (its
    jobs take 1.5 s) the next fire times are skipped, so two runs never overlap."""
    log = tmp_path / "runs.log"
    step = lambda ref, *deps: sh(ref, f"echo start {ref} $(date +%s.%N) >> {log}; sleep 0.5", *deps)  # noqa: E731
    body = {"name": "nightly", "interval": 1, "workflow": {"name": "etl", "jobs": [
        step("extract"), step("transform", "extract"), step("load", "transform")]}}  # fmt: skip
    s = await running.client.create_schedule(body)
    assert s["job"] is None and s["workflow"]["name"] == "etl" and s["overlap"] == "skip", s
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done = [w for w in (await running.client.workflows())["workflows"] if w["state"] == "succeeded"]
        if len(done) >= 2:
            break
        await asyncio.sleep(0.2)
    await running.client._call("POST", f"/v1/schedules/{s['id']}/pause")
    flows = (await running.client.workflows())["workflows"]
    assert len(done) >= 2, f"expected 2 runs done within 30 s, got {flows}"
    assert all(w["name"] == "etl" and w["total"] == 4 for w in flows), flows  # 3 jobs + the run's end job
    ends = sorted((w["created_at"], w["finished_at"]) for w in done)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(ends)), f"runs overlapped: {ends}"
    stored = await running.client.get_schedule(s["id"])
    assert stored["skipped"] >= 1, f"fire times while a run was going should be skipped: {stored}"


async def test_a_workflow_schedule_takes_every_policy_and_refuses_a_cycle(running: RunningNode) -> None:
    flow = {"name": "etl", "jobs": [sh("a"), sh("b", "true", "a")]}
    for extra in ({"overlap": "buffer_one"}, {"overlap": "cancel_previous"}, {"pause_after_failures": 2}):
        made = await running.client.create_schedule({"name": "n", "cron": "0 2 * * *", "workflow": flow, **extra})
        assert all(made[k] == v for k, v in extra.items()), (extra, made)
    with pytest.raises(InvalidInput):  # a job and a workflow
        await running.client.create_schedule({"name": "n", "cron": "0 2 * * *", "workflow": flow,
                                              "job": {"task": {"kind": "shell", "command": "true"}}})  # fmt: skip
    cyc = {"name": "c", "jobs": [sh("a", "true", "b"), sh("b", "true", "a")]}
    with pytest.raises(InvalidInput) as err:
        await running.client.create_schedule({"name": "n", "cron": "0 2 * * *", "workflow": cyc})
    assert "a -> b -> a" in err.value.message or "b -> a -> b" in err.value.message, err.value
    slow = {"name": "etl", "jobs": [sh("a", "sleep 30"), sh("b", "true", "a")]}  # the first run outlasts the test
    s = await running.client.create_schedule({"name": "n", "cron": "0 2 * * *", "workflow": slow, "paused": True})
    assert (await running.client.update_schedule(s["id"], {"overlap": "buffer_all"}))["overlap"] == "buffer_all"
    # buffer_all: the first day's workflow runs; the second waits as a whole (its end job alone)
    made = await running.client.backfill(s["id"], "2026-01-01T00:00:00Z", "2026-01-03T00:00:00Z")
    assert made["made"] == 2, made
    ends = [j for j in (await running.client.list_jobs(name_prefix="n: end of run"))["jobs"]]
    assert sorted(j["workflow_id"] is None for j in ends) == [False, True], ends
    ran = await running.client._call("POST", f"/v1/schedules/{s['id']}/run")
    assert ran["ref"] == ":run" and ran["workflow_id"] is not None, ran
    for w in (await running.client.workflows())["workflows"]:
        await running.client._call("POST", f"/v1/workflows/{w['id']}/cancel")


async def test_a_workflow_over_the_size_bound_is_a_422_naming_jobs_and_nothing_is_written(running: RunningNode) -> None:
    jobs = [sh(f"j{i}") for i in range(10_001)]
    with pytest.raises(InvalidInput) as err:
        await running.client.submit_workflow("too-big", jobs)
    assert err.value.field == "jobs" and "10000" in err.value.message.replace(",", ""), err.value.to_dict()
    assert (await running.client.workflows())["workflows"] == [] and (await running.client.list_jobs())["jobs"] == []


async def test_buffer_one_on_a_real_node_runs_workflows_back_to_back(running: RunningNode, tmp_path: Any) -> None:
    """Every second, runs of 1.2 s under buffer_one: the next workflow waits whole and starts as the
    one before it ends (its first job within a second of that end), never beside it."""
    log = tmp_path / "runs.log"
    step = lambda ref, *deps: sh(ref, f"echo {ref} $(date +%s.%N) >> {log}; sleep 0.6", *deps)  # noqa: E731
    body = {"name": "back-to-back", "interval": 1, "overlap": "buffer_one",
            "workflow": {"name": "b2b", "jobs": [step("first"), step("second", "first")]}}  # fmt: skip
    s = await running.client.create_schedule(body)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        done = [w for w in (await running.client.workflows())["workflows"] if w["state"] == "succeeded"]
        if len(done) >= 3:
            break
        await asyncio.sleep(0.2)
    await running.client._call("POST", f"/v1/schedules/{s['id']}/pause")
    assert len(done) >= 3, f"expected 3 runs done within 40 s, got {(await running.client.workflows())['workflows']}"
    spans = sorted((w["created_at"], w["finished_at"]) for w in done)
    for (_, a_end), (b_start, _) in itertools.pairwise(spans):
        assert a_end <= b_start, f"runs overlapped: {spans}"
    starts = [float(line.split()[1]) for line in log.read_text().splitlines() if line.startswith("first")]
    ends = sorted(datetime.fromisoformat(e).timestamp() for _, e in spans)
    for end in ends[:-1]:
        nxt = min((t for t in starts if t >= end - 0.05), default=None)
        assert nxt is not None and nxt - end < 1.0, f"the buffered run did not start as {end} ended: {starts}"
    stored = await running.client.get_schedule(s["id"])
    assert stored["fired"] >= 3 and stored["failures"] == 0, stored


async def test_a_released_childs_pick_up_latency_counts_from_its_release_not_its_submit(running: RunningNode) -> None:
    """The SLO panel and /metrics measure pick-up from `run_at`; a child that waited 2 s for its parent
    was counted as 2 s late (the dashboard's SLO went red for every workflow)."""
    out = await running.client.submit_workflow("slow-parent", [sh("a", "sleep 2"), sh("b", "true", "a")])
    await wait_workflow(running, out["workflow"]["id"])
    a, b = [await running.client.get_job(out["ids"][r]) for r in ("a", "b")]
    released, started = datetime.fromisoformat(b["run_at"]), datetime.fromisoformat(b["started_at"])
    assert released >= datetime.fromisoformat(a["finished_at"]), (a, b)
    assert (started - released).total_seconds() < 1.5, f"b waited for a, not for a slot: {b}"
