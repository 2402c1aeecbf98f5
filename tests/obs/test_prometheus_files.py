"""The shipped Prometheus and Grafana files against the real tools and a real node: promtool
checks and unit-tests the alert rules, every query of the dashboard parses as PromQL, every metric
they name is one a node serves, and a real Prometheus scrapes a node and sees its counters move."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOT, RunningNode, free_port, stop_process, until

PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "jobdeck.json"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool missing: ./dev test installs Debian's prometheus package (apt-get install prometheus)",
)


def promtool(*args: str, cwd: Path = PROMETHEUS_DIR) -> str:
    assert PROMTOOL is not None
    out = subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"promtool {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    assert len(exprs) >= 14, "the dashboard lost panels"
    # Grafana's variables as Prometheus would see them once Grafana filled them in
    return [e.replace("$__rate_interval", "5m").replace("$queue", ".*") for e in exprs]


def alert_queries() -> list[str]:
    rules = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())
    return [r["expr"] for g in rules["groups"] for r in g["rules"]]


@needs_promtool
def test_alert_rules_pass_promtool_check_and_their_unit_tests() -> None:
    assert "SUCCESS: 6 rules found" in promtool("check", "rules", "alerts.yml")
    assert "SUCCESS" in promtool("test", "rules", "alerts.test.yml")
    promtool("check", "config", "prometheus.yml")


@needs_promtool
def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"jobdeck:dashboard_{i}", "expr": e}
                                                       for i, e in enumerate(dashboard_queries())]}]}  # fmt: skip
    (tmp_path / "dash.yml").write_text(yaml.safe_dump(rules))
    promtool("check", "rules", "dash.yml", cwd=tmp_path)


async def test_every_metric_the_files_name_is_served(running: RunningNode) -> None:
    async with httpx.AsyncClient(base_url=running.url) as http:
        text = (await http.get("/metrics")).text + (await http.get("/metrics/cluster")).text
    served = {f.name for f in text_string_to_metric_families(text)}
    named = set()
    for expr in dashboard_queries() + alert_queries():
        for name in re.findall(r"\b(jobdeck_[a-z_]+)", expr):
            named.add(re.sub(r"_(bucket|sum|count|total)$", "", name))
    assert named, "no metric found in the files"
    assert named <= served, f"named but not served: {sorted(named - served)}"


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus missing: apt-get install prometheus")
async def test_a_real_prometheus_scrapes_a_node(running: RunningNode, tmp_path: Path) -> None:
    host = running.url.removeprefix("http://")
    config = {"global": {"scrape_interval": "1s"},
              "scrape_configs": [{"job_name": "jobdeck", "static_configs": [{"targets": [host]}]},
                                 {"job_name": "jobdeck-cluster", "metrics_path": "/metrics/cluster",
                                  "static_configs": [{"targets": [host]}]}]}  # fmt: skip
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = open(tmp_path / "prometheus.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    api = f"http://127.0.0.1:{port}/api/v1/query"
    try:
        for _ in range(3):
            job = await running.client.submit({"name": "scraped", "queue": "prom", "task": {"kind": "shell",
                                                                                          "command": "true"}})  # fmt: skip
            await running.client.wait_for(job["id"], timeout=120)

        async def seen(query: str, want: float) -> bool:
            async with httpx.AsyncClient() as http:
                try:
                    r = (await http.get(api, params={"query": query}, timeout=5)).json()
                except (httpx.TransportError, ValueError):
                    return False
            result = r.get("data", {}).get("result", [])
            return bool(result) and float(result[0]["value"][1]) == want

        q = 'sum(jobdeck_jobs_finished_total{queue="prom",outcome="succeeded"})'
        assert await until(lambda: seen(q, 3.0), timeout=60, what=f"{q} == 3 in Prometheus")
        q = 'max without (instance) (jobdeck_jobs{queue="prom",state="succeeded"})'
        assert await until(lambda: seen(q, 3.0), timeout=60, what=f"{q} == 3 in Prometheus")
        assert await until(lambda: seen('up{job="jobdeck-cluster"}', 1.0), timeout=30, what="the cluster target up")
    finally:
        stop_process(proc)
        log.close()
