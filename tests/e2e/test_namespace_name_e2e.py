"""Issue 24 against the real Kubernetes 1.20 apiserver (lite cluster, `sidecar-debug serve` on
the host behind the chart's own validating entries, as rendered for the cluster's version).

Item 1: carol, who may only patch her own namespace and create pods in it, labels it
`kubernetes.io/metadata.name=kube-system` (1.20 neither sets nor protects that label) and then
creates a privileged hostPath pod. The chart's entries for 1.20 refuse the label, and do not
exclude by it, so a namespace labelled so before the chart was installed still has its pods
guarded; the entries as rendered for >= 1.21 (where the apiserver protects the label) are the
control: with them the same pod is stored.

Item 4: the owned annotations through `pods/status`, and a seccomp annotation for a container
that does not exist yet.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.cluster import Cluster
from tests.cluster.webhooks import mutating_webhook_configuration
from tests.e2e.conftest import CHART, local_webhook_server

pytestmark = pytest.mark.cluster

WEBHOOK_NAMESPACE = "sidecar-debug-trust-e2e"
SERVICE = "sidecar-debug-trust"
CONFIGURATION = "sidecar-debug-trust-e2e"
NAME_LABEL = "kubernetes.io/metadata.name"
STATUS = "sidecar-debug.io/status"
OWNER = "alice"  # stands for the controller's service account (annotationOwners)
ATTACKER = "carol"
ENTRIES = ("guard.sidecar-debug.io", "guard-label.sidecar-debug.io",
           "namespace-name.sidecar-debug.io")


class Webhook:
    def __init__(self, cluster: Cluster, ca_pem: bytes, log: Path) -> None:
        self.cluster = cluster
        self.ca_pem = ca_pem
        self.log = log

    def apply_chart_entries(self, kube_version: str) -> list[str]:
        """The chart's guard and namespace-name entries as rendered for `kube_version`, sent to
        the local webhook; returns the entries' names."""
        import yaml

        rendered = self.cluster.helm(
            "template", "sidecar-debug", str(CHART), "--kube-version", kube_version,
            "--show-only", "templates/webhook-validating-webhook.yaml",
        ).stdout  # fmt: skip
        hooks = [hook for hook in yaml.safe_load(rendered)["webhooks"]
                 if hook["name"] in ENTRIES]  # fmt: skip
        for hook in hooks:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "service": {"name": SERVICE, "namespace": WEBHOOK_NAMESPACE, "path": path,
                            "port": 443},
                "caBundle": base64.b64encode(self.ca_pem).decode(),
            }  # fmt: skip
        self.cluster.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": CONFIGURATION}, "webhooks": hooks}))  # fmt: skip
        time.sleep(2)  # the apiserver loads webhook configurations asynchronously
        return [hook["name"] for hook in hooks]


@pytest.fixture(scope="module")
def webhook(lite_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Webhook]:
    cluster = lite_cluster
    workdir = tmp_path_factory.mktemp("trust-webhook")

    def nothing(ca_pem: bytes) -> dict[str, Any]:
        # local_webhook_server applies a mutating configuration: one that matches nothing.
        return mutating_webhook_configuration(
            CONFIGURATION, service=SERVICE, namespace=WEBHOOK_NAMESPACE, ca_pem=ca_pem,
            namespace_selector={"matchLabels": {"trust-e2e-never": "x"}})

    env = {
        "SIDECAR_DEBUG_TOOLSET_IMAGE": "localhost/sidecar-debug/toolset:0.1.0",
        "SIDECAR_DEBUG_WEBHOOK_NAMESPACE": WEBHOOK_NAMESPACE,
        "SIDECAR_DEBUG_ANNOTATION_OWNERS": OWNER,
    }
    try:
        with local_webhook_server(cluster, workdir, service=SERVICE,
                                  namespace=WEBHOOK_NAMESPACE, env=env,
                                  configuration=nothing) as (_, log_path):
            yield Webhook(cluster, (workdir / "ca.crt").read_bytes(), log_path)
    finally:
        cluster.kubectl("delete", "validatingwebhookconfiguration", CONFIGURATION,
                        "--ignore-not-found", check=False)  # fmt: skip


def _grant(cluster: Cluster, namespace: str) -> list[tuple[str, str]]:
    """carol: patch her namespace (by name) and nothing else of namespaces; create, get and
    patch pods and pods/status in it. alice (the stand-in owner): pods/status there. Returns
    (kind, name) of the cluster-scoped objects made."""
    made: list[tuple[str, str]] = []

    def apply(manifest: dict[str, Any]) -> None:
        cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))

    role = f"trust-e2e-{namespace}"
    apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
           "metadata": {"name": role},
           "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "patch"],
                      "resourceNames": [namespace]}]})  # fmt: skip
    apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
           "metadata": {"name": role},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                       "name": role},
           "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                         "name": ATTACKER}]})  # fmt: skip
    made += [("clusterrole", role), ("clusterrolebinding", role)]
    apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
           "metadata": {"name": "pods", "namespace": namespace},
           "rules": [{"apiGroups": [""], "resources": ["pods", "pods/status"],
                      "verbs": ["create", "get", "list", "patch", "update"]}]})  # fmt: skip
    apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": "pods", "namespace": namespace},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"},
           "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                        for user in (ATTACKER, OWNER)]})  # fmt: skip
    return made


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "image": "localhost/app:1"}], **spec}}


def _root_pod(name: str) -> dict[str, Any]:
    """The issue's pod: privileged, hostPID, hostNetwork and the node's `/`."""
    pod = _pod(name, hostPID=True, hostNetwork=True,
               volumes=[{"name": "host", "hostPath": {"path": "/"}}])
    pod["spec"]["containers"][0].update(securityContext={"privileged": True},
                                        volumeMounts=[{"name": "host", "mountPath": "/host"}])
    return pod


