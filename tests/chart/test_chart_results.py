"""The chart's scheduled-profiling parts (issue 13): with results.enabled, a claim for the
results, the results page as a read-only container in the controller pod behind its own
Service, and the schedules' RBAC (exactly what webhook/schedules/runner.py calls, bound to the
controller's ServiceAccount); nothing of it without."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.helm import FULLNAME, NAMESPACE, Manifest, render, template_error

pytestmark = pytest.mark.chart

ON = ["results.enabled=true"]
CONTROLLER = f"{FULLNAME}-controller"


def controller_pod(manifest: Manifest) -> dict[str, Any]:
    deployment = manifest.one("Deployment", CONTROLLER)
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def test_results_page_runs_read_only_beside_the_controller() -> None:
    manifest = render(sets=ON)
    pod = controller_pod(manifest)
    containers = {c["name"]: c for c in pod["containers"]}
    page = containers["results"]
    assert page["command"] == ["sidecar-debug", "results", "serve", "--dir",
                               "/var/lib/sidecar-debug/results", "--port", "8080"]
    assert page["volumeMounts"] == [{"name": "results",
                                     "mountPath": "/var/lib/sidecar-debug/results",
                                     "readOnly": True}]
    assert page["securityContext"]["readOnlyRootFilesystem"] is True
    assert page["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "results"}
    controller = containers["controller"]
    assert "--results-dir" in controller["command"]
    mount = next(m for m in controller["volumeMounts"] if m["name"] == "results")
    assert not mount.get("readOnly")
    volume = next(v for v in pod["volumes"] if v["name"] == "results")
    assert volume == {"name": "results",
                      "persistentVolumeClaim": {"claimName": f"{FULLNAME}-results"}}
    claim = manifest.one("PersistentVolumeClaim", f"{FULLNAME}-results")
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    service = manifest.one("Service", f"{FULLNAME}-results")
    assert service["spec"]["ports"][0]["targetPort"] == "results"
    labels = manifest.one("Deployment", CONTROLLER)["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())


def test_storage_choices() -> None:
    pod = controller_pod(render(sets=[*ON, "results.persistence.enabled=false"]))
    volume = next(v for v in pod["volumes"] if v["name"] == "results")
    assert volume["emptyDir"] == {"sizeLimit": "2Gi"}
    manifest = render(sets=[*ON, "results.persistence.existingClaim=kept-results"])
    assert not manifest.has("PersistentVolumeClaim")
    volume = next(v for v in controller_pod(manifest)["volumes"] if v["name"] == "results")
    assert volume["persistentVolumeClaim"]["claimName"] == "kept-results"


def test_nothing_without_results() -> None:
    manifest = render()
    assert not manifest.has("PersistentVolumeClaim")
    assert not manifest.has("Service", f"{FULLNAME}-results")
    assert not any("schedules" in obj["metadata"]["name"] for obj in manifest)
    assert [c["name"] for c in controller_pod(manifest)["containers"]] == ["controller"]


def test_results_need_the_controller() -> None:
    error = template_error(sets=[*ON, "controller.enabled=false"])
    assert "results.enabled needs controller.enabled" in error


def test_bad_retention_is_refused_by_the_schema() -> None:
    error = template_error(sets=[*ON, "results.retention.maxAge=soon"])
    assert "maxAge" in error


def rules(manifest: Manifest, kind: str, name: str) -> set[tuple[str, str, str]]:
    role = manifest.one(kind, name)
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_schedules_rbac_is_what_the_runner_calls_and_bound_to_the_controller() -> None:
    manifest = render(sets=ON)
    cluster = rules(manifest, "ClusterRole", f"{FULLNAME}-controller-schedules")
    assert cluster == {
        ("", "namespaces", "list"),  # runner: GET /api/v1/namespaces
        ("", "pods", "list"),  # runner: GET /api/v1/pods
        ("", "pods", "get"),  # Session.read_pod: the toolset container check
        ("", "pods/exec", "get"), ("", "pods/exec", "create"),  # Session.exec (websocket)
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "list"),  # settings
    }
    settings = manifest.one("Role", f"{FULLNAME}-controller-schedules-settings")
    assert settings["metadata"]["namespace"] == NAMESPACE
    assert sorted(settings["rules"][0]["resourceNames"]) == sorted(
        [f"{FULLNAME}-config", f"{FULLNAME}-profiles"])
    for kind, name in (("ClusterRoleBinding", f"{FULLNAME}-controller-schedules"),
                       ("RoleBinding", f"{FULLNAME}-controller-schedules-settings")):
        subjects = manifest.one(kind, name)["subjects"]
        assert subjects == [{"kind": "ServiceAccount", "name": CONTROLLER,
                             "namespace": NAMESPACE}]
    off = render(sets=[*ON, "schedules.enabled=false"])
    assert not any("schedules" in obj["metadata"]["name"] for obj in off)


def test_runner_calls_match_the_paths_it_names() -> None:
    from pathlib import Path

    source = (Path(__file__).resolve().parents[2] / "webhook" / "schedules" / "runner.py"
              ).read_text()
    assert '"/api/v1/namespaces"' in source and '"/api/v1/pods"' in source


def test_retention_values_reach_the_controller() -> None:
    pod = controller_pod(render(sets=[*ON, "results.retention.count=7",
                                      "results.retention.maxAge=12h"]))
    controller = next(c for c in pod["containers"] if c["name"] == "controller")
    env = {e["name"]: e.get("value") for e in controller.get("env", [])}
    assert env.get("SIDECAR_DEBUG_RESULTS_KEEP") == "7"
    assert env.get("SIDECAR_DEBUG_RESULTS_MAX_AGE") == "12h"
