"""What the chart renders: webhook selectors, exclusions, RBAC, security, certificates, settings."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.helm import (
    CHART,
    FULLNAME,
    KUBE_NEW,
    KUBE_OLD,
    NAMESPACE,
    Manifest,
    notes,
    render,
    run_helm,
    template_error,
)
from tests.cluster import webhooks as cluster_webhooks
from webhook.config import load_settings
from webhook.errors import SettingsError
from webhook.guard.privilege import requires_grant

pytestmark = pytest.mark.chart

CI = CHART / "ci"
EXCLUDED = ["kube-system", "kube-public", "kube-node-lease", NAMESPACE]
POD_RULES = [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
     "resources": ["pods"], "scope": "Namespaced"},
]  # fmt: skip
EPHEMERAL_RULES = [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
     "resources": ["pods/ephemeralcontainers"], "scope": "Namespaced"},
]  # fmt: skip
EPHEMERAL_ENTRIES = [
    "ephemeral-guarded.sidecar-debug.io",
    "ephemeral-guard-label.sidecar-debug.io",
    "ephemeral.sidecar-debug.io",
]
ENTRIES = ["namespace.sidecar-debug.io", "pod.sidecar-debug.io", *EPHEMERAL_ENTRIES]
GUARD_ENTRIES = ["guard.sidecar-debug.io", "guard-label.sidecar-debug.io"]
NAMESPACE_GUARD_ENTRIES = [
    "namespace-guard.sidecar-debug.io", "namespace-guard-label.sidecar-debug.io"]
GUARD_RULES = [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
     "resources": ["pods"], "scope": "Namespaced"},
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
     "resources": ["pods/ephemeralcontainers", "pods/status"], "scope": "Namespaced"},
]  # fmt: skip
# The three disjoint parts of the namespaces: opted in; guard-labelled; neither.
GUARDED_OPT_IN = {"debug": ("In", ["enabled"]), "kubernetes.io/metadata.name": ("NotIn", EXCLUDED)}
GUARDED_LABEL = {
    "debug": ("NotIn", ["enabled"]),
    "sidecar-debug.io/guard": ("Exists", []),
    "kubernetes.io/metadata.name": ("NotIn", EXCLUDED),
}
UNGUARDED = {**GUARDED_LABEL, "sidecar-debug.io/guard": ("DoesNotExist", [])}


def ci(name: str) -> Path:
    return CI / f"{name}-values.yaml"


def expressions(selector: dict[str, Any]) -> dict[str, tuple[str, list[str]]]:
    return {e["key"]: (e["operator"], e.get("values", [])) for e in selector["matchExpressions"]}


# ---------------------------------------------------------------- MutatingWebhookConfiguration


def test_webhook_entries_with_fixed_admission_settings() -> None:
    manifest = render()
    hooks = manifest.webhooks()
    assert list(hooks) == ENTRIES
    for hook in hooks.values():
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "None"
        # Ephemeral containers in guarded namespaces fail closed (issue 17).
        guarded = hook["name"] in EPHEMERAL_ENTRIES[:2]
        assert hook["failurePolicy"] == ("Fail" if guarded else "Ignore")
        assert hook["timeoutSeconds"] == 5
        assert hook["reinvocationPolicy"] == "IfNeeded"
        assert hook["matchPolicy"] == "Equivalent"
        # Pods created, and ephemeral containers added to running pods (attach, kubectl debug):
        # both go through the same gate.
        ephemeral = hook["name"] in EPHEMERAL_ENTRIES
        assert hook["rules"] == (EPHEMERAL_RULES if ephemeral else POD_RULES)
        assert hook["clientConfig"]["service"] == {
            "name": FULLNAME, "namespace": NAMESPACE, "path": "/mutate", "port": 443,
        }  # fmt: skip
        # Mode self: the webhook owns caBundle; the chart must never render one.
        assert "caBundle" not in hook["clientConfig"]


def test_namespace_entry_selects_opted_in_namespaces_and_skips_opted_out_pods() -> None:
    hook = render().webhooks()["namespace.sidecar-debug.io"]
    assert expressions(hook["namespaceSelector"]) == {
        "debug": ("In", ["enabled"]),
        "kubernetes.io/metadata.name": ("NotIn", EXCLUDED),
    }
    assert expressions(hook["objectSelector"]) == {"debug": ("NotIn", ["disabled"])}


def test_pod_entry_selects_labelled_pods_in_other_namespaces() -> None:
    hook = render().webhooks()["pod.sidecar-debug.io"]
    # NotIn enabled: a pod in an opted-in namespace goes through the namespace entry only.
    assert expressions(hook["namespaceSelector"]) == {
        "debug": ("NotIn", ["enabled"]),
        "kubernetes.io/metadata.name": ("NotIn", EXCLUDED),
    }
    # In enabled also excludes pods labelled debug=disabled.
    assert expressions(hook["objectSelector"]) == {"debug": ("In", ["enabled"])}


def test_label_key_and_values_and_extra_exclusions_are_values() -> None:
    manifest = render([ci("custom-profiles")], sets=["injection.excludedNamespaces={monitoring}"])
    hooks = manifest.webhooks()
    ns_hook, pod_hook = hooks["namespace.sidecar-debug.io"], hooks["pod.sidecar-debug.io"]
    assert expressions(ns_hook["namespaceSelector"])["example.com/debug"] == ("In", ["on"])
    assert expressions(ns_hook["objectSelector"]) == {"example.com/debug": ("NotIn", ["off"])}
    assert expressions(pod_hook["objectSelector"]) == {"example.com/debug": ("In", ["on"])}
    assert expressions(pod_hook["namespaceSelector"])["kubernetes.io/metadata.name"] == (
        "NotIn", [*EXCLUDED, "monitoring"],
    )  # fmt: skip
    config = manifest.config()
    assert (config["labelKey"], config["labelEnabled"], config["labelDisabled"]) == (
        "example.com/debug", "on", "off",
    )  # fmt: skip
    assert config["excludedNamespaces"] == [*EXCLUDED, "monitoring"]


def test_failure_policy_and_timeout_are_values() -> None:
    manifest = render([ci("failure-policy-fail")])
    for hook in manifest.webhooks().values():  # the guarded ephemeral entries: Fail anyway
        assert hook["failurePolicy"] == "Fail"
        assert hook["timeoutSeconds"] == 10
    assert manifest.pod_spec()["priorityClassName"] == "system-cluster-critical"


def test_local_test_webhooks_register_what_the_chart_registers() -> None:
    """tests/cluster/webhooks.py puts both rules in one entry for the e2e tests' local webhooks;
    together they must be what the chart's entries register."""
    rules = [rule for hook in render().webhooks().values() for rule in hook["rules"]]
    unique = {json.dumps(rule, sort_keys=True) for rule in rules}
    assert unique == {json.dumps(rule, sort_keys=True) for rule in cluster_webhooks.POD_RULES}