@pytest.fixture
def namespace(webhook: Webhook) -> Iterator[str]:
    """A guarded namespace (debug=enabled), and carol's and alice's rights in it."""
    cluster = webhook.cluster
    name = f"trust-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    cluster.kubectl("label", "namespace", name, "debug=enabled")
    # The token controller fills the default service account's secret; pods wait for it.
    cluster.kubectl("wait", "--for=jsonpath={.secrets[0].name}", "serviceaccount/default",
                    "-n", name, "--timeout=60s", check=False)
    made = _grant(cluster, name)
    yield name
    for kind, object_name in made:
        cluster.kubectl("delete", kind, object_name, "--ignore-not-found", check=False)
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _create(cluster: Cluster, namespace: str, pod: dict[str, Any], user: str = ATTACKER
            ) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("create", "-n", namespace, "-f", "-", user=user, check=False,
                           input=json.dumps(pod))


def _labels(cluster: Cluster, name: str) -> dict[str, str]:
    found: dict[str, str] = cluster.kubectl_json("get", "namespace", name)["metadata"].get(
        "labels", {})
    return found


def test_a_namespace_cannot_claim_to_be_kube_system(webhook: Webhook, namespace: str) -> None:
    cluster = webhook.cluster
    server = cluster.kubectl("version", "-o", "json").stdout
    assert json.loads(server)["serverVersion"]["minor"].startswith("20"), server

    # Planted before the chart was installed (or by anyone, while nothing checked the label).
    cluster.kubectl("label", "namespace", namespace, f"{NAME_LABEL}=kube-system", "--overwrite",
                    user=ATTACKER)  # fmt: skip
    assert _labels(cluster, namespace)[NAME_LABEL] == "kube-system"

    # Control: the entries as rendered where the apiserver protects the label leave the
    # namespace out, and the issue's pod is stored.
    assert webhook.apply_chart_entries("1.30.0") == list(ENTRIES[:2])
    control = _create(cluster, namespace, _root_pod("control"))
    assert control.returncode == 0, control.stderr

    # The chart for this cluster: the guard sees the namespace whatever its labels say.
    assert webhook.apply_chart_entries("1.20.2") == list(ENTRIES)
    refused = _create(cluster, namespace, _root_pod("root"))
    assert refused.returncode != 0, refused.stdout
    for words in ("sidecar-debug guard refused this", "privileged", "hostPath", "host namespaces"):
        assert words in refused.stderr, refused.stderr
    # Any other change to the namespace is refused until the label names it...
    change = cluster.kubectl("label", "namespace", namespace, "team=shop", user=ATTACKER,
                             check=False)  # fmt: skip
    assert change.returncode != 0
    assert f"may not carry {NAME_LABEL}='kube-system'" in change.stderr, change.stderr
    # ...removing it is the fix, and labelling it again is refused, at the label.
    cluster.kubectl("label", "namespace", namespace, f"{NAME_LABEL}-", user=ATTACKER)
    again = cluster.kubectl("label", "namespace", namespace, f"{NAME_LABEL}=kube-system",
                            user=ATTACKER, check=False)  # fmt: skip
    assert again.returncode != 0 and "denied the request" in again.stderr, again.stderr
    assert f"kubectl label namespace {namespace} {NAME_LABEL}={namespace} --overwrite" in (
        again.stderr)
    assert NAME_LABEL not in _labels(cluster, namespace)
    # Its own name is fine; the pod is still refused.
    cluster.kubectl("label", "namespace", namespace, f"{NAME_LABEL}={namespace}",
                    user=ATTACKER)  # fmt: skip
    assert _create(cluster, namespace, _root_pod("root")).returncode != 0
    assert _create(cluster, namespace, _pod("plain")).returncode == 0


def _status_patch(cluster: Cluster, namespace: str, pod: str, patch: dict[str, Any], user: str
                  ) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("patch", "pod", pod, "-n", namespace, "--subresource=status",
                           "--type=merge", "-p", json.dumps(patch), user=user, check=False)


def test_the_owned_annotations_through_pods_status(webhook: Webhook, namespace: str) -> None:
    cluster = webhook.cluster
    webhook.apply_chart_entries("1.20.2")
    assert _create(cluster, namespace, _pod("app")).returncode == 0
    forged = {"metadata": {"annotations": {STATUS: json.dumps({"mode": "standby"})}}}
    refused = _status_patch(cluster, namespace, "app", forged, ATTACKER)
    assert refused.returncode != 0, refused.stdout
    assert f"{STATUS} is written by sidecar-debug's webhook and controller only" in (
        refused.stderr), refused.stderr
    stored = cluster.kubectl_json("get", "pod", "app", "-n", namespace)
    assert STATUS not in stored["metadata"].get("annotations", {})
    # A seccomp annotation for a container the pod does not have (yet): refused by this route
    # and by a plain patch, as it would be at create.
    later = {"metadata": {"annotations": {
        "container.seccomp.security.alpha.kubernetes.io/later": "unconfined"}}}
    for result in (_status_patch(cluster, namespace, "app", later, ATTACKER),
                   cluster.kubectl("patch", "pod", "app", "-n", namespace, "--type=merge", "-p",
                                   json.dumps(later), user=ATTACKER, check=False)):
        assert result.returncode != 0, result.stdout
        assert "must not set seccomp profile" in result.stderr, result.stderr
    # What is not ours goes through that route as ever; the owner may write ours.
    assert _status_patch(cluster, namespace, "app", {"metadata": {"annotations": {
        "team": "shop"}}}, ATTACKER).returncode == 0  # fmt: skip
    owned = _status_patch(cluster, namespace, "app", forged, OWNER)
    assert owned.returncode == 0, owned.stderr
