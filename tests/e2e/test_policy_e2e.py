"""The policy gate against the real apiserver (lite cluster, `sidecar-debug serve` on the host).

The apiserver calls a local webhook process through a Service's loopback ClusterIP; pods stay
Pending (no node in lite mode) but are created, and ReplicaSet FailedCreate events appear, which
is all these decisions need: downgrade / skip / deny for a service account without a binding,
the binding the deny message names, users without rights, the namespace-label gate, reload, and
a policy typo rejected by `policy check` and by `serve` at start-up with file and line.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.cluster import Cluster
from tests.cluster.webhooks import mutating_webhook_configuration, serving_cert
from tests.e2e.conftest import CHART, STATUS_ANNOTATION, local_webhook_server, wait_until

pytestmark = pytest.mark.cluster

SIDECAR_DEBUG = str(Path(sys.executable).with_name("sidecar-debug"))
WEBHOOK_NAMESPACE = "sidecar-debug-policy-e2e"
SERVICE = "sidecar-debug-policy"
CONFIGURATION = "sidecar-debug-policy-e2e"
NAMESPACE_GATE = "sidecar-debug-policy-e2e-namespaces"
GUARD_LABEL_GATE = "sidecar-debug-policy-e2e-guard-label"
GUARD = "sidecar-debug.io/guard"
ROLE_PREFIX = "sidecar-debug-profile-"

POLICY = """\
apiVersion: sidecar-debug.io/v1alpha1
kind: DebugPolicy
metadata:
  name: e2e
spec:
  defaults:
    allowedProfiles: ["*"]
    mode: downgrade
  rules:
    - name: skip-namespaces
      match:
        namespaces: ["pe-skip-*"]
      mode: skip
    - name: deny-namespaces
      match:
        namespaces: ["pe-deny-*"]
      mode: deny
    - name: both-namespaces
      match:
        namespaces: ["pe-both-*"]
      grantSubject: both
"""
RELOADED_RULE = """\
    - name: reloaded
      match:
        namespaces: ["pe-reload-*"]
      allowedProfiles: []
      mode: skip
"""
TYPO = POLICY.replace("      mode: deny\n", "      mdoe: deny\n")


class LocalWebhook:
    def __init__(self, cluster: Cluster, cluster_ip: str, policy_file: Path, log: Path) -> None:
        self.cluster = cluster
        self.cluster_ip = cluster_ip
        self.policy_file = policy_file
        self.log = log

    def write_policy(self, text: str) -> None:
        """Replace the policy file and wait past the webhook's reload check interval."""
        self.policy_file.write_text(text)
        time.sleep(3)


def _cluster_roles(cluster: Cluster) -> None:
    """The grant ClusterRoles the chart creates (`<fullname>-profile-<name>`)."""
    for name in ("perf", "bcc", "full", "namespace-opt-in", "namespace-guard"):
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"{ROLE_PREFIX}{name}"},
            "rules": [
                {
                    "apiGroups": ["sidecar-debug.io"],
                    "resources": ["debugprofiles"],
                    "verbs": ["use"],
                    "resourceNames": [name],
                }
            ],
        }
        cluster.kubectl("apply", "-f", "-", input=json.dumps(role))


