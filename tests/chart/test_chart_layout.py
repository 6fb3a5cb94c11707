"""The chart's templates are one per component and kind, as cert-manager's chart lays them out
(issue 27): `<component>-<kind>.yaml`, e.g. results-deployment.yaml, controller-rbac.yaml.
Helpers stay in _*.tpl files."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import pytest
import yaml

from tests.chart.helm import CHART, KUBE_NEW, NAMESPACE, RELEASE, run_helm

pytestmark = pytest.mark.chart

RBAC = {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}
# The kind part of a template's name, and the kinds it may render.
KINDS = {
    "deployment": {"Deployment"},
    "service": {"Service"},
    "serviceaccount": {"ServiceAccount"},
    "rbac": RBAC,
    "networkpolicy": {"NetworkPolicy"},
    "poddisruptionbudget": {"PodDisruptionBudget"},
    "persistentvolumeclaim": {"PersistentVolumeClaim"},
    "certificate": {"Certificate"},
    "issuers": {"Issuer"},
    "configmaps": {"ConfigMap"},
    "tls-secret": {"Secret"},
    "mutating-webhook": {"MutatingWebhookConfiguration"},
    "validating-webhook": {"ValidatingWebhookConfiguration"},
}
# Every template, rendered at least once below.
SCENARIOS = [
    [],
    ["results.enabled=true", "certificates.mode=certManager", "namespaceGate.enabled=true"],
]
SOURCE = re.compile(r"^# Source: sidecar-debug/templates/([^/\n]+)$", re.M)


def _documents() -> list[tuple[str, dict[str, Any]]]:
    """(template file name, object) of every rendered object in every scenario."""
    found = []
    for sets in SCENARIOS:
        args = [arg for item in sets for arg in ("--set", item)]
        result = run_helm("template", RELEASE, str(CHART), "-n", NAMESPACE,
                          "--kube-version", KUBE_NEW, *args)  # fmt: skip
        assert result.returncode == 0, result.stderr
        for text in re.split(r"(?m)^---\s*$", result.stdout):
            source = SOURCE.search(text)
            doc = yaml.safe_load(text)
            if source and doc:
                found.append((source.group(1), doc))
    return found


def test_each_template_renders_one_component_and_kind() -> None:
    found: dict[str, set[str]] = defaultdict(set)
    for name, doc in _documents():
        found[name].add(doc["kind"])
    templates = {p.name for p in (CHART / "templates").glob("*.yaml")}
    assert set(found) == templates, "a template renders nothing in any scenario"
    for name, kinds in found.items():
        suffix = next((k for k in KINDS if name.endswith(f"-{k}.yaml")), None)
        assert suffix is not None, f"{name}: not <component>-<kind>.yaml"
        assert kinds <= KINDS[suffix], f"{name} renders {sorted(kinds)}"


def test_the_component_label_names_the_template() -> None:
    for name, doc in _documents():
        component = doc["metadata"].get("labels", {}).get("app.kubernetes.io/component")
        if component:
            assert name.startswith(f"{component}-"), (name, component)


def test_helpers_are_defined_only_in_tpl_files() -> None:
    """A reader looking for `sidecar-debug.X` finds it in a _*.tpl file, not inside the
    template of one kind that happens to use it first."""
    defining = sorted(path.name for path in (CHART / "templates").rglob("*.yaml")
                      if re.search(r"\{\{-?\s*define\s", path.read_text()))
    assert defining == []