def test_ephemeral_containers_entries_review_every_pod_outside_the_excluded_namespaces() -> None:
    """No pod label decides it: on 1.20/1.21 the reviewed EphemeralContainers object has no
    pod labels, and a pod label (debug=disabled) must not be a way around the gate. The three
    entries split the namespaces: guarded ones (Fail), the others (webhook.failurePolicy)."""
    hooks = render().webhooks()
    selectors = [expressions(hooks[name]["namespaceSelector"]) for name in EPHEMERAL_ENTRIES]
    assert selectors == [GUARDED_OPT_IN, GUARDED_LABEL, UNGUARDED]
    assert all("objectSelector" not in hooks[name] for name in EPHEMERAL_ENTRIES)
    failure = [hooks[name]["failurePolicy"] for name in EPHEMERAL_ENTRIES]
    assert failure == ["Fail", "Fail", "Ignore"]


def test_entries_can_be_switched_off() -> None:
    hooks = render(sets=["injection.podOptIn=false"]).webhooks()
    assert list(hooks) == ["namespace.sidecar-debug.io", *EPHEMERAL_ENTRIES]
    hooks = render(sets=["injection.podOptIn=false", "injection.namespaceOptIn=false"]).webhooks()
    assert list(hooks) == EPHEMERAL_ENTRIES
    manifest = render(sets=["injection.podOptIn=false", "injection.namespaceOptIn=false",
                            "injection.ephemeralContainers=false"])  # fmt: skip
    assert not manifest.has("MutatingWebhookConfiguration")


def test_release_namespace_is_always_excluded() -> None:
    manifest = render(sets=["injection.excludedNamespaces={kube-system}"])
    values = expressions(manifest.webhooks()["pod.sidecar-debug.io"]["namespaceSelector"])
    assert values["kubernetes.io/metadata.name"] == ("NotIn", EXCLUDED)


# ---------------------------------------------------------------- namespace gate


def test_namespace_gate_off_by_default() -> None:
    assert list(render().validating_webhooks()) == GUARD_ENTRIES + NAMESPACE_GUARD_ENTRIES


def test_namespace_gate() -> None:
    manifest = render([ci("namespace-gate")])
    vwc = manifest.one("ValidatingWebhookConfiguration", FULLNAME)
    *guard, hook = vwc["webhooks"]
    assert [entry["name"] for entry in guard] == GUARD_ENTRIES + NAMESPACE_GUARD_ENTRIES
    assert hook["name"] == "namespace-gate.sidecar-debug.io"
    assert hook["clientConfig"]["service"]["path"] == "/validate-namespace"
    assert hook["rules"][0]["resources"] == ["namespaces"]
    assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert hook["rules"][0]["scope"] == "Cluster"
    assert hook["failurePolicy"] == "Fail"
    assert hook["sideEffects"] == "None"
    # Only namespaces that carry the label key (old or new object) reach the webhook.
    assert expressions(hook["objectSelector"]) == {"debug": ("Exists", [])}
    assert manifest.has("ClusterRole", f"{FULLNAME}-profile-namespace-opt-in")
    assert vwc["metadata"]["annotations"] == {"sidecar-debug.io/ca-bundle": "managed-by-webhook"}
    assert "caBundle" not in hook["clientConfig"]


def test_namespace_gate_with_cert_manager() -> None:
    manifest = render([ci("certmanager"), ci("namespace-gate")])
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotations = manifest.one(kind, FULLNAME)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{FULLNAME}-serving"


# ---------------------------------------------------------------- the guard


def test_guard_entries_fail_closed_in_guarded_namespaces_only() -> None:
    """Issue 17: pods CREATE/UPDATE and ephemeral containers, after every mutation, Fail; each
    namespace part is sent once, unguarded namespaces never (an outage cannot block them)."""
    hooks = render().validating_webhooks()
    assert [expressions(hooks[name]["namespaceSelector"]) for name in GUARD_ENTRIES] == [
        GUARDED_OPT_IN, GUARDED_LABEL,
    ]  # fmt: skip
    for hook in (hooks[name] for name in GUARD_ENTRIES):
        assert hook["rules"] == GUARD_RULES
        assert hook["failurePolicy"] == "Fail"
        assert hook["timeoutSeconds"] == 10
        assert hook["sideEffects"] == "None" and hook["matchPolicy"] == "Equivalent"
        assert "objectSelector" not in hook  # pod labels are the pod creator's
        assert hook["clientConfig"]["service"] == {
            "name": FULLNAME, "namespace": NAMESPACE, "path": "/validate-pods", "port": 443,
        }  # fmt: skip
        assert "caBundle" not in hook["clientConfig"]