@pytest.fixture(scope="module")
def webhook(
    lite_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalWebhook]:
    cluster = lite_cluster
    workdir = tmp_path_factory.mktemp("policy-webhook")
    policy_dir = workdir / "policies"
    policy_dir.mkdir()
    policy_file = policy_dir / "policy.yaml"
    policy_file.write_text(POLICY)
    _cluster_roles(cluster)

    def configuration(ca_pem: bytes) -> dict[str, Any]:
        return mutating_webhook_configuration(
            CONFIGURATION,
            service=SERVICE,
            namespace=WEBHOOK_NAMESPACE,
            ca_pem=ca_pem,
            failure_policy="Fail",
            timeout_seconds=10,
            namespace_selector={"matchLabels": {"debug": "enabled", "policy-e2e": "true"}},
        )

    env = {
        "SIDECAR_DEBUG_TOOLSET_IMAGE": "localhost/sidecar-debug/toolset:0.1.0",
        "SIDECAR_DEBUG_WEBHOOK_NAMESPACE": WEBHOOK_NAMESPACE,
        "SIDECAR_DEBUG_POLICY_PATH": str(policy_dir),
        # A new RoleBinding must show within a second, not after the default 10 s.
        "SIDECAR_DEBUG_SAR_CACHE_SECONDS": "1",
    }
    try:
        with local_webhook_server(
            cluster,
            workdir,
            service=SERVICE,
            namespace=WEBHOOK_NAMESPACE,
            env=env,
            configuration=configuration,
        ) as (cluster_ip, log_path):
            yield LocalWebhook(cluster, cluster_ip, policy_file, log_path)
    finally:
        # test_namespace_label_gate and test_the_guard_label_gate_from_the_chart add these.
        for gate in (NAMESPACE_GATE, GUARD_LABEL_GATE):
            cluster.kubectl(
                "delete", "validatingwebhookconfiguration", gate, "--ignore-not-found",
                check=False,
            )  # fmt: skip


def _namespace(cluster: Cluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    cluster.kubectl("label", "namespace", name, "debug=enabled", "policy-e2e=true")
    return name


def _service_account(cluster: Cluster, namespace: str, name: str = "app") -> None:
    cluster.kubectl("create", "serviceaccount", name, "-n", namespace)


def _deployment(
    name: str, namespace: str, profile: str = "full", sa: str = "app"
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    "annotations": {"sidecar-debug.io/profile": profile},
                },
                "spec": {
                    "serviceAccountName": sa,
                    "containers": [{"name": "app", "image": "localhost/app:1"}],
                },
            },
        },
    }


def _pod(name: str, namespace: str, profile: str = "full") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {"sidecar-debug.io/profile": profile},
        },
        "spec": {"containers": [{"name": "app", "image": "localhost/app:1"}]},
    }


def _create(cluster: Cluster, manifest: dict[str, Any], user: str = "admin") -> dict[str, Any]:
    out = cluster.kubectl(
        "create", "-f", "-", "-o", "json", user=user, input=json.dumps(manifest)
    ).stdout
    return dict(json.loads(out))


def _status(pod: dict[str, Any]) -> dict[str, Any] | None:
    raw = pod["metadata"].get("annotations", {}).get(STATUS_ANNOTATION)
    return json.loads(raw) if raw else None


def _containers(pod: dict[str, Any]) -> list[str]:
    return [c["name"] for c in pod["spec"]["containers"]]


def _pods(cluster: Cluster, namespace: str, app: str) -> list[dict[str, Any]]:
    return list(cluster.kubectl_json("get", "pods", "-n", namespace, "-l", f"app={app}")["items"])


def _first_pod(cluster: Cluster, namespace: str, app: str) -> dict[str, Any]:
    pod = wait_until(
        lambda: next(iter(_pods(cluster, namespace, app)), None),
        60,
        f"the ReplicaSet controller to create a pod for {app}",
    )
    return dict(pod)


def _failed_create(cluster: Cluster, namespace: str) -> str:
    def message() -> str:
        events = cluster.kubectl_json("get", "events", "-n", namespace)["items"]
        return "\n".join(e.get("message", "") for e in events if e.get("reason") == "FailedCreate")

    return str(wait_until(message, 60, f"a FailedCreate event in {namespace}"))


def test_service_account_without_binding_is_downgraded(webhook: LocalWebhook) -> None:
    cluster = webhook.cluster
    namespace = _namespace(cluster, "pe-down")
    _service_account(cluster, namespace)
    _create(cluster, _deployment("web", namespace))
    pod = _first_pod(cluster, namespace, "web")
    status = _status(pod)
    assert status is not None and status["profile"] == "lttng", status
    assert "debug-toolset" in _containers(pod)
    privileged = [c for c in pod["spec"]["containers"] if c["name"] == "debug-toolset"][0]
    assert not privileged.get("securityContext", {}).get("privileged")


