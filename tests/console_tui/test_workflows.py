"""The console's Workflows view and a workflow's layered tree, against a real `jobdeck up`: live
states as jobs run, a node's job actions, the workflow's own pause / cancel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from console_tui.screens.dialogs import ConfirmScreen
from console_tui.screens.workflows import WorkflowScreen
from core.client import JobDeckClient
from tests.conftest import ServerProcess, until
from tests.console_tui.conftest import console, node  # noqa: F401 - the module's node fixture

pytestmark = pytest.mark.timeout(90)


def sh(ref: str, command: str, *deps: str, **extra: Any) -> dict[str, Any]:
    return {"ref": ref, "queue": "con-wf", "task": {"kind": "shell", "command": command}, "depends_on": list(deps),
            **extra}  # fmt: skip


async def test_the_tree_shows_layers_and_follows_the_jobs_live(
    node: ServerProcess,  # noqa: F811
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    async with JobDeckClient(node.url) as api:
        out = await api.submit_workflow("con-etl", [
            sh("extract", f"while [ ! -e {gate} ]; do sleep 0.05; done"), sh("clean", "true", "extract"),
            sh("load", "true", "clean"), sh("fail", "exit 1", "extract", max_attempts=1), sh("after", "true", "fail"),
        ])  # fmt: skip
    ids = out["ids"]
    async with console(node.url) as (app, pilot):
        await pilot.press("8")
        wf_view = app.main_screen.query_one("#workflows")
        key = str(out["workflow"]["id"])
        await until(lambda: key in wf_view.items, 15, "the workflow in the list")
        wf_view.table.move_cursor(row=wf_view.table.get_row_index(key))
        await pilot.press("enter")
        await until(lambda: isinstance(app.screen, WorkflowScreen) and app.screen.nodes, 15, "the workflow's tree")
        screen = app.screen
        order = [screen.nodes[k]["ref"] for k in screen.nodes]
        assert order.index("extract") < order.index("clean") < order.index("load"), order
        label = str(screen.query_one("#nodes").get_cell(str(ids["load"]), "tree"))
        assert label.strip().startswith("└─ load") and label.startswith("    "), f"load is two layers down: {label!r}"
        assert screen.nodes[str(ids["load"])]["state"] == "blocked"
        gate.touch()
        await until(lambda: screen.nodes[str(ids["load"])]["state"] == "succeeded", 30, "load turned succeeded live")
        await until(lambda: screen.nodes[str(ids["after"])]["state"] == "cancelled", 10, "after cancelled by fail")
        why = str(screen.query_one("#nodes").get_cell(str(ids["after"]), "why"))
        assert f"parent job {ids['fail']} ended dead" in why, f"a cancelled job says why: {why!r}"
        summary = str(screen.query_one("#wf-summary").render())
        assert "failed" in summary, summary
        # the job actions work on the selected node: retry the failed one, what it cancelled waits again
        table = screen.query_one("#nodes")
        table.move_cursor(row=table.get_row_index(str(ids["fail"])))
        await pilot.press("R")
        await until(lambda: screen.nodes[str(ids["after"])]["state"] in ("blocked", "cancelled"), 10, "re-armed")
        async with JobDeckClient(node.url) as api:
            job = await api.get_job(ids["fail"])
        assert job["attempt"] >= 2 or job["state"] in ("queued", "running"), job
        await pilot.press("escape")
        await until(lambda: app.screen is app.main_screen, 15, "back to the list")


async def test_pause_and_cancel_a_workflow_from_the_list(node: ServerProcess) -> None:  # noqa: F811
    async with JobDeckClient(node.url) as api:
        out = await api.submit_workflow("con-held", [sh("a", "true", delay=3600), sh("b", "true", "a")])
        key = str(out["workflow"]["id"])
        async with console(node.url) as (app, pilot):
            await pilot.press("8")
            view = app.main_screen.query_one("#workflows")
            await until(lambda: key in view.items, 15, "the workflow in the list")
            view.table.move_cursor(row=view.table.get_row_index(key))
            await pilot.press("p")
            await until(lambda: view.items[key]["paused"], 15, "the workflow paused")
            assert (await api.get_workflow(int(key)))["counts"] == {"paused": 2}
            await pilot.press("c")
            await until(lambda: isinstance(app.screen, ConfirmScreen), 15, "the confirmation")
            await pilot.press("enter")
            await until(lambda: view.items[key]["state"] == "cancelled", 15, "the workflow cancelled")


async def test_job_detail_names_its_workflow_parents_and_children(node: ServerProcess) -> None:  # noqa: F811
    from tests.console_tui.test_jobs import focus_job, jobs_view, plain

    async with JobDeckClient(node.url) as api:
        out = await api.submit_workflow("con-family", [
            sh("root", "sleep 30"), sh("left", "true", "root"), sh("right", "true", "root"),
            sh("join", "true", "left", "right"),
        ])  # fmt: skip
    ids, wf = out["ids"], out["workflow"]["id"]
    async with console(node.url) as (app, pilot):

        async def detail_of(ref: str) -> str:
            await focus_job(jobs_view(app), ids[ref])
            await pilot.press("enter")
            screen = await until(lambda: app.screen if type(app.screen).__name__ == "JobDetailScreen" else None, 5)
            await until(lambda: "Times" in plain(screen.query_one("#spec").content), 15, "the spec panel")
            text = plain(screen.query_one("#spec").content)
            await pilot.press("escape")
            await until(lambda: app.screen is app.main_screen, 15, "back to the list")
            return text

        root = await detail_of("root")
        assert f"workflow  #{wf} as root" in root, root
        assert f"children  #{ids['left']} left blocked, #{ids['right']} right blocked" in root, root
        assert "parents" not in root, root
        join = await detail_of("join")
        assert f"parents   #{ids['left']} left blocked, #{ids['right']} right blocked" in join, join
        assert "children" not in join, join
    async with JobDeckClient(node.url) as api:
        await api.workflow_action(wf, "cancel")
