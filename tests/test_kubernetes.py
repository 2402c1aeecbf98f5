"""deploy/kubernetes is valid against the Kubernetes API schemas (offline, kubernetes-validate
--strict) and wired together: probes on the node's /livez and /readyz, selectors that match,
an HPA on the core Deployment, a migration Job, and no credentials in the files."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ROOT

DEPLOY = ROOT / "deploy" / "kubernetes"
MANIFESTS = sorted(p for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")


def validate(*files: Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("kubernetes-validate", path=str(Path(sys.executable).parent))
    assert tool, "kubernetes-validate is a test dependency (pip install -e '.[test]')"
    return subprocess.run([tool, "--strict", "--quiet", *map(str, files)], capture_output=True, text=True)


def resources() -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def test_every_manifest_passes_the_kubernetes_schemas_strictly() -> None:
    out = validate(*MANIFESTS)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_validation_catches_a_misspelt_field(tmp_path: Path) -> None:
    bad = tmp_path / "core.yaml"
    bad.write_text((DEPLOY / "core.yaml").read_text().replace("  replicas: 2", "  replica: 2", 1))
    out = validate(bad)
    assert out.returncode != 0 and "replica" in out.stdout + out.stderr, out.stdout + out.stderr


def test_the_kustomization_lists_every_manifest() -> None:
    listed = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in MANIFESTS)


def test_core_nodes_have_probes_a_disruption_budget_and_an_autoscaler() -> None:
    r = resources()
    core = r[("Deployment", "jobdeck-core")]
    pod = core["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["args"] == ["server"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["startupProbe"]["httpGet"]["path"] == "/livez"
    assert container["resources"]["requests"]["cpu"], "an HPA on CPU needs a CPU request"
    labels = pod["metadata"]["labels"]
    for kind in ("PodDisruptionBudget", "Service"):
        selector = r[(kind, "jobdeck-core")]["spec"]["selector"]
        selector = selector.get("matchLabels", selector)
        assert selector.items() <= labels.items(), f"the {kind} selects {selector}, the pods are {labels}"
    assert core["spec"]["selector"]["matchLabels"].items() <= labels.items()
    hpa = r[("HorizontalPodAutoscaler", "jobdeck-core")]["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "jobdeck-core"}
    assert hpa["metrics"][0]["resource"]["name"] == "cpu" and hpa["minReplicas"] >= 2
    assert r[("PodDisruptionBudget", "jobdeck-core")]["spec"]["minAvailable"] >= 1
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    shutdown = float(r[("ConfigMap", "jobdeck")]["data"]["JOBDECK_SHUTDOWN_GRACE_SECONDS"])
    assert grace > shutdown, "the pod must outlive the node's own drain"


def test_agents_the_dashboard_and_the_migration_job_point_at_the_core_service() -> None:
    r = resources()
    (agent,) = r[("Deployment", "jobdeck-agent")]["spec"]["template"]["spec"]["containers"]
    assert agent["args"][:3] == ["agent", "--server", "http://jobdeck-core:8640"]
    (web,) = r[("Deployment", "jobdeck-web")]["spec"]["template"]["spec"]["containers"]
    assert web["args"][:3] == ["web", "--server", "http://jobdeck-core:8640"] and "0.0.0.0" in web["args"]
    (migrate,) = r[("Job", "jobdeck-migrate")]["spec"]["template"]["spec"]["containers"]
    assert migrate["args"] == ["migrate"]
    for kind, name in r:
        assert kind != "Secret", f"{name}: credentials belong in a Secret the operator creates, not in the files"
    text = "\n".join(p.read_text() for p in MANIFESTS)
    assert "jd_" not in text.replace("JOBDECK_AGENT_TOKEN=jd_...", ""), "no tokens in the manifests"
