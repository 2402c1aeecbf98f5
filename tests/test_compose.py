"""compose.yaml is a valid Compose file with the services a multi-node JobDeck needs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import ROOT

COMPOSE = ROOT / "compose.yaml"


def test_compose_file_follows_the_compose_specification() -> None:
    tool = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))
    assert tool, "check-jsonschema is a test dependency (pip install -e '.[test]')"
    out = subprocess.run(
        [tool, "--builtin-schema", "vendor.compose-spec", str(COMPOSE)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_compose_runs_two_nodes_two_agents_and_their_services_in_order() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert {"postgres", "redis", "kafka", "core-1", "core-2", "agent-1", "agent-2"} <= set(services)
    for name in ("postgres", "redis", "kafka", "core-1", "core-2"):
        assert "healthcheck" in services[name], f"{name} needs a health check"
    for core in ("core-1", "core-2"):
        env = services[core]["environment"]
        assert env["JOBDECK_DATABASE_URL"].startswith("postgresql://") and env["JOBDECK_REDIS_URL"].startswith(
            "redis://"
        )
        assert {d: c["condition"] for d, c in services[core]["depends_on"].items()} == {
            "postgres": "service_healthy", "redis": "service_healthy", "kafka": "service_healthy"
        }  # fmt: skip
    assert services["agent-1"]["depends_on"]["core-1"]["condition"] == "service_healthy"
    assert services["kafka"]["image"].startswith("apache/kafka"), "a real Kafka image for users"


def test_compose_nodes_listen_beyond_loopback_only_with_sign_in_on() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    for core in ("core-1", "core-2"):
        env = services[core]["environment"]
        assert env["JOBDECK_HOST"] == "0.0.0.0" and env["JOBDECK_AUTH"] == "token"
        assert env["JOBDECK_TOKENS"].startswith("${JOBDECK_TOKENS:?"), "no default credentials in the file"
    for agent in ("agent-1", "agent-2"):
        assert services[agent]["environment"]["JOBDECK_TOKEN"].startswith("${JOBDECK_AGENT_TOKEN:?")


def test_compose_cores_relay_to_its_kafka_and_a_dashboard_serves_them() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    for core in ("core-1", "core-2"):
        env = services[core]["environment"]
        assert env["JOBDECK_KAFKA_BOOTSTRAP"] == "kafka:9092", "the cores relay events to the compose broker"
        assert env["JOBDECK_KAFKA_SUBMIT_TOPIC"] == "jobdeck.submit"
        assert "http://localhost:8650" in env["JOBDECK_WEB_ORIGINS"], "the dashboard's origin may sign in"
    kafka_env = services["kafka"]["environment"]
    assert kafka_env["KAFKA_PROCESS_ROLES"] == "broker,controller", "one Kafka node in KRaft mode"
    web = services["web"]
    assert web["command"][:3] == ["web", "--server", "http://core-1:8640"] and "8650:8650" in web["ports"]
    assert web["depends_on"]["core-1"]["condition"] == "service_healthy" and "healthcheck" in web
    assert web["environment"]["JOBDECK_TOKEN"].startswith("${JOBDECK_WEB_TOKEN:?"), "no default credentials"