def test_the_guard_label_is_gated_and_an_outage_blocks_no_other_namespace() -> None:
    """The guard's namespace-label gate: namespaces whose old or new object is opted in, or
    carries the guard label, are sent (one entry each, disjoint); Fail; the grant's role."""
    manifest = render()
    hooks = manifest.validating_webhooks()
    selectors = [expressions(hooks[name]["objectSelector"]) for name in NAMESPACE_GUARD_ENTRIES]
    assert selectors == [
        {"debug": ("In", ["enabled"])},
        {"sidecar-debug.io/guard": ("Exists", []), "debug": ("NotIn", ["enabled"])},
    ]
    for name in NAMESPACE_GUARD_ENTRIES:
        hook = hooks[name]
        assert hook["rules"] == [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
             "resources": ["namespaces"], "scope": "Cluster"}]  # fmt: skip
        assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
        assert expressions(hook["namespaceSelector"]) == {
            "kubernetes.io/metadata.name": ("NotIn", EXCLUDED)}
        assert hook["clientConfig"]["service"]["path"] == "/validate-namespace-guard"
    role = manifest.one("ClusterRole", f"{FULLNAME}-profile-namespace-guard")
    assert role["rules"] == [{"apiGroups": ["sidecar-debug.io"], "resources": ["debugprofiles"],
                              "resourceNames": ["namespace-guard"], "verbs": ["use"]}]


def test_guard_settings_name_the_annotation_owners() -> None:
    config = render(sets=["guard.level=restricted", "guard.annotationOwners={ops}",
                          "guard.exemptions.usernames={system:serviceaccount:ci:deployer}"],
                    ).config()  # fmt: skip
    assert config["guardLevel"] == "restricted"
    assert config["annotationOwners"] == [
        f"system:serviceaccount:{NAMESPACE}:{FULLNAME}",
        f"system:serviceaccount:{NAMESPACE}:{FULLNAME}-controller",
        "ops",
    ]  # fmt: skip
    assert config["guardExemptUsernames"] == ["system:serviceaccount:ci:deployer"]
    no_controller = render(sets=["controller.enabled=false"]).config()
    assert no_controller["annotationOwners"] == [f"system:serviceaccount:{NAMESPACE}:{FULLNAME}"]


def test_guard_can_be_switched_off() -> None:
    manifest = render(sets=["guard.enabled=false"])
    assert not manifest.has("ValidatingWebhookConfiguration")
    gate = render([ci("namespace-gate")], sets=["guard.enabled=false"]).validating_webhooks()
    assert list(gate) == ["namespace-gate.sidecar-debug.io"]


@pytest.mark.parametrize("value", ["guard.level=privileged", "guard.timeoutSeconds=0",
                                   "guard.failurePolicy=Ignore"])
def test_guard_values_are_checked(value: str) -> None:
    assert "guard" in template_error(sets=[value])


# ---------------------------------------------------------------- RBAC


def rules_of(
    role: dict[str, Any],
) -> list[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]]:
    return [
        (
            tuple(r["apiGroups"]),
            tuple(r["resources"]),
            tuple(r.get("resourceNames", ())),
            tuple(r["verbs"]),
        )
        for r in role["rules"]
    ]


def test_no_wildcards_anywhere() -> None:
    for scenario in [None, *sorted(CI.glob("*.yaml"))]:
        manifest = render([scenario] if scenario else [])
        for role in manifest.all("ClusterRole") + manifest.all("Role"):
            for rule in role["rules"]:
                for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                    assert "*" not in rule.get(field, []), (role["metadata"]["name"], rule)


def test_webhook_roles_one_per_purpose_bound_to_its_service_account() -> None:
    """The rules themselves are compared with the code in test_chart_rbac.py."""
    manifest = render()
    purposes = ["access-review", "namespace-reader", "webhook-configuration"]
    for purpose in purposes:
        name = f"{FULLNAME}-{purpose}"
        assert manifest.one("ClusterRole", name)
        binding = manifest.one("ClusterRoleBinding", name)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name,
        }  # fmt: skip
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
        ]
    role = manifest.one("Role", f"{FULLNAME}-tls-secret")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert rules_of(role) == [(("",), ("secrets",), (f"{FULLNAME}-tls",), ("get", "update"))]
    binding = manifest.one("RoleBinding", f"{FULLNAME}-tls-secret")
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"]["name"] == f"{FULLNAME}-tls-secret"


@pytest.mark.parametrize("scenario", ["certmanager", "provided"])
def test_other_cert_modes_need_no_secret_or_webhook_configuration_rights(scenario: str) -> None:
    manifest = render([ci(scenario)])
    assert not manifest.has("Role", f"{FULLNAME}-tls-secret")
    assert not manifest.has("ClusterRole", f"{FULLNAME}-webhook-configuration")
    assert manifest.has("ClusterRole", f"{FULLNAME}-access-review")
    assert manifest.has("ClusterRole", f"{FULLNAME}-namespace-reader")


def test_profile_grant_cluster_roles() -> None:
    manifest = render()
    grants = {
        r["metadata"]["name"]: r
        for r in manifest.all("ClusterRole")
        if "-profile-" in r["metadata"]["name"]
    }
    assert sorted(grants) == sorted(
        f"{FULLNAME}-profile-{name}"
        for name in ("perf", "bcc", "full", "namespace-opt-in", "namespace-guard")
    )
    for name, role in grants.items():
        grant = name.rsplit("-profile-", 1)[1]
        assert role["rules"] == [
            {"apiGroups": ["sidecar-debug.io"], "resources": ["debugprofiles"],
             "resourceNames": [grant], "verbs": ["use"]}
        ]  # fmt: skip
    # The unprivileged profile needs no grant and gets no role.
    assert f"{FULLNAME}-profile-lttng" not in grants
    # The webhook names these roles in its deny messages: same prefix.
    prefix = manifest.config()["profileRolePrefix"]
    assert prefix == f"{FULLNAME}-profile-"
    assert all(name.startswith(prefix) for name in grants)


