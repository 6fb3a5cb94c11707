"""Bad values fail `helm template`/`helm install` with a message that names the value."""

from __future__ import annotations

import json

import pytest

from tests.chart.helm import CHART, KUBE_OLD, NAMESPACE, RELEASE, run_helm, template_error

pytestmark = pytest.mark.chart


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        # Schema: enums, types, unknown keys (typos).
        (
            ["webhook.failurePolicy=Sometimes"],
            "at '/webhook/failurePolicy': value must be one of 'Ignore', 'Fail'",
        ),
        (
            ["namespaceGate.failurePolicy=ignore"],
            "at '/namespaceGate/failurePolicy': value must be one of",
        ),
        (["webhook.timeoutSeconds=abc"], "at '/webhook/timeoutSeconds': got string, want integer"),
        (["webhook.timeoutSeconds=31"], "at '/webhook/timeoutSeconds': maximum"),
        (["webhook.replicaCount=0"], "at '/webhook/replicaCount': minimum"),
        (["webhook.replicas=3"], "at '/webhook': additional properties 'replicas' not allowed"),
        (["certificate.mode=self"], "additional properties 'certificate' not allowed"),
        (
            ["certificates.mode=certmanager"],
            "at '/certificates/mode': value must be one of 'self', 'certManager', 'provided'",
        ),
        (["webhook.image.pullPolicy=Sometimes"], "at '/webhook/image/pullPolicy'"),
        (["toolset.image.digest=latest"], "at '/toolset/image/digest'"),
        (["webhook.image.repository=ghcr.io/x/webhook:1.0"], "at '/webhook/image/repository'"),
        (["sidecar.name=Debug_Toolset"], "at '/sidecar/name'"),
        (["sidecar.nativeSidecar=maybe"], "at '/sidecar/nativeSidecar'"),
        (
            ["injection.excludedNamespaces=kube-system"],
            "at '/injection/excludedNamespaces': got string, want array",
        ),
        (["injection.labelEnabled=not valid"], "at '/injection/labelEnabled'"),
        (["rbac.create=yes"], "at '/rbac/create': got string, want boolean"),
        (
            ["profiles[0].name=x", "profiles[0].privileged=true"],
            "additional properties 'privileged' not allowed",
        ),
        (["webhook.resources.limits.memory=lots"], "at '/webhook/resources/limits/memory'"),
        # Template checks: misuse the schema cannot express.
        (
            ["sidecar.defaultProfile=nope"],
            'sidecar.defaultProfile: "nope" is not a profile; known: lttng, perf, bcc, full',
        ),
        (["rbac.profileRoles={perf,turbo}"], 'rbac.profileRoles: "turbo" is not a profile'),
        (
            ["certificates.mode=provided"],
            "certificates.mode=provided needs certificates.secretName",
        ),
        (
            ["certificates.mode=provided", "certificates.secretName=tls"],
            "needs certificates.provided.caBundle",
        ),
        (
            [
                "certificates.mode=provided",
                "certificates.secretName=tls",
                "certificates.provided.caBundle=aGVsbG8=",
            ],
            "certificates.provided.caBundle must be base64-encoded PEM",
        ),
        (
            ["policies.files={missing.yaml}"],
            'policies.files: "missing.yaml" is not a policy file shipped with the chart',
        ),
        (["policies.extra.bad/name=x"], "policies.extra"),
        (
            ["serviceAccount.create=false"],
            "serviceAccount.name is required when serviceAccount.create is false",
        ),
        (
            ["injection.labelEnabled=on", "injection.labelDisabled=on"],
            "injection.labelEnabled and injection.labelDisabled must differ",
        ),
    ],
)
def test_bad_values_fail_with_a_readable_error(sets: list[str], message: str) -> None:
    error = template_error(sets=sets)
    assert message in error, error


def test_native_sidecar_forced_on_an_old_cluster_fails() -> None:
    error = template_error(sets=["sidecar.nativeSidecar=true"], kube_version=KUBE_OLD)
    assert "sidecar.nativeSidecar=true needs Kubernetes >= 1.29 (this cluster: v1.20.2)" in error


def test_helm_install_refuses_bad_values_before_touching_a_cluster() -> None:
    """`helm install` validates the schema before it talks to the apiserver."""
    result = run_helm(
        "install", RELEASE, str(CHART), "-n", NAMESPACE, "--dry-run=client",
        "--set", "webhook.failurePolicy=Never", "--set", "webhook.typo=1",
    )  # fmt: skip
    assert result.returncode != 0
    assert "at '/webhook/failurePolicy': value must be one of 'Ignore', 'Fail'" in result.stderr
    assert "additional properties 'typo' not allowed" in result.stderr


def test_schema_is_strict_everywhere() -> None:
    """Every object in values.schema.json that lists properties forbids unknown ones."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    loose: list[str] = []

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            if "properties" in node and node.get("additionalProperties") is not False:
                loose.append(path or "/")
            for key, value in node.items():
                walk(value, f"{path}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}/{i}")

    walk(schema, "")
    assert not loose, f"schema objects accepting unknown keys: {loose}"


def test_schema_covers_every_value() -> None:
    """values.yaml has no key the schema does not know (the defaults pass the strict schema)."""
    result = run_helm("lint", "--strict", str(CHART))
    assert result.returncode == 0, result.output
