"""The Workflows page and a workflow's detail in chromium against a real core: the DAG drawn in
layers, its nodes recoloured live as jobs move, a click on a node opening the job, the actions."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.web_ui.conftest import NAV_TIMEOUT, Dashboard
from tests.web_ui.test_dashboard import api

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
OpenPage = Callable[..., Page]


def sh(ref: str, command: str, *deps: str) -> dict[str, Any]:
    return {"ref": ref, "task": {"kind": "shell", "command": command}, "depends_on": list(deps)}


def test_the_dag_is_drawn_and_coloured_live(open_page: OpenPage, web: Dashboard, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    wait = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    out = api(web, "submit_workflow", "web-etl", [
        sh("extract", wait), sh("clean", "true", "extract"), sh("enrich", "true", "extract"),
        sh("load", "true", "clean", "enrich"),
    ])  # fmt: skip
    wf_id, ids = out["workflow"]["id"], out["ids"]
    page = open_page("/workflows")
    expect(page.locator(f"#wf-row-{wf_id}")).to_contain_text("web-etl")
    expect(page.locator(f"#wf-row-{wf_id}")).to_contain_text("running")
    page.locator(f"#wf-row-{wf_id} a").first.click()
    expect(page.locator("#dag .dag-node")).to_have_count(4)
    node = page.locator(f"#dag-node-{ids['load']}")
    expect(node).to_have_attribute("data-state", "blocked")
    # layers: extract above clean/enrich above load
    y = {ref: page.locator(f"#dag-node-{i} rect").get_attribute("y") for ref, i in ids.items()}
    assert float(y["extract"]) < float(y["clean"]) == float(y["enrich"]) < float(y["load"]), y
    expect(page.locator(f"#dag-node-{ids['extract']}")).to_have_attribute("data-state", "running")
    page.screenshot(path=str(tmp_path / "running.png"))
    gate.touch()  # the jobs run: the nodes turn green without a reload
    expect(node).to_have_attribute("data-state", "succeeded", timeout=30_000)
    expect(page.locator("#wf-state")).to_have_text("succeeded")
    page.screenshot(path=str(tmp_path / "web-workflow.png"), full_page=True)  # to look at (README: screenshots.py)
    assert node.get_attribute("href") == f"/jobs/{ids['load']}"
    node.click(timeout=NAV_TIMEOUT)  # a link: the page loads anew (long on a loaded two-core machine)
    expect(page).to_have_url(f"{web.url}/jobs/{ids['load']}", timeout=NAV_TIMEOUT)
    expect(page.locator("#detail-state")).to_have_text("succeeded", timeout=NAV_TIMEOUT)
    # the job's detail names its workflow and its parents (links, with their states)
    expect(page.locator("#job-workflow")).to_have_text(f"#{wf_id} as load")
    for ref in ("clean", "enrich"):
        expect(page.locator(f"#job-parents-{ids[ref]}")).to_contain_text(f"#{ids[ref]} {ref}")
        expect(page.locator(f"#job-parents-{ids[ref]}")).to_contain_text("succeeded")
    expect(page.locator("#job-children")).to_have_count(0)
    page.locator(f"#job-parents-{ids['clean']}").click(timeout=NAV_TIMEOUT)
    expect(page).to_have_url(f"{web.url}/jobs/{ids['clean']}", timeout=NAV_TIMEOUT)
    expect(page.locator(f"#job-children-{ids['load']}")).to_contain_text(f"#{ids['load']} load", timeout=NAV_TIMEOUT)
    expect(page.locator(f"#job-parents-{ids['extract']}")).to_contain_text("extract")


def test_pause_resume_and_cancel_from_the_list(open_page: OpenPage, web: Dashboard) -> None:
    out = api(web, "submit_workflow", "web-held", [
        {"ref": "a", "delay": 600, "task": {"kind": "shell", "argv": ["true"]}},
        {"ref": "b", "depends_on": ["a"], "task": {"kind": "shell", "argv": ["true"]}},
    ])  # fmt: skip
    wf_id = out["workflow"]["id"]
    page = open_page("/workflows")
    row = page.locator(f"#wf-row-{wf_id}")
    row.locator(".wf-pause").click()
    expect(row).to_contain_text("paused")
    assert api(web, "get_workflow", wf_id)["counts"] == {"paused": 2}
    row.locator(".wf-resume").click()
    expect(row.locator(".wf-pause")).to_be_visible()
    row.locator(".wf-cancel").click()
    expect(row).to_contain_text("cancelled")
    # submit -> end, once it has ended, as core.timetext.duration writes it: 919ms, 4.2s, 12s, 1m05s
    expect(row.locator(".wf-took")).to_have_text(re.compile(r"^(\d+ms|\d\.\ds|\d+s|\d+m\d\ds)$"))
    assert api(web, "get_workflow", wf_id)["state"] == "cancelled"


def test_a_nodes_hover_says_why_it_was_cancelled() -> None:
    from web_ui.pages.workflows import dag_svg

    svg = dag_svg([
        {"id": 1, "ref": "check", "name": "check", "state": "dead", "queue": "default", "parents": [],
         "last_error": "exit code 3"},
        {"id": 2, "ref": "report", "name": "report", "state": "cancelled", "queue": "default", "parents": [1],
         "last_error": "parent job 1 ended dead or cancelled"},
        {"id": 3, "ref": "fine", "name": "fine", "state": "succeeded", "queue": "default", "parents": [],
         "last_error": None},
    ])  # fmt: skip
    assert "<title>report · job 2 · cancelled · report · parent job 1 ended dead or cancelled</title>" in svg, svg
    assert "<title>check · job 1 · dead · check · exit code 3</title>" in svg, svg
    assert "<title>fine · job 3 · succeeded · fine</title>" in svg, svg