def test_service_account_without_binding_is_skipped(webhook: LocalWebhook) -> None:
    cluster = webhook.cluster
    namespace = _namespace(cluster, "pe-skip")
    _service_account(cluster, namespace)
    _create(cluster, _deployment("web", namespace))
    pod = _first_pod(cluster, namespace, "web")
    assert _containers(pod) == ["app"]
    assert _status(pod) is None


def test_deny_names_the_grant_and_the_binding_then_binding_gives_full(
    webhook: LocalWebhook,
) -> None:
    cluster = webhook.cluster
    namespace = _namespace(cluster, "pe-deny")
    _service_account(cluster, namespace)
    _create(cluster, _deployment("web", namespace))
    message = _failed_create(cluster, namespace)
    assert "sidecar-debug" in message and "debugprofiles.sidecar-debug.io 'full'" in message, (
        message
    )
    assert _pods(cluster, namespace, "web") == []
    found = re.search(r"kubectl create rolebinding [^.]*? -n " + re.escape(namespace), message)
    assert found, message
    command = found.group(0)
    assert f"--clusterrole={ROLE_PREFIX}full --serviceaccount={namespace}:app" in command
    # Run exactly what the message says; the ReplicaSet's next retry gets `full`.
    cluster.kubectl(*shlex.split(command)[1:])
    pod = _first_pod(cluster, namespace, "web")
    status = _status(pod)
    assert status is not None and status["profile"] == "full", status
    sidecar = [c for c in pod["spec"]["containers"] if c["name"] == "debug-toolset"][0]
    assert sidecar["securityContext"].get("privileged") is True


def test_user_without_rights_gets_no_privileged_sidecar(webhook: LocalWebhook) -> None:
    cluster = webhook.cluster
    namespace = _namespace(cluster, "pe-user")
    # alice and bob may create pods here (edit); only bob may use the `full` profile.
    for user in ("alice", "bob"):
        cluster.kubectl(
            "create",
            "rolebinding",
            f"{user}-edit",
            "--clusterrole=edit",
            f"--user={user}",
            "-n",
            namespace,
        )
    cluster.kubectl(
        "create",
        "rolebinding",
        "bob-full",
        f"--clusterrole={ROLE_PREFIX}full",
        "--user=bob",
        "-n",
        namespace,
    )
    wait_until(
        lambda: (
            cluster.kubectl(
                "auth", "can-i", "create", "pods", "-n", namespace, user="alice", check=False
            ).returncode
            == 0
        ),
        20,
        "alice's RoleBinding to take effect",
    )
    alice_pod = _create(cluster, _pod("by-alice", namespace), user="alice")
    status = _status(alice_pod)
    assert status is not None and status["profile"] == "lttng", status
    bob_pod = _create(cluster, _pod("by-bob", namespace), user="bob")
    status = _status(bob_pod)
    assert status is not None and status["profile"] == "full", status


