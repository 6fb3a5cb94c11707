"""The chart against a real Kubernetes 1.20 apiserver (lite cluster: no node, so no pods run).

What only an apiserver can tell: every rendered object is accepted by 1.20's validation (the
OpenAPI schemas in kubernetes-validate start at 1.25), and `helm upgrade` leaves alone the
`caBundle` the webhook writes in mode `self`, with Helm 4's server-side apply and with the
client-side three-way merge. The full install/test/upgrade/uninstall with running pods is
tests/e2e/test_chart_lifecycle.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator

import pytest

from tests.chart.helm import CHART
from tests.cluster.cluster import Cluster

pytestmark = [pytest.mark.chart, pytest.mark.cluster]

FAKE_CA = base64.b64encode(
    b"-----BEGIN CERTIFICATE-----\nwritten-by-the-webhook\n-----END CERTIFICATE-----\n"
).decode()


def _install(cluster: Cluster, release: str, namespace: str, *args: str) -> None:
    cluster.helm("uninstall", release, "-n", namespace, check=False)
    cluster.helm(
        "install", release, str(CHART), "-n", namespace, "--create-namespace",
        "--set", "webhook.replicaCount=1", *args, timeout=180,
    )  # fmt: skip


@pytest.fixture
def release(lite_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    # One release and namespace per test case (a deleted namespace lingers while terminating).
    name = "chart-" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:8]  # noqa: S324
    namespace = f"{name}-ns"
    yield name, namespace
    lite_cluster.helm("uninstall", name, "-n", namespace, check=False)
    lite_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _ca_bundles(cluster: Cluster, name: str) -> list[str | None]:
    configuration = cluster.kubectl_json("get", "mutatingwebhookconfiguration", name)
    return [hook["clientConfig"].get("caBundle") for hook in configuration["webhooks"]]


def _write_ca_bundle_like_the_webhook(cluster: Cluster, name: str, count: int) -> None:
    """A PATCH by another field manager, as webhook.certs.rotation does in mode `self`."""
    patch = [
        {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": FAKE_CA}
        for i in range(count)
    ]
    cluster.kubectl(
        "patch", "mutatingwebhookconfiguration", name, "--type=json", "-p", json.dumps(patch),
        "--field-manager=sidecar-debug",
    )  # fmt: skip


@pytest.mark.parametrize("server_side", ["true", "false"])
def test_upgrade_keeps_the_ca_bundle_the_webhook_wrote(
    lite_cluster: Cluster, release: tuple[str, str], server_side: str
) -> None:
    name, namespace = release
    _install(lite_cluster, name, namespace, f"--server-side={server_side}")
    fullname = f"{name}-sidecar-debug"
    # Every entry (pods, ephemeral containers, ...) starts without a CA bundle.
    entries = len(_ca_bundles(lite_cluster, fullname))
    assert entries >= 2 and _ca_bundles(lite_cluster, fullname) == [None] * entries
    _write_ca_bundle_like_the_webhook(lite_cluster, fullname, entries)

    lite_cluster.helm(
        "upgrade", name, str(CHART), "-n", namespace, "--set", "webhook.replicaCount=1",
        "--set", "webhook.timeoutSeconds=7", "--set", "webhook.logLevel=DEBUG",
        timeout=180,
    )  # fmt: skip
    configuration = lite_cluster.kubectl_json("get", "mutatingwebhookconfiguration", fullname)
    assert [hook["timeoutSeconds"] for hook in configuration["webhooks"]] == [7] * entries
    assert _ca_bundles(lite_cluster, fullname) == [FAKE_CA] * entries


def test_every_scenario_is_accepted_by_kubernetes_1_20(
    lite_cluster: Cluster, release: tuple[str, str]
) -> None:
    """Server-side dry run of each scenario's objects (cert-manager's CRDs are not installed)."""
    name, namespace = release
    lite_cluster.kubectl("create", "namespace", namespace, check=False)
    version = lite_cluster.kubectl_json("version")["serverVersion"]["gitVersion"]
    for values in [None, *sorted((CHART / "ci").glob("*.yaml"))]:
        rendered = lite_cluster.helm(
            "template", name, str(CHART), "-n", namespace, "--kube-version", version,
            *(["-f", str(values)] if values else []),
        ).stdout  # fmt: skip
        documents = [doc for doc in rendered.split("\n---\n") if "cert-manager.io/" not in doc]
        result = lite_cluster.kubectl(
            "apply", "--dry-run=server", "-n", namespace, "-f", "-",
            input="\n---\n".join(documents), check=False,
        )  # fmt: skip
        assert result.returncode == 0, f"{values}: {result.stderr}"
