"""/docs renders in chromium with every request kept on the node: Swagger UI's script, styles and
icon come from the node (swagger-ui-bundle-v2), none from a CDN, and it lists the API's routes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Route

from tests.conftest import ServerProcess, spawn_jobdeck, stop_process


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ServerProcess]:
    sp = spawn_jobdeck(tmp_path / "data", "server")
    try:
        yield sp
    finally:
        stop_process(sp.proc)


def test_docs_render_offline(node: ServerProcess, browser: Browser) -> None:
    page_html = httpx.get(node.url + "/docs").text
    assert "cdn." not in page_html and "/docs/assets/swagger-ui-bundle.js" in page_html, page_html
    elsewhere: list[str] = []

    def only_the_node(route: Route) -> None:
        if route.request.url.startswith(node.url):
            route.continue_()
        else:  # what an air-gapped machine would see
            elsewhere.append(route.request.url)
            route.abort()

    page = browser.new_page()
    try:
        page.route("**/*", only_the_node)
        page.goto(node.url + "/docs")
        page.wait_for_selector(".opblock", timeout=60_000)
        paths = page.locator(".opblock-summary-path").all_inner_texts()
        assert any("/v1/jobs" in p for p in paths) and any("/metrics" in p for p in paths), paths
        assert page.locator(".information-container .title").inner_text().startswith("JobDeck API")
    finally:
        page.close()
    assert elsewhere == [], f"/docs asked for outside resources: {elsewhere}"