def test_grant_subject_both_needs_the_service_account_and_the_requester(
    webhook: LocalWebhook,
) -> None:
    """Issue 12 item 13 against real SubjectAccessReviews: with `grantSubject: both` a bound
    service account is not enough; the pod's creator must hold the grant too, so a
    Deployment's pods (made by the ReplicaSet controller, which never grants) stay unprivileged."""
    cluster = webhook.cluster
    namespace = _namespace(cluster, "pe-both")
    _service_account(cluster, namespace)
    for user in ("alice", "bob"):
        cluster.kubectl(
            "create", "rolebinding", f"{user}-edit", "--clusterrole=edit", f"--user={user}",
            "-n", namespace,
        )
    for name, subject in (("app-full", f"--serviceaccount={namespace}:app"),
                          ("bob-full", "--user=bob")):
        cluster.kubectl(
            "create", "rolebinding", name, f"--clusterrole={ROLE_PREFIX}full", subject,
            "-n", namespace,
        )
    wait_until(
        lambda: all(
            cluster.kubectl(
                "auth", "can-i", "create", "pods", "-n", namespace, user=user, check=False
            ).returncode == 0
            for user in ("alice", "bob")
        ),
        20,
        "the RoleBindings to take effect",
    )
    _create(cluster, _deployment("web", namespace))
    status = _status(_first_pod(cluster, namespace, "web"))
    assert status is not None and status["profile"] == "lttng", status
    assert status["reason"] == "no-rbac-grant", status

    def as_app(name: str) -> dict[str, Any]:
        pod = _pod(name, namespace)
        pod["spec"]["serviceAccountName"] = "app"
        return pod

    status = _status(_create(cluster, as_app("by-bob"), user="bob"))
    assert status is not None and status["profile"] == "full", status
    assert status["grant"] == f"serviceaccount:{namespace}:app,user:bob", status
    status = _status(_create(cluster, as_app("by-alice"), user="alice"))
    assert status is not None and status["profile"] == "lttng", status


def test_changed_policy_is_reloaded_without_restart(webhook: LocalWebhook) -> None:
    cluster = webhook.cluster
    namespace = _namespace(cluster, "pe-reload")
    assert _status(_create(cluster, _pod("before", namespace, "lttng"))) is not None
    webhook.write_policy(POLICY + RELOADED_RULE)
    try:
        after = _create(cluster, _pod("after", namespace, "lttng"))
        assert _status(after) is None and _containers(after) == ["app"]
        # A broken change keeps the last good policy (and is logged with file and line).
        webhook.write_policy(TYPO + RELOADED_RULE)
        still = _create(cluster, _pod("still", namespace, "lttng"))
        assert _status(still) is None
        log = webhook.log.read_text()
        assert "policy reload failed" in log and "policy.yaml:17: spec.rules[1].mdoe" in log, log
    finally:
        webhook.write_policy(POLICY)


def test_namespace_label_gate(webhook: LocalWebhook, tmp_path: Path) -> None:
    cluster = webhook.cluster
    ca_pem = (webhook.log.parent / "ca.crt").read_bytes()
    gate = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": NAMESPACE_GATE},
        "webhooks": [
            {
                "name": "namespaces.policy-e2e.sidecar-debug.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "clientConfig": {
                    "service": {
                        "name": SERVICE,
                        "namespace": WEBHOOK_NAMESPACE,
                        "path": "/validate-namespace",
                        "port": 443,
                    },
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["namespaces"],
                        "scope": "*",
                    }
                ],
                "objectSelector": {"matchLabels": {"policy-e2e-gate": "true"}},
            }
        ],
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(gate))
    # carol may label namespaces (cluster-wide patch) but holds no opt-in grant; bob holds it.
    labeller = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "policy-e2e-namespace-labeller"},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["namespaces"],
                "verbs": ["get", "list", "patch", "update"],
            }
        ],
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(labeller))
    for user in ("carol", "bob"):
        cluster.kubectl(
            "create",
            "clusterrolebinding",
            f"policy-e2e-labeller-{user}",
            "--clusterrole=policy-e2e-namespace-labeller",
            f"--user={user}",
        )
    cluster.kubectl(
        "create",
        "clusterrolebinding",
        "policy-e2e-opt-in-bob",
        f"--clusterrole={ROLE_PREFIX}namespace-opt-in",
        "--user=bob",
    )
    try:
        time.sleep(2)
        name = f"pe-gate-{uuid.uuid4().hex[:6]}"
        cluster.kubectl("create", "namespace", name)
        cluster.kubectl("label", "namespace", name, "policy-e2e-gate=true")
        refused = cluster.kubectl(
            "label", "namespace", name, "debug=enabled", user="carol", check=False
        )
        assert refused.returncode != 0
        assert "namespace-opt-in" in refused.stderr and "'carol' lacks" in refused.stderr, (
            refused.stderr
        )
        labels = cluster.kubectl_json("get", "namespace", name)["metadata"].get("labels", {})
        assert "debug" not in labels
        cluster.kubectl("label", "namespace", name, "debug=enabled", user="bob")
        labels = cluster.kubectl_json("get", "namespace", name)["metadata"]["labels"]
        assert labels["debug"] == "enabled"
        # Closing the namespace again needs no grant.
        cluster.kubectl("label", "namespace", name, "debug-", user="carol")
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
    finally:
        cluster.kubectl(
            "delete",
            "validatingwebhookconfiguration",
            NAMESPACE_GATE,
            "--ignore-not-found",
            check=False,
        )
        for binding in (
            "policy-e2e-labeller-carol",
            "policy-e2e-labeller-bob",
            "policy-e2e-opt-in-bob",
        ):
            cluster.kubectl(
                "delete", "clusterrolebinding", binding, "--ignore-not-found", check=False
            )