def test_release_named_like_the_chart_gets_the_documented_role_names() -> None:
    """`helm install sidecar-debug ...` gives the names docs and policies quote."""
    result = run_helm("template", "sidecar-debug", str(CHART), "-n", NAMESPACE)
    assert result.returncode == 0, result.stderr
    names = {
        doc["metadata"]["name"]
        for doc in yaml.safe_load_all(result.stdout)
        if doc and doc["kind"] == "ClusterRole"
    }
    assert "sidecar-debug-profile-full" in names
    assert "sidecar-debug-access-review" in names


def test_aggregated_view_role() -> None:
    role = render().one("ClusterRole", f"{FULLNAME}-view")
    assert role["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    for rule in role["rules"]:
        assert rule["verbs"] == ["get"]
        assert rule["resourceNames"]
    configmaps = next(r for r in role["rules"] if r["resources"] == ["configmaps"])
    assert configmaps["resourceNames"] == [
        f"{FULLNAME}-config", f"{FULLNAME}-profiles", f"{FULLNAME}-policies",
    ]  # fmt: skip


SETTINGS_CONFIGMAPS = [f"{FULLNAME}-config", f"{FULLNAME}-profiles", f"{FULLNAME}-policies"]


def test_settings_configmaps_are_labelled_and_point_at_each_other() -> None:
    """`sidecar-debug attach` finds the installed settings from the webhook configuration's
    annotation, then the profiles and policies from the config ConfigMap's annotations."""
    manifest = render()
    for name in SETTINGS_CONFIGMAPS:
        labels = manifest.one("ConfigMap", name)["metadata"]["labels"]
        assert labels["app.kubernetes.io/component"] == "settings"
        assert labels["app.kubernetes.io/part-of"] == "sidecar-debug"
        assert labels["app.kubernetes.io/instance"] == "sd"
    mwc = manifest.one("MutatingWebhookConfiguration", FULLNAME)
    namespace, name = mwc["metadata"]["annotations"]["sidecar-debug.io/settings"].split("/")
    config = manifest.one("ConfigMap", name)
    assert namespace == NAMESPACE
    assert config["metadata"]["annotations"] == {
        "sidecar-debug.io/profiles-configmap": f"{FULLNAME}-profiles",
        "sidecar-debug.io/policies-configmap": f"{FULLNAME}-policies",
    }
    assert yaml.safe_load(config["data"]["config.yaml"])["toolsetImage"]


def test_settings_are_readable_by_every_authenticated_user_by_default() -> None:
    manifest = render()
    role = manifest.one("Role", f"{FULLNAME}-settings-reader")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert rules_of(role) == [(("",), ("configmaps",), tuple(SETTINGS_CONFIGMAPS), ("get",))]
    binding = manifest.one("RoleBinding", f"{FULLNAME}-settings-reader")
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}
    ]
    reader = "rbac.settingsReaders[0]"
    narrowed = render(sets=[f"{reader}.kind=Group", f"{reader}.name=developers",
                            f"{reader}.apiGroup=rbac.authorization.k8s.io"])  # fmt: skip
    subjects = narrowed.one("RoleBinding", f"{FULLNAME}-settings-reader")["subjects"]
    assert [s["name"] for s in subjects] == ["developers"]
    off = render(sets=["rbac.settingsReaders=null"])
    assert not off.has("Role", f"{FULLNAME}-settings-reader")
    assert not off.has("RoleBinding", f"{FULLNAME}-settings-reader")


def test_rbac_can_be_left_to_the_platform_team() -> None:
    manifest = render(sets=["rbac.create=false"])
    for kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
        assert not manifest.has(kind), kind


# ---------------------------------------------------------------- Deployment


def test_deployment_ha_defaults() -> None:
    manifest = render()
    deployment = manifest.deployment()
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pdb = manifest.one("PodDisruptionBudget", FULLNAME)
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["minAvailable"] == 1
    selector = deployment["spec"]["selector"]["matchLabels"]
    template_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= template_labels.items(), "selector must match the pod labels"
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    spec = manifest.pod_spec()
    (spread,) = spec["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"  # a one-node cluster still schedules
    assert spread["labelSelector"]["matchLabels"] == selector
    anti = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    service = manifest.one("Service", FULLNAME)
    assert service["spec"]["selector"] == selector
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}
    ]


@pytest.mark.parametrize("scenario", [None, "custom-profiles", "ha-off"])
def test_selector_matches_pod_labels_with_extra_labels(scenario: str | None) -> None:
    sets = ["commonLabels.team=debug", "webhook.podLabels.tier=control"]
    deployment = render([ci(scenario)] if scenario else [], sets=sets).deployment()
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert labels["team"] == "debug" and labels["tier"] == "control"


def test_pdb_uses_v1beta1_on_kubernetes_1_20() -> None:
    pdb = render(kube_version=KUBE_OLD).one("PodDisruptionBudget", FULLNAME)
    assert pdb["apiVersion"] == "policy/v1beta1"


def test_ha_off() -> None:
    manifest = render([ci("ha-off")])
    assert manifest.deployment()["spec"]["replicas"] == 1
    assert not manifest.has("PodDisruptionBudget")
    # A single replica never gets a PDB, even when asked (it would block every drain).
    assert not render(sets=["webhook.replicaCount=1"]).has("PodDisruptionBudget")


