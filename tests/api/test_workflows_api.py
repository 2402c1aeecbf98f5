"""Workflows and depends_on through the API of a real node with its local agent: jobs run in
dependency order, bad graphs are 422s naming the job and field, and nothing is half-written."""

from __future__ import annotations

import asyncio
import time
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
        "diamond", [step("a"), step("b", "a"), step("c", "a"), step("d", "b", "c")]
    )
    assert set(out["ids"]) == {"a", "b", "c", "d"} and out["workflow"]["counts"] == {"queued": 1, "blocked": 3}
    wf = await wait_workflow(running, out["workflow"]["id"])
    assert wf["state"] == "succeeded" and wf["counts"] == {"succeeded": 4}, wf
    order = log.read_text().split()
    assert order[0] == "a" and order[-1] == "d" and sorted(order[1:3]) == ["b", "c"], order
    d = await running.client.get_job(out["ids"]["d"])
    assert sorted(d["parents"]) == sorted([out["ids"]["b"], out["ids"]["c"]]) and d["children"] == []
    assert d["workflow_id"] == wf["id"] and d["ref"] == "d"
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