def _labellers(cluster: Cluster, grant: str, *granted: str) -> list[str]:
    """carol and bob may label namespaces (cluster-wide patch); `granted` also hold `grant`.
    Returns the bindings made."""
    cluster.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "policy-e2e-namespace-labeller"},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"],
                   "verbs": ["get", "list", "patch", "update"]}],
    }))  # fmt: skip
    bindings = {f"policy-e2e-{grant}-labeller-{user}": ("policy-e2e-namespace-labeller", user)
                for user in ("carol", "bob")}  # fmt: skip
    bindings.update({f"policy-e2e-{grant}-{user}": (f"{ROLE_PREFIX}{grant}", user)
                     for user in granted})  # fmt: skip
    for name, (role, user) in bindings.items():
        cluster.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": user}],
        }))  # fmt: skip
    return list(bindings)


def _chart_guard_label_gate(cluster: Cluster, ca_pem: bytes) -> dict[str, Any]:
    """The chart's own namespace entries of the guard (its selectors as rendered), sent to
    the local webhook."""
    import yaml

    rendered = cluster.helm(
        "template", "sidecar-debug", str(CHART),
        "--show-only", "templates/webhook-validating-webhook.yaml",
    ).stdout  # fmt: skip
    hooks = [hook for hook in yaml.safe_load(rendered)["webhooks"]
             if hook["name"].startswith("namespace-guard")]  # fmt: skip
    assert [hook["clientConfig"]["service"]["path"] for hook in hooks] == [
        "/validate-namespace-guard"] * 2
    for hook in hooks:
        hook["clientConfig"] = {
            "service": {"name": SERVICE, "namespace": WEBHOOK_NAMESPACE,
                        "path": "/validate-namespace-guard", "port": 443},
            "caBundle": base64.b64encode(ca_pem).decode(),
        }  # fmt: skip
    return {"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": GUARD_LABEL_GATE}, "webhooks": hooks}  # fmt: skip