def test_pdb_max_unavailable_wins() -> None:
    pdb = render([ci("failure-policy-fail")]).one("PodDisruptionBudget", FULLNAME)
    assert pdb["spec"] == {"selector": pdb["spec"]["selector"], "maxUnavailable": 1}


def test_container_runs_serve_with_the_config_file() -> None:
    container = render().container()
    assert container["command"] == [
        "sidecar-debug", "serve", "--config", "/etc/sidecar-debug/config.yaml",
    ]  # fmt: skip
    env = {e["name"]: e for e in container["env"]}
    assert env["SIDECAR_DEBUG_WEBHOOK_NAMESPACE"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}
    }
    assert container["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]


def test_probes_over_https() -> None:
    container = render().container()
    assert container["readinessProbe"]["httpGet"] == {
        "path": "/readyz",
        "port": "https",
        "scheme": "HTTPS",
    }
    assert container["livenessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": "https",
        "scheme": "HTTPS",
    }


def test_security_contexts() -> None:
    manifest = render()
    pod = manifest.pod_spec()["securityContext"]
    assert pod["runAsNonRoot"] is True
    assert pod["runAsUser"] == 10001
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    container = manifest.container()["securityContext"]
    assert container["readOnlyRootFilesystem"] is True
    assert container["allowPrivilegeEscalation"] is False
    assert container["runAsNonRoot"] is True
    assert container["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in container
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert key not in manifest.pod_spec()


def test_writable_paths_are_emptydirs() -> None:
    manifest = render()
    mounts = {m["mountPath"]: m for m in manifest.container()["volumeMounts"]}
    volumes = {v["name"]: v for v in manifest.pod_spec()["volumes"]}
    assert volumes[mounts["/tmp"]["name"]]["emptyDir"]["sizeLimit"] == "64Mi"
    assert volumes[mounts["/dev/shm"]["name"]]["emptyDir"]["medium"] == "Memory"
    config = mounts["/etc/sidecar-debug/config.yaml"]
    assert config["subPath"] == "config.yaml" and config["readOnly"] is True
    assert volumes[config["name"]]["configMap"]["name"] == f"{FULLNAME}-config"
    policies = mounts["/etc/sidecar-debug/policies"]
    assert "subPath" not in policies  # a directory mount, so edits reach the running webhook
    assert volumes[policies["name"]]["configMap"]["name"] == f"{FULLNAME}-policies"
    assert volumes[mounts["/etc/sidecar-debug/profiles"]["name"]]["configMap"]["name"] == (
        f"{FULLNAME}-profiles"
    )
    # Mode self: the Secret is read through the API, not mounted.
    assert "/etc/sidecar-debug/tls" not in mounts


def checksum(manifest: Manifest, key: str = "checksum/config") -> str:
    annotations: dict[str, str] = manifest.deployment()["spec"]["template"]["metadata"][
        "annotations"
    ]
    return annotations[key]


def test_config_changes_roll_the_pods() -> None:
    base = checksum(render())
    assert re.fullmatch("[0-9a-f]{64}", base)
    assert checksum(render()) == base
    assert checksum(render(sets=["sidecar.defaultProfile=lttng"])) != base
    assert checksum(render(sets=["policies.extra.team\\.yaml=kind: x"])) != base
    assert checksum(render([ci("custom-profiles")])) != base


def test_images_and_local_overrides() -> None:
    manifest = render(sets=[
        "webhook.image.repository=localhost/sidecar-debug/webhook",
        "webhook.image.pullPolicy=Never",
        "toolset.image.repository=localhost/sidecar-debug/toolset",
        "toolset.image.pullPolicy=Never",
    ])  # fmt: skip
    container = manifest.container()
    assert container["image"] == "localhost/sidecar-debug/webhook:0.1.0"
    assert container["imagePullPolicy"] == "Never"
    config = manifest.config()
    assert config["toolsetImage"] == "localhost/sidecar-debug/toolset:0.1.0"
    assert config["imagePullPolicy"] == "Never"
    test_pod = manifest.one("Pod")
    assert test_pod["spec"]["containers"][0]["image"] == container["image"]
    assert test_pod["spec"]["containers"][0]["imagePullPolicy"] == "Never"


def test_local_images_scenario_matches_the_documented_values() -> None:
    manifest = render([ci("local-images")])
    assert manifest.container()["image"] == "localhost/sidecar-debug/webhook:0.1.0"
    assert manifest.config()["toolsetImage"] == "localhost/sidecar-debug/toolset:0.1.0"
    readme = (CHART / "README.md").read_text()
    for flag in ("webhook.image.repository=localhost/sidecar-debug/webhook",
                 "webhook.image.pullPolicy=Never",
                 "toolset.image.repository=localhost/sidecar-debug/toolset",
                 "toolset.image.pullPolicy=Never"):  # fmt: skip
        assert flag in readme


def test_image_digest_and_tag() -> None:
    digest = "sha256:" + "ab" * 32
    manifest = render(sets=[f"webhook.image.digest={digest}", "toolset.image.tag=1.2.3"])
    assert manifest.container()["image"] == f"ghcr.io/sidecar-debug/webhook:0.1.0@{digest}"
    assert manifest.config()["toolsetImage"] == "ghcr.io/sidecar-debug/toolset:1.2.3"


# ---------------------------------------------------------------- settings: contract with config.py


def load_rendered_settings(manifest: Manifest, tmp_path: Path) -> Any:
    """Load the rendered config.yaml with the webhook's own loader, files mapped into tmp_path."""
    config = manifest.config()
    tmp_path.mkdir(parents=True, exist_ok=True)
    if "profilesFile" in config:
        profiles = manifest.one("ConfigMap", f"{FULLNAME}-profiles")["data"]["profiles.yaml"]
        (tmp_path / "profiles.yaml").write_text(profiles)
        config["profilesFile"] = str(tmp_path / "profiles.yaml")
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return load_settings(str(path), environ={"SIDECAR_DEBUG_WEBHOOK_NAMESPACE": NAMESPACE})


@pytest.mark.parametrize(
    "scenario", [None, *sorted(p.name.removesuffix("-values.yaml") for p in CI.glob("*.yaml"))]
)
def test_rendered_config_loads_in_the_webhook(scenario: str | None, tmp_path: Path) -> None:
    manifest = render([ci(scenario)] if scenario else [])
    settings = load_rendered_settings(manifest, tmp_path)
    assert settings.port == 8443
    assert settings.policy_path == "/etc/sidecar-debug/policies"
    assert settings.service_name == FULLNAME
    assert settings.webhook_configuration == FULLNAME
    assert settings.certificates_secret == manifest.config()["certificatesSecret"]
    for namespace in EXCLUDED:
        assert settings.namespace_excluded(namespace)


def test_default_settings(tmp_path: Path) -> None:
    manifest = render()
    config = manifest.config()
    assert config["certificatesMode"] == "self"
    assert config["certificatesSecret"] == f"{FULLNAME}-tls"
    assert config["toolsetImage"] == "ghcr.io/sidecar-debug/toolset:0.1.0"
    assert config["defaultProfile"] == "full"
    assert config["sidecarName"] == "debug-toolset"
    assert (config["workers"], config["threads"]) == (2, 4)
    assert config["excludedNamespaces"] == EXCLUDED
    assert "profilesFile" not in config  # the built-in profiles
    assert "tlsCertFile" not in config  # mode self: the webhook loads the Secret itself
    assert "webhookNamespace" not in config  # from the downward API
    settings = load_rendered_settings(manifest, tmp_path)
    assert settings.webhook_namespace == NAMESPACE
    assert sorted(settings.profiles) == ["bcc", "full", "lttng", "perf"]


@pytest.mark.parametrize(
    ("kube_version", "value", "expected"),
    [(KUBE_OLD, "auto", False), ("1.28.5", "auto", False), ("1.29.0", "auto", True),
     (KUBE_NEW, "auto", True), (KUBE_NEW, "false", False), (KUBE_NEW, "true", True)],
)  # fmt: skip
def test_native_sidecar(kube_version: str, value: str, expected: bool) -> None:
    config = render(sets=[f"sidecar.nativeSidecar={value}"], kube_version=kube_version).config()
    assert config["nativeSidecar"] is expected


def test_builtin_profiles_configmap_is_the_synced_file() -> None:
    cm = render().one("ConfigMap", f"{FULLNAME}-profiles")
    builtin = (CHART.parents[1] / "webhook" / "data" / "profiles.yaml").read_text()
    assert cm["data"]["profiles.yaml"] == builtin
    assert cm["metadata"]["annotations"]["sidecar-debug.io/profiles-source"] == "builtin"


def test_custom_profiles(tmp_path: Path) -> None:
    manifest = render([ci("custom-profiles")])
    config = manifest.config()
    assert config["profilesFile"] == "/etc/sidecar-debug/profiles/profiles.yaml"
    assert config["defaultProfile"] == "lttng"
    settings = load_rendered_settings(manifest, tmp_path)
    assert sorted(settings.profiles) == ["lttng", "perf-lite"]
    assert requires_grant(settings.profiles["perf-lite"])
    # The built-in runtime hints are kept unless `runtimes` replaces them.
    assert "node" in settings.profile_set.runtimes
    roles = {r["metadata"]["name"] for r in manifest.all("ClusterRole")}
    assert f"{FULLNAME}-profile-perf-lite" in roles
    assert f"{FULLNAME}-profile-full" not in roles


def test_privileged_custom_profile_without_a_role_is_warned_about() -> None:
    text = notes([ci("custom-profiles")], sets=["rbac.profileRoles=null"])
    assert 'profile "perf-lite" needs an RBAC grant' in text
    assert 'lttng" needs' not in text


def test_policies_configmap() -> None:
    cm = render().one("ConfigMap", f"{FULLNAME}-policies")
    assert sorted(cm["data"]) == ["default.yaml"]
    shipped = (CHART / "files" / "policies" / "default.yaml").read_text()
    assert cm["data"]["default.yaml"].strip() == shipped.strip()
    extra = render(sets=["policies.extra.team\\.yaml=apiVersion: x"]).one(
        "ConfigMap", f"{FULLNAME}-policies"
    )
    assert extra["data"]["team.yaml"].strip() == "apiVersion: x"


def test_shipped_examples_can_be_loaded() -> None:
    examples = sorted((CHART / "files" / "policies" / "examples").glob("*.yaml"))
    if not examples:
        pytest.skip("no example policies synced yet")
    files = ["default.yaml", *(f"examples/{p.name}" for p in examples)]
    cm = render(sets=["policies.files={" + ",".join(files) + "}"]).one(
        "ConfigMap", f"{FULLNAME}-policies"
    )
    assert sorted(cm["data"]) == sorted(f.replace("/", "-") for f in files)


# ---------------------------------------------------------------- certificates


def test_certmanager_mode() -> None:
    manifest = render([ci("certmanager")])
    certificate_name = f"{FULLNAME}-serving"
    for kind in ("MutatingWebhookConfiguration",):
        annotations = manifest.one(kind, FULLNAME)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{certificate_name}"
    serving = manifest.one("Certificate", certificate_name)
    assert serving["spec"]["secretName"] == f"{FULLNAME}-tls"
    assert serving["spec"]["dnsNames"] == [
        FULLNAME, f"{FULLNAME}.{NAMESPACE}", f"{FULLNAME}.{NAMESPACE}.svc",
        f"{FULLNAME}.{NAMESPACE}.svc.cluster.local",
    ]  # fmt: skip
    assert serving["spec"]["issuerRef"]["name"] == f"{FULLNAME}-ca"
    ca = manifest.one("Certificate", f"{FULLNAME}-ca")
    assert ca["spec"]["isCA"] is True
    assert manifest.one("Issuer", f"{FULLNAME}-ca")["spec"] == {
        "ca": {"secretName": f"{FULLNAME}-ca"}
    }
    assert manifest.one("Issuer", f"{FULLNAME}-selfsigned")["spec"] == {"selfSigned": {}}
    assert_tls_mounted(manifest, f"{FULLNAME}-tls")
    assert manifest.config()["certificatesMode"] == "certManager"


def test_certmanager_with_an_existing_issuer() -> None:
    manifest = render([ci("certmanager")], sets=[
        "certificates.certManager.issuerRef.name=corp-ca",
        "certificates.certManager.issuerRef.kind=ClusterIssuer",
    ])  # fmt: skip
    assert not manifest.has("Issuer")
    assert [c["metadata"]["name"] for c in manifest.all("Certificate")] == [f"{FULLNAME}-serving"]
    assert manifest.one("Certificate")["spec"]["issuerRef"] == {
        "name": "corp-ca",
        "kind": "ClusterIssuer",
    }


def test_provided_mode() -> None:
    manifest = render([ci("provided")])
    ca_bundle = yaml.safe_load((ci("provided")).read_text())["certificates"]["provided"]["caBundle"]
    for hook in manifest.webhooks().values():
        assert hook["clientConfig"]["caBundle"] == ca_bundle
    annotations = manifest.one("MutatingWebhookConfiguration")["metadata"]["annotations"]
    assert annotations == {"sidecar-debug.io/settings": f"{NAMESPACE}/{FULLNAME}-config"}
    assert_tls_mounted(manifest, "webhook-tls")
    assert re.fullmatch("[0-9a-f]{64}", checksum(manifest, "checksum/tls"))
    other = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nother\n-----END CERTIFICATE-----\n")
    rolled = render([ci("provided")], sets=[f"certificates.provided.caBundle={other.decode()}"])
    assert checksum(rolled, "checksum/tls") != checksum(manifest, "checksum/tls")


def test_provided_mode_with_namespace_gate_sets_both_ca_bundles() -> None:
    manifest = render([ci("provided"), ci("namespace-gate")])
    vwc = manifest.one("ValidatingWebhookConfiguration", FULLNAME)
    assert vwc["webhooks"][0]["clientConfig"]["caBundle"]


def assert_tls_mounted(manifest: Manifest, secret: str) -> None:
    mounts = {m["mountPath"]: m["name"] for m in manifest.container()["volumeMounts"]}
    volumes = {v["name"]: v for v in manifest.pod_spec()["volumes"]}
    assert volumes[mounts["/etc/sidecar-debug/tls"]]["secret"]["secretName"] == secret
    config = manifest.config()
    assert config["tlsCertFile"] == "/etc/sidecar-debug/tls/tls.crt"
    assert config["tlsKeyFile"] == "/etc/sidecar-debug/tls/tls.key"
    assert config["certificatesSecret"] == secret


def test_self_mode_leaves_ca_bundle_to_the_webhook() -> None:
    manifest = render()
    mwc = manifest.one("MutatingWebhookConfiguration", FULLNAME)
    assert mwc["metadata"]["annotations"] == {
        "sidecar-debug.io/ca-bundle": "managed-by-webhook",
        "sidecar-debug.io/settings": f"{NAMESPACE}/{FULLNAME}-config",
    }
    # The chart creates the Secret once (test_chart_rbac.py); its data is the webhook's.
    assert manifest.one("Secret")["metadata"]["annotations"]["helm.sh/hook"] == "pre-install"


# ---------------------------------------------------------------- helm test, NOTES


def test_helm_test_pod_checks_tls_with_the_secret_ca() -> None:
    pod = render().one("Pod", f"{FULLNAME}-test-tls")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (container,) = pod["spec"]["containers"]
    assert container["command"][:2] == ["python3", "-c"]
    script = container["command"][2]
    assert 'ssl.create_default_context(cafile="/etc/sidecar-debug/tls/ca.crt")' in script
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["WEBHOOK_URL"] == f"https://{FULLNAME}.{NAMESPACE}.svc:443/readyz"
    (volume,) = pod["spec"]["volumes"]
    assert volume["secret"]["secretName"] == f"{FULLNAME}-tls"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    compile(script, "helm-test", "exec")  # the embedded script is valid Python
    assert not render(sets=["tests.enabled=false"]).has("Pod")


def test_notes_explain_opt_in_exec_and_grants() -> None:
    text = notes()
    assert "kubectl label namespace NS debug=enabled" in text
    assert "exec -it POD -c debug-toolset" in text
    assert f"--clusterrole={FULLNAME}-profile-full" in text
    assert "WARNINGS" not in text


def test_notes_warn_about_risky_values() -> None:
    text = notes(
        sets=["webhook.failurePolicy=Fail", "webhook.replicaCount=1", "webhook.timeoutSeconds=3"]
    )
    assert "WARNINGS" in text
    assert "failurePolicy=Fail with a single replica" in text
    assert "SubjectAccessReview" in text


NAME_LABEL = "kubernetes.io/metadata.name"


@pytest.mark.parametrize("sets", [[], ["namespaceGate.enabled=true"], ["guard.enabled=false"]])
def test_below_1_21_no_entry_excludes_by_the_name_label(sets: list[str]) -> None:
    """Issue 24: on 1.20 anyone who may patch a namespace can label it
    kubernetes.io/metadata.name=kube-system. No entry may leave a namespace out by that label
    (the webhook skips the excluded namespaces by the request's name), and the name label's
    gate refuses forged values, for everyone, failing closed."""
    manifest = render(kube_version=KUBE_OLD, sets=sets)
    hooks = {**manifest.webhooks(), **(manifest.validating_webhooks() if manifest.has(
        "ValidatingWebhookConfiguration") else {})}
    assert hooks
    for name, hook in hooks.items():
        for selector in ("namespaceSelector", "objectSelector"):
            found = expressions(hook[selector]) if hook.get(selector) else {}
            if name == "namespace-name.sidecar-debug.io" and selector == "objectSelector":
                assert found == {NAME_LABEL: ("Exists", [])}
            else:
                assert NAME_LABEL not in found, (name, selector)
    # The webhook's own settings exclude them by name.
    assert manifest.config()["excludedNamespaces"] == EXCLUDED
    if manifest.has("ValidatingWebhookConfiguration"):
        gate = hooks["namespace-name.sidecar-debug.io"]
        assert gate["failurePolicy"] == "Fail" and gate["sideEffects"] == "None"
        assert gate["rules"] == [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
             "resources": ["namespaces"], "scope": "Cluster"}]  # fmt: skip
        assert gate["clientConfig"]["service"]["path"] == "/validate-namespace-name"
        assert "namespaceSelector" not in gate


def test_from_1_21_the_protected_name_label_excludes_and_needs_no_gate() -> None:
    hooks = {**render().webhooks(), **render().validating_webhooks()}
    assert "namespace-name.sidecar-debug.io" not in hooks
    for name, hook in hooks.items():
        assert expressions(hook["namespaceSelector"])[NAME_LABEL] == ("NotIn", EXCLUDED), name


def _warnings(tmp_path: Path, kube_version: str) -> str:
    """The warnings NOTES.txt prints (`sidecar-debug.validateValues`) for a Kubernetes version:
    `helm install --dry-run` takes no --kube-version, so a copy of the chart shows them in a
    ConfigMap rendered by `helm template`."""
    import shutil

    chart = tmp_path / "sidecar-debug"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "zz-warnings.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: warnings}\n"
        "data:\n  text: {{ include \"sidecar-debug.validateValues\" . | quote }}\n")
    result = run_helm("template", "sd", str(chart), "-n", NAMESPACE, "--kube-version",
                      kube_version, "--show-only", "templates/zz-warnings.yaml", chart=chart)
    assert result.returncode == 0, result.stderr
    return str(yaml.safe_load(result.stdout)["data"]["text"])


