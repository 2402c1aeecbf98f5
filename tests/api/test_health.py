"""The probes: /livez answers without touching the store, /readyz says whether the node can serve,
and both are public (a kubelet has no token); /healthz carries the version."""

from __future__ import annotations

from pathlib import Path

import httpx

from core.store import schema
from core.version import version
from tests.conftest import RunningNode, node_settings, start_node, stop_node


async def test_livez_and_readyz_on_a_healthy_node(running: RunningNode) -> None:
    async with httpx.AsyncClient(base_url=running.url) as http:
        live = await http.get("/livez")
        assert live.status_code == 200 and live.json()["status"] == "alive", live.text
        ready = await http.get("/readyz")
        assert ready.status_code == 200, ready.text
        known = schema.load("sqlite")[-1].version
        assert ready.json() == {"status": "ready", "checks": {"store": "ok", "schema": f"version {known} of {known}",
                                                              "bus": "in-process"}}  # fmt: skip
        health = (await http.get("/healthz")).json()
        assert health["version"] == version() and health["schema_version"] == known, health


async def test_readyz_is_503_with_the_reason_when_the_store_is_gone(tmp_path: Path) -> None:
    node, url, task = await start_node(node_settings(tmp_path), local_agent=False)
    try:
        await node.store.close()  # what a node sees when its database goes away under it
        async with httpx.AsyncClient(base_url=url) as http:
            ready = await http.get("/readyz")
            assert ready.status_code == 503, ready.text
            body = ready.json()
            assert body["error"] == "unavailable" and body["message"].startswith("not ready: store: unreachable"), body
            assert (await http.get("/livez")).status_code == 200, "alive, just not ready"
    finally:
        await stop_node(node, task)


async def test_the_probes_need_no_sign_in(tmp_path: Path) -> None:
    settings = node_settings(tmp_path, auth="token", tokens=[{"name": "x", "sha256": "0" * 64, "role": "viewer"}])
    node, url, task = await start_node(settings, local_agent=False)
    try:
        async with httpx.AsyncClient(base_url=url) as http:
            for path in ("/livez", "/readyz", "/healthz"):
                assert (await http.get(path)).status_code == 200, path
            assert (await http.get("/v1/jobs")).status_code == 401, "the API itself still needs a token"
    finally:
        await stop_node(node, task)