def test_the_guard_label_gate_from_the_chart(webhook: LocalWebhook) -> None:
    """Issue 17: a namespace's guard label, and the opt-in label where it alone guards the
    namespace, change only with `use` on debugprofiles/namespace-guard (bob holds it, carol
    does not); with the webhook down, only namespaces carrying those labels are blocked."""
    cluster = webhook.cluster
    gate = _chart_guard_label_gate(cluster, (webhook.log.parent / "ca.crt").read_bytes())
    cluster.kubectl("apply", "-f", "-", input=json.dumps(gate))
    bindings = _labellers(cluster, "namespace-guard", "bob")
    suffix = uuid.uuid4().hex[:6]
    guarded, opted_in, plain = (f"pe-guard-{part}-{suffix}" for part in ("gl", "oi", "plain"))
    try:
        time.sleep(2)
        for name, initial in ((guarded, ["debug=enabled"]), (opted_in, ["debug=enabled"]),
                              (plain, [])):  # fmt: skip
            cluster.kubectl("create", "namespace", name)
            if initial:
                cluster.kubectl("label", "namespace", name, *initial)  # admin: holds every grant

        def label(name: str, *change: str, user: str) -> subprocess.CompletedProcess[str]:
            return cluster.kubectl("label", "namespace", name, "--overwrite", *change,
                                   user=user, check=False)  # fmt: skip

        def refused(result: subprocess.CompletedProcess[str], *words: str) -> None:
            assert result.returncode != 0, result.stdout
            for word in ("namespace-guard", "'carol' lacks", *words):
                assert word in result.stderr, result.stderr

        def labels(name: str) -> dict[str, str]:
            found: dict[str, str] = cluster.kubectl_json("get", "namespace", name)[
                "metadata"].get("labels", {})
            return found

        refused(label(guarded, f"{GUARD}=restricted", user="carol"), f"adding {GUARD}")
        assert GUARD not in labels(guarded)
        assert label(guarded, f"{GUARD}=restricted", user="bob").returncode == 0
        refused(label(guarded, f"{GUARD}=baseline", user="carol"), "from restricted to baseline")
        refused(label(guarded, f"{GUARD}-", user="carol"), f"removing {GUARD}=restricted")
        # A typo never guards at a level nobody meant, whoever writes it.
        typo = label(guarded, f"{GUARD}=restrict", user="bob")
        assert typo.returncode != 0 and "must name a Pod Security level" in typo.stderr
        # Still guarded by its label: the opt-in label goes without a grant, others as ever.
        assert label(guarded, "debug-", "team=shop", user="carol").returncode == 0
        assert labels(guarded)[GUARD] == "restricted"
        # The opt-in label alone guards this one: removing it needs the grant.
        refused(label(opted_in, "debug-", user="carol"), "leaves the namespace unguarded")
        refused(label(opted_in, "debug=disabled", user="carol"), "removing debug=enabled")
        assert labels(opted_in)["debug"] == "enabled"
        assert label(opted_in, "team=shop", user="carol").returncode == 0
        assert label(plain, "team=shop", user="carol").returncode == 0

        # The webhook unreachable: Fail for the namespaces carrying the labels, nothing else.
        for hook in gate["webhooks"]:
            hook["clientConfig"]["service"]["name"] = "nothing-listens-here"
        cluster.kubectl("apply", "-f", "-", input=json.dumps(gate))
        time.sleep(2)
        for name in (guarded, opted_in):
            down = label(name, "team=ops", user="bob")
            assert down.returncode != 0 and "failed calling webhook" in down.stderr, down.stderr
            assert "namespace-guard" in down.stderr
        assert label(plain, "team=ops", user="carol").returncode == 0
        assert labels(plain)["team"] == "ops"
    finally:
        cluster.kubectl("delete", "validatingwebhookconfiguration", GUARD_LABEL_GATE,
                        "--ignore-not-found", check=False)  # fmt: skip
        for binding in bindings:
            cluster.kubectl("delete", "clusterrolebinding", binding, "--ignore-not-found",
                            check=False)  # fmt: skip
        for name in (guarded, opted_in, plain):
            cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_policy_check_rejects_a_typo_with_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "typo.yaml"
    bad.write_text(TYPO)
    result = subprocess.run(
        [SIDECAR_DEBUG, "policy", "check", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert f"{bad}:17: spec.rules[1].mdoe: unknown field (did you mean 'mode'?)" in result.stderr


def test_serve_refuses_to_start_with_a_broken_policy(tmp_path: Path) -> None:
    bad = tmp_path / "typo.yaml"
    bad.write_text(TYPO)
    _, cert, key = serving_cert(tmp_path / "certs", "x", "y")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_DEBUG_")}
    result = subprocess.run(
        [
            SIDECAR_DEBUG,
            "serve",
            "--policy-path",
            str(bad),
            "--tls-cert-file",
            str(cert),
            "--tls-key-file",
            str(key),
            "--bind-address",
            "127.0.0.1",
            "--port",
            "18443",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode != 0
    assert f"{bad}:17: spec.rules[1].mdoe: unknown field" in result.stderr, result.stderr