def test_old_kubernetes_notes_say_the_name_label_is_not_relied_on(tmp_path: Path) -> None:
    text = _warnings(tmp_path, KUBE_OLD)
    assert "neither sets nor protects the namespace label kubernetes.io/metadata.name" in text
    assert "no webhook entry of this chart selects by it" in text
    assert "refuses any value of that label other than the namespace's own name" in text
    assert "kubectl get namespaces -L kubernetes.io/metadata.name" in text
    assert "metadata.name" not in _warnings(tmp_path / "new", KUBE_NEW)


def test_settings_loader_rejects_what_the_chart_must_never_render(tmp_path: Path) -> None:
    """Sanity check of the contract test above: the loader is strict about unknown keys."""
    path = tmp_path / "config.yaml"
    path.write_text("toolsetImage: x\nnotASetting: 1\n")
    with pytest.raises(SettingsError, match="notASetting"):
        load_settings(str(path), environ={})


@pytest.mark.parametrize(
    "sets",
    [
        [],
        ["policies.files={default.yaml,examples/dev-and-prod.yaml}"],
        # strict-deny sets its own defaults: it replaces default.yaml rather than adding to it.
        ["policies.files={examples/strict-deny.yaml}"],
    ],
    ids=["default", "dev-and-prod", "strict-deny"],
)
def test_rendered_policies_load_in_the_webhook(sets: list[str], tmp_path: Path) -> None:
    """The policies ConfigMap, mounted as a directory, is a policy the webhook accepts."""
    from webhook.policy.loader import load_policy

    manifest = render(sets=sets)
    data = manifest.one("ConfigMap", f"{FULLNAME}-policies")["data"]
    for key, text in data.items():
        (tmp_path / key).write_text(text)
    settings = load_rendered_settings(manifest, tmp_path / "settings")
    load_policy(str(tmp_path), settings.profiles)


# ---------------------------------------------------------------- debuginfod

def test_debuginfod_servers_reach_the_settings_only_when_set() -> None:
    assert not any(key.startswith("debuginfod") for key in render().config())
    config = render(sets=["toolset.debuginfod.urls=https://debuginfod.example http://10.1.2.3:8002",
                          "toolset.debuginfod.timeoutSeconds=10"]).config()
    assert (config["debuginfodUrls"], config["debuginfodTimeoutSeconds"],
            config["debuginfodMaxBytes"]) == (
        "https://debuginfod.example http://10.1.2.3:8002", 10, 512 << 20)
    settings = load_settings(environ={}, overrides={
        "debuginfod_urls": config["debuginfodUrls"]})  # the webhook accepts what it renders
    assert settings.debuginfod_urls == config["debuginfodUrls"]


@pytest.mark.parametrize("value", ["toolset.debuginfod.urls=file:///etc",
                                   "toolset.debuginfod.urls=debuginfod.example",
                                   "toolset.debuginfod.timeoutSeconds=0",
                                   "toolset.debuginfod.maxSizeBytes=1000"])
def test_debuginfod_values_are_checked(value: str) -> None:
    assert "debuginfod" in template_error(sets=[value])
