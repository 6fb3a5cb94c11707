"""helm lint --strict and Kubernetes OpenAPI validation of every rendered object, per scenario."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.chart.helm import CHART, CI_VALUES, KUBE_NEW, KUBE_OLD, render, run_helm

pytestmark = pytest.mark.chart

SCENARIOS = [pytest.param(None, id="defaults")] + [pytest.param(p, id=p.stem) for p in CI_VALUES]
# kubernetes-validate ships schemas from 1.25 on; our 1.20 renders are checked against the
# oldest one it has (a superset for what we use, except the removed policy/v1beta1, see below).
OLDEST_SCHEMA = "1.25"
# CRDs of cert-manager: not in the Kubernetes schemas.
FOREIGN_GROUPS = ("cert-manager.io/",)


def _files(path: Path | None) -> list[Path]:
    return [path] if path else []


def test_ci_scenarios_exist() -> None:
    names = {p.stem for p in CI_VALUES}
    assert {"certmanager-values", "provided-values", "ha-off-values", "namespace-gate-values",
            "custom-profiles-values", "failure-policy-fail-values"} <= names  # fmt: skip


@pytest.mark.parametrize("values", SCENARIOS)
def test_helm_lint_strict(values: Path | None) -> None:
    args = ["lint", "--strict", str(CHART), "--namespace", "sidecar-debug"]
    for path in _files(values):
        args += ["-f", str(path)]
    result = run_helm(*args)
    assert result.returncode == 0, result.output
    assert "[ERROR]" not in result.output and "[WARNING]" not in result.output, result.output


def _validate(doc: dict[str, Any], version: str) -> None:
    if doc["apiVersion"].startswith(FOREIGN_GROUPS):
        return
    doc = copy.deepcopy(doc)
    if doc["apiVersion"] == "policy/v1beta1" and doc["kind"] == "PodDisruptionBudget":
        # The 1.20 render's PDB: v1beta1 has the same spec fields as v1, which the schemas have.
        doc["apiVersion"] = "policy/v1"
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        raise AssertionError(
            f"{doc['kind']} {doc['metadata']['name']} is invalid for {version}: {exc}\n"
            + yaml.safe_dump(doc)
        ) from exc


@pytest.mark.parametrize("values", SCENARIOS)
@pytest.mark.parametrize(
    ("kube_version", "schema_version"), [(KUBE_OLD, OLDEST_SCHEMA), (KUBE_NEW, "1.30")]
)
def test_every_object_validates(
    values: Path | None, kube_version: str, schema_version: str
) -> None:
    manifest = render(_files(values), kube_version=kube_version)
    assert manifest, "nothing rendered"
    for doc in manifest:
        _validate(doc, schema_version)


def test_validation_catches_a_broken_object() -> None:
    """The validator is strict: a misspelt field fails (so the tests above mean something)."""
    deployment = copy.deepcopy(render().deployment())
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(AssertionError, match="readinesProbe"):
        _validate(deployment, "1.30")
