"""The policy gate: every decision path, RBAC budget, caching, fail-closed, reload, file errors."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from webhook.config import Settings, load_settings
from webhook.guard.privilege import pod_security_refusal
from webhook.kube.access import AccessCheck, ClusterAPIError
from webhook.policy.api import PolicyRequest, PolicyResult
from webhook.policy.engine import PolicyGate, load_policy_engine
from webhook.policy.gate import is_controller_identity
from webhook.policy.loader import BUILTIN_POLICY, PolicyError, PolicyStore, load_policy
from webhook.policy.model import parse_duration
from webhook.profiles import Profile
from webhook.wire import constants
from webhook.wire.identity import UserInfo

REPO = Path(__file__).resolve().parents[3]
NOW = dt.datetime(2026, 12, 2, 12, 0, 0, tzinfo=dt.UTC)
REPLICASET_CONTROLLER: UserInfo = {
    "username": "system:serviceaccount:kube-system:replicaset-controller",
    "groups": [
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
        "system:authenticated",
    ],
}
ALICE: UserInfo = {"username": "alice", "groups": ["devs", "system:authenticated"], "uid": "a-1"}


class FakeCluster:
    """Grants by (user, resource_name, namespace); records every call; can fail or time out."""

    def __init__(self) -> None:
        self.grants: set[tuple[str, str, str]] = set()
        self.labels: dict[str, dict[str, str]] = {}
        self.calls: list[AccessCheck] = []
        self.namespace_reads: list[str] = []
        self.timeouts: list[float] = []
        self.fail_access = False
        self.fail_namespace = False

    def grant_sa(self, namespace: str, sa: str, profile: str) -> None:
        self.grants.add((f"system:serviceaccount:{namespace}:{sa}", profile, namespace))

    def access_allowed(self, check: AccessCheck, timeout: float) -> bool:
        self.calls.append(check)
        self.timeouts.append(timeout)
        if self.fail_access:
            raise ClusterAPIError("POST subjectaccessreviews: read timed out")
        return (check.user, check.resource_name, check.namespace) in self.grants

    def namespace_labels(self, name: str, timeout: float) -> Mapping[str, str]:
        self.namespace_reads.append(name)
        if self.fail_namespace:
            raise ClusterAPIError(f"GET namespace {name}: connection refused")
        return self.labels.get(name, {})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def settings() -> Settings:
    return load_settings(environ={})


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def policy_text(defaults: str = "", rules: str = "") -> str:
    text = "apiVersion: sidecar-debug.io/v1alpha1\nkind: DebugPolicy\nspec:\n"
    if defaults:
        text += "  defaults:\n" + "".join(f"    {line}\n" for line in defaults.splitlines())
    text += "  rules:\n" + ("".join(f"    {line}\n" for line in rules.splitlines()) or "")
    if not rules:
        text = text.replace("  rules:\n", "  rules: []\n")
    return text


def make_gate(
    settings: Settings,
    cluster: FakeCluster,
    policy: str | None = None,
    tmp_path: Path | None = None,
    clock: Clock | None = None,
) -> PolicyGate:
    path = None
    if policy is not None:
        assert tmp_path is not None
        path = write(tmp_path / "policy.yaml", policy)
    settings = dataclasses.replace(settings, policy_path=path)
    clock = clock or Clock()
    store = PolicyStore(path, settings.profiles, clock=clock)
    return PolicyGate(settings, store, cluster, wall_clock=lambda: NOW, monotonic=clock)


def request(
    settings: Settings,
    profile: str = "full",
    namespace: str = "dev",
    sa: str = "app",
    user: UserInfo | None = None,
    image: str | None = None,
) -> PolicyRequest:
    return PolicyRequest(
        namespace=namespace,
        service_account=sa,
        user=user if user is not None else REPLICASET_CONTROLLER,
        requested_profile=settings.profiles[profile],
        requested_image=image,
    )


def profile_name(result: PolicyResult) -> str | None:
    """The name of the profile a result gives (PolicyResult.profile is the Profile)."""
    return result.profile.name if result.profile is not None else None


# ---------------------------------------------------------------------------------------------
# Default policy (no policy file): RBAC-gated privileged profiles, downgrade to lttng


def test_unprivileged_profile_needs_no_rbac_call(settings: Settings) -> None:
    cluster = FakeCluster()
    result = make_gate(settings, cluster).evaluate(request(settings, "lttng"))
    assert (profile_name(result), result.allowed, result.reason, result.grant) == (
        "lttng",
        True,
        "unprivileged",
        "unprivileged",
    )
    assert cluster.calls == []


def test_service_account_grant(settings: Settings) -> None:
    cluster = FakeCluster()
    cluster.grant_sa("dev", "app", "full")
    result = make_gate(settings, cluster).evaluate(request(settings, "full"))
    assert (profile_name(result), result.allowed, result.reason) == (
        "full",
        True,
        "granted-serviceaccount",
    )
    assert result.grant == "serviceaccount:dev:app"
    check = cluster.calls[0]
    assert check.user == "system:serviceaccount:dev:app"
    assert check.groups == (
        "system:serviceaccounts",
        "system:serviceaccounts:dev",
        "system:authenticated",
    )
    body = check.body()["spec"]["resourceAttributes"]
    assert body == {
        "namespace": "dev",
        "verb": "use",
        "group": "sidecar-debug.io",
        "resource": "debugprofiles",
        "name": "full",
    }
    assert len(cluster.calls) == 1  # the user is not asked once the service account grants


def test_user_grant_when_service_account_has_none(settings: Settings) -> None:
    cluster = FakeCluster()
    cluster.grants.add(("alice", "perf", "dev"))
    result = make_gate(settings, cluster).evaluate(request(settings, "perf", user=ALICE))
    assert (profile_name(result), result.reason, result.grant) == (
        "perf", "granted-user", "user:alice")
    assert [c.user for c in cluster.calls] == ["system:serviceaccount:dev:app", "alice"]
    assert cluster.calls[1].groups == ("devs", "system:authenticated")
    assert cluster.calls[1].uid == "a-1"


def test_no_grant_downgrades_to_lttng_with_the_rolebinding_hint(settings: Settings) -> None:
    cluster = FakeCluster()
    result = make_gate(settings, cluster).evaluate(request(settings, "full", user=ALICE))
    assert (profile_name(result), result.allowed, result.reason, result.grant) == (
        "lttng",
        True,
        "no-rbac-grant",
        "unprivileged",
    )
    assert (
        "kubectl create rolebinding sidecar-debug-full-app --clusterrole=sidecar-debug-profile-full "  # noqa: E501
        "--serviceaccount=dev:app -n dev" in result.message
    )
    assert "instead of 'full'" in result.message
    assert len(cluster.calls) == 2


@pytest.mark.parametrize(
    "username",
    [
        "system:serviceaccount:kube-system:replicaset-controller",
        "system:serviceaccount:kube-system:job-controller",
        "system:serviceaccount:kube-system:daemon-set-controller",
        "system:serviceaccount:kube-system:statefulset-controller",
        "system:serviceaccount:kube-system:cronjob-controller",
        "system:serviceaccount:kube-system:anything",
        "system:kube-controller-manager",
        "system:node:worker-1",
    ],
)
def test_controller_identities_never_grant(settings: Settings, username: str) -> None:
    cluster = FakeCluster()
    cluster.grants.add((username, "full", "dev"))  # even a (mis)bound controller must not grant
    controller: UserInfo = {"username": username, "groups": ["system:authenticated"]}
    assert is_controller_identity(controller)
    result = make_gate(settings, cluster).evaluate(request(settings, "full", user=controller))
    assert (profile_name(result), result.reason) == ("lttng", "no-rbac-grant")
    assert [c.user for c in cluster.calls] == ["system:serviceaccount:dev:app"]
    assert "never grants" in result.message and "bind the pod's service account" in result.message


def test_ordinary_users_are_not_controllers() -> None:
    assert not is_controller_identity(ALICE)
    assert not is_controller_identity({"username": "system:serviceaccount:dev:deployer"})
    assert is_controller_identity({"username": "x", "groups": ["system:nodes"]})


def test_user_who_is_the_service_account_is_asked_once(settings: Settings) -> None:
    cluster = FakeCluster()
    itself: UserInfo = {"username": "system:serviceaccount:dev:app", "groups": []}
    make_gate(settings, cluster).evaluate(request(settings, "full", user=itself))
    assert len(cluster.calls) == 1


def test_at_most_two_access_reviews_and_the_configured_timeout(settings: Settings) -> None:
    cluster = FakeCluster()
    settings = dataclasses.replace(settings, sar_timeout_seconds=1.5)
    gate = make_gate(settings, cluster)
    explanation = gate.explain(request(settings, "bcc", user=ALICE))
    assert explanation.access_checks == 2 and len(cluster.calls) == 2
    assert cluster.timeouts == [1.5, 1.5]


def test_results_are_cached_per_subject_namespace_and_profile(settings: Settings) -> None:
    cluster = FakeCluster()
    clock = Clock()
    cluster.grant_sa("dev", "app", "full")
    gate = make_gate(settings, cluster, clock=clock)
    for _ in range(5):
        assert profile_name(gate.evaluate(request(settings, "full"))) == "full"
    assert len(cluster.calls) == 1
    gate.evaluate(request(settings, "full", namespace="other"))
    gate.evaluate(request(settings, "bcc"))
    assert len(cluster.calls) == 3
    # A revoked grant takes effect once the cache entry expires (sarCacheSeconds).
    cluster.grants.clear()
    assert profile_name(gate.evaluate(request(settings, "full"))) == "full"
    clock.now += settings.sar_cache_seconds + 0.1
    assert profile_name(gate.evaluate(request(settings, "full"))) == "lttng"


def test_denials_are_cached_too_and_expire(settings: Settings) -> None:
    cluster = FakeCluster()
    clock = Clock()
    gate = make_gate(settings, cluster, clock=clock)
    assert profile_name(gate.evaluate(request(settings, "full"))) == "lttng"
    cluster.grant_sa("dev", "app", "full")
    assert profile_name(gate.evaluate(request(settings, "full"))) == "lttng"
    assert len(cluster.calls) == 1
    clock.now += settings.sar_cache_seconds + 0.1
    assert profile_name(gate.evaluate(request(settings, "full"))) == "full"


def test_apiserver_error_fails_closed_and_is_not_cached(settings: Settings) -> None:
    cluster = FakeCluster()
    cluster.grant_sa("dev", "app", "full")
    cluster.fail_access = True
    gate = make_gate(settings, cluster)
    result = gate.evaluate(request(settings, "full", user=ALICE))
    assert (profile_name(result), result.allowed, result.reason) == (
        "lttng", True, "rbac-check-failed")
    assert "read timed out" in result.message
    cluster.fail_access = False
    assert gate.evaluate(request(settings, "full")).reason == "granted-serviceaccount"


def test_unexpected_exception_never_grants(settings: Settings) -> None:
    class Broken(FakeCluster):
        def access_allowed(self, check: AccessCheck, timeout: float) -> bool:
            raise RuntimeError("bug")

    result = make_gate(settings, Broken()).evaluate(request(settings, "full"))
    assert (profile_name(result), result.reason) == ("lttng", "rbac-check-failed")


def test_service_account_error_then_user_grant_grants(settings: Settings) -> None:
    class FirstFails(FakeCluster):
        def access_allowed(self, check: AccessCheck, timeout: float) -> bool:
            if check.user.startswith("system:serviceaccount:"):
                raise ClusterAPIError("timeout")
            return True

    result = make_gate(settings, FirstFails()).evaluate(request(settings, "full", user=ALICE))
    assert result.reason == "granted-user"


# ---------------------------------------------------------------------------------------------
# Rules, modes, images, sessions


DEV_PROD = (REPO / "policies/examples/dev-and-prod.yaml").read_text()


def test_first_matching_rule_wins_and_no_match_uses_defaults(
    settings: Settings, tmp_path: Path
) -> None:
    cluster = FakeCluster()
    cluster.grant_sa("dev", "app", "full")
    cluster.grant_sa("payments-prod", "app", "full")
    cluster.grant_sa("elsewhere", "app", "full")
    gate = make_gate(settings, cluster, DEV_PROD, tmp_path)
    dev = gate.explain(request(settings, "full", namespace="dev"))
    assert (dev.rule, profile_name(dev.result)) == ("dev-full", "full")
    prod = gate.explain(request(settings, "full", namespace="payments-prod"))
    assert (prod.rule, profile_name(prod.result), prod.result.reason) == (
        "prod-by-name",
        "lttng",
        "not-allowed-by-policy",
    )
    assert "allowed: lttng" in prod.result.message
    # No rule matches: the built-in defaults (every profile, RBAC-gated) apply.
    other = gate.explain(request(settings, "full", namespace="elsewhere"))
    assert (other.rule, profile_name(other.result)) == ("defaults", "full")
    # Policy refusals cost no RBAC call: only the dev and the other pod were checked.
    assert len(cluster.calls) == 2


def test_namespace_selector_rule(settings: Settings, tmp_path: Path) -> None:
    cluster = FakeCluster()
    cluster.labels["shop"] = {"environment": "production"}
    cluster.grant_sa("shop", "app", "full")
    gate = make_gate(settings, cluster, DEV_PROD, tmp_path)
    explanation = gate.explain(request(settings, "full", namespace="shop"))
    assert (explanation.rule, profile_name(explanation.result)) == (
        "production-lttng-only", "lttng")
    gate.explain(request(settings, "full", namespace="shop"))
    assert cluster.namespace_reads == ["shop"]  # cached


def test_selector_matches_synthetic_namespace_name_label(
    settings: Settings, tmp_path: Path
) -> None:
    rules = (
        "- name: by-label\n  match:\n    namespaceSelector:\n      matchExpressions:\n"
        "        - {key: kubernetes.io/metadata.name, operator: In, values: [team-a]}\n"
        "  allowedProfiles: []\n  mode: skip"
    )
    cluster = FakeCluster()
    result = make_gate(settings, cluster, policy_text(rules=rules), tmp_path).evaluate(
        request(settings, "lttng", namespace="team-a")
    )
    assert (profile_name(result), result.reason) == (None, "not-allowed-by-policy")


def test_namespace_lookup_failure_refuses_privilege_but_not_the_pod(
    settings: Settings, tmp_path: Path
) -> None:
    cluster = FakeCluster()
    cluster.fail_namespace = True
    cluster.grant_sa("shop", "app", "full")
    rules = (
        "- name: prod\n  match:\n    namespaceSelector:\n      matchLabels: {env: prod}\n"
        "  allowedProfiles: [lttng]"
    )
    gate = make_gate(settings, cluster, policy_text(rules=rules), tmp_path)
    result = gate.evaluate(request(settings, "full", namespace="shop"))
    assert (result.allowed, result.reason) == (True, "namespace-lookup-failed")
    assert profile_name(result) == "lttng"
    assert cluster.calls == []  # nothing privileged can come of it, so RBAC is not asked
    # Unprivileged profiles still work when the namespace cannot be read.
    assert gate.evaluate(request(settings, "lttng", namespace="shop")).reason == "unprivileged"


def test_a_failed_namespace_lookup_is_remembered_briefly(
    settings: Settings, tmp_path: Path
) -> None:
    """With the API unreachable, reviews must not each wait sarTimeoutSeconds for it."""
    cluster = FakeCluster()
    cluster.fail_namespace = True
    clock = Clock()
    rules = "- name: prod\n  match:\n    namespaceSelector:\n      matchLabels: {env: prod}\n"
    gate = make_gate(settings, cluster, policy_text(rules=rules), tmp_path, clock)
    first = gate.explain(request(settings, "full", namespace="shop"))
    again = gate.explain(request(settings, "full", namespace="shop"))
    assert cluster.namespace_reads == ["shop"]
    assert first.result.reason == again.result.reason == "namespace-lookup-failed"
    assert any("failed less than 2 s ago" in line for line in again.trace)
    cluster.fail_namespace = False
    cluster.labels["shop"] = {"env": "prod"}
    clock.now += 2.5
    assert gate.evaluate(request(settings, "lttng", namespace="shop")).reason != (
        "namespace-lookup-failed"
    )
    assert cluster.namespace_reads == ["shop", "shop"]


def test_service_account_match(settings: Settings, tmp_path: Path) -> None:
    rules = (
        "- name: profiler-only\n  match:\n    serviceAccounts: [profiler, 'sre-*']\n"
        "  allowedProfiles: [full, lttng]"
    )
    defaults = "allowedProfiles: [lttng]"
    cluster = FakeCluster()
    cluster.grant_sa("dev", "sre-bot", "full")
    cluster.grant_sa("dev", "app", "full")
    gate = make_gate(settings, cluster, policy_text(defaults, rules), tmp_path)
    assert profile_name(gate.evaluate(request(settings, "full", sa="sre-bot"))) == "full"
    assert gate.evaluate(request(settings, "full", sa="app")).reason == "not-allowed-by-policy"


@pytest.mark.parametrize(
    ("mode", "profile", "allowed", "reason"),
    [
        ("downgrade", "lttng", True, "no-rbac-grant"),
        ("skip", None, True, "no-rbac-grant"),
        ("deny", None, False, "no-rbac-grant"),
    ],
)
def test_modes_when_rbac_says_no(
    settings: Settings, tmp_path: Path, mode: str, profile: str | None, allowed: bool, reason: str
) -> None:
    gate = make_gate(settings, FakeCluster(), policy_text(f"mode: {mode}"), tmp_path)
    result = gate.evaluate(request(settings, "full"))
    assert (profile_name(result), result.allowed, result.reason) == (profile, allowed, reason)
    if mode == "deny":
        assert (
            "denied" in result.message
            and "'use' debugprofiles.sidecar-debug.io 'full'" in result.message
        )
        assert (
            "kubectl create rolebinding sidecar-debug-full-app --clusterrole="
            "sidecar-debug-profile-full --serviceaccount=dev:app -n dev" in result.message
        )
        assert result.grant == "none" and not result.annotations


def test_deny_when_policy_says_no(settings: Settings, tmp_path: Path) -> None:
    gate = make_gate(
        settings, FakeCluster(), policy_text("allowedProfiles: [lttng]\nmode: deny"), tmp_path
    )
    result = gate.evaluate(request(settings, "perf"))
    assert (result.allowed, result.reason) == (False, "not-allowed-by-policy")
    assert "kubectl" not in result.message  # RBAC would not help: the policy says no


def test_downgrade_with_nothing_unprivileged_allowed_injects_nothing(
    settings: Settings, tmp_path: Path
) -> None:
    gate = make_gate(settings, FakeCluster(), policy_text("allowedProfiles: [full]"), tmp_path)
    result = gate.evaluate(request(settings, "full"))
    assert (profile_name(result), result.allowed) == (None, True)
    assert "no unprivileged profile is allowed" in result.message


def test_role_prefix_is_configurable(settings: Settings) -> None:
    cluster = FakeCluster()
    gate = load_policy_engine(settings, cluster, role_prefix="dbg-profile-")
    assert "--clusterrole=dbg-profile-full " in gate.evaluate(request(settings, "full")).message


def test_allowed_image_is_honoured(settings: Settings, tmp_path: Path) -> None:
    gate = make_gate(
        settings,
        FakeCluster(),
        policy_text("allowedImages: ['registry.example/tools:*']"),
        tmp_path,
    )
    result = gate.evaluate(request(settings, "lttng", image="registry.example/tools:1.2"))
    assert result.image == "registry.example/tools:1.2" and not result.warnings


def test_configured_image_is_always_fine(settings: Settings, tmp_path: Path) -> None:
    gate = make_gate(settings, FakeCluster(), policy_text("mode: deny"), tmp_path)
    result = gate.evaluate(request(settings, "lttng", image=settings.toolset_image))
    assert result.allowed and result.image is None


@pytest.mark.parametrize(
    ("mode", "profile", "allowed", "reason"),
    [
        ("downgrade", "lttng", True, "unprivileged"),
        ("skip", None, True, "image-not-allowed"),
        ("deny", None, False, "image-not-allowed"),
    ],
)
def test_image_not_allowed(
    settings: Settings, tmp_path: Path, mode: str, profile: str | None, allowed: bool, reason: str
) -> None:
    gate = make_gate(settings, FakeCluster(), policy_text(f"mode: {mode}"), tmp_path)
    result = gate.evaluate(request(settings, "lttng", image="evil.example/root:1"))
    assert (profile_name(result), result.allowed, result.reason, result.image) == (
        profile,
        allowed,
        reason,
        None,
    )
    if mode == "downgrade":
        assert any("evil.example/root:1" in w and "configured image" in w for w in result.warnings)
    else:
        assert "evil.example/root:1" in result.message


def test_max_session_duration_marks_the_pod(settings: Settings, tmp_path: Path) -> None:
    gate = make_gate(settings, FakeCluster(), policy_text("maxSessionDuration: 1h30m"), tmp_path)
    result = gate.evaluate(request(settings, "lttng"))
    assert result.annotations == {constants.ANNOTATION_OVERDUE_AFTER: "2026-12-02T13:30:00Z"}
    assert "overdue for removal after 1h30m" in result.message
    # Nothing injected, nothing to mark.
    skip = make_gate(
        settings, FakeCluster(), policy_text("maxSessionDuration: 1h\nmode: skip"), tmp_path
    )
    assert skip.evaluate(request(settings, "full")).annotations == {}


def test_default_profile_is_the_downgrade_target(settings: Settings, tmp_path: Path) -> None:
    extra = {
        "name": "lttng-lite",
        "description": "x",
        "techniques": ["lttng"],
        "securityContext": {"allowPrivilegeEscalation": False},
        "sharedVolumes": [{"name": "sidecar-debug-lttng", "mountPath": "/var/run/lttng"}],
    }
    document = yaml.safe_load((REPO / "webhook/data/profiles.yaml").read_text())
    document["profiles"].append(extra)
    profiles_file = write(tmp_path / "profiles.yaml", yaml.safe_dump(document))
    custom = load_settings(environ={"SIDECAR_DEBUG_PROFILES_FILE": profiles_file})
    gate = make_gate(custom, FakeCluster(), policy_text("defaultProfile: lttng-lite"), tmp_path)
    assert profile_name(gate.evaluate(request(custom, "full"))) == "lttng-lite"
    gate = make_gate(custom, FakeCluster(), None)
    assert profile_name(gate.evaluate(request(custom, "full"))) == "lttng"  # strongest unprivileged


def test_pod_security_warning_for_privileged_result(settings: Settings) -> None:
    cluster = FakeCluster()
    cluster.grant_sa("dev", "app", "full")
    cluster.labels["dev"] = {"pod-security.kubernetes.io/enforce": "baseline"}
    result = make_gate(settings, cluster).evaluate(request(settings, "full"))
    assert profile_name(result) == "full"
    assert any(
        "enforces Pod Security 'baseline'" in w and "=privileged" in w for w in result.warnings
    )
    lttng = make_gate(settings, cluster).evaluate(request(settings, "lttng"))
    assert lttng.warnings == ()


def test_a_privileged_sidecar_in_an_unguarded_namespace_is_warned_about(
        settings: Settings) -> None:
    """Pod opt-in where neither debug=enabled nor the guard label is set: the guard does not see
    that namespace, so the webhook says to label it (issue 17)."""
    cluster = FakeCluster()
    cluster.grant_sa("dev", "app", "full")
    result = make_gate(settings, cluster).evaluate(request(settings, "full"))
    assert any("is not guarded by sidecar-debug" in w and "sidecar-debug.io/guard=baseline" in w
               for w in result.warnings), result.warnings
    for labels in ({"debug": "enabled"}, {"sidecar-debug.io/guard": "baseline"}):
        cluster.labels["dev"] = labels
        guarded = make_gate(settings, cluster).evaluate(request(settings, "full"))
        assert not any("not guarded" in w for w in guarded.warnings)


def _violations(profile: Profile, level: str) -> str:
    return pod_security_refusal(
        profile.security_context, {h.name: h.path for h in profile.host_paths}, level,
        "debug-toolset")


def test_pod_security_levels() -> None:
    profiles = load_settings(environ={}).profiles
    assert _violations(profiles["full"], "privileged") == ""
    assert 'privileged (container "debug-toolset"' in _violations(profiles["full"], "baseline")
    assert _violations(profiles["lttng"], "baseline") == ""
    assert "runAsUser=0" in _violations(profiles["lttng"], "restricted")
    assert "non-default capabilities" in _violations(profiles["perf"], "baseline")


def test_the_restricted_warning_speaks_pod_securitys_words(settings: Settings) -> None:
    """Issue 17: a restricted namespace's warning for `lttng` quotes what Pod Security would
    answer (not "runs as root"), naming the sidecar container as injected."""
    cluster = FakeCluster()
    cluster.labels["dev"] = {"pod-security.kubernetes.io/enforce": "restricted"}
    result = make_gate(settings, cluster).evaluate(request(settings, "lttng"))
    [warning] = result.warnings
    assert (
        "which rejects the debug sidecar of profile 'lttng' (it violates PodSecurity "
        '"restricted:latest (v1.37)": runAsNonRoot != true (container "debug-toolset" must not set '
        "securityContext.runAsNonRoot=false), runAsUser=0"
    ) in warning, warning
    assert "runs as root" not in warning


def test_namespace_lookup_failure_only_drops_the_warning(settings: Settings) -> None:
    cluster = FakeCluster()
    cluster.grant_sa("dev", "app", "full")
    cluster.fail_namespace = True
    result = make_gate(settings, cluster).evaluate(request(settings, "full"))
    assert (profile_name(result), result.warnings) == ("full", ())


# ---------------------------------------------------------------------------------------------
# Files: validation with file and line, reload


def test_shipped_policies_are_valid(settings: Settings) -> None:
    for path in [
        REPO / "policies/default.yaml",
        *sorted((REPO / "policies/examples").glob("*.yaml")),
    ]:
        load_policy(str(path), settings.profiles)


def test_default_file_equals_the_builtin_policy(settings: Settings) -> None:
    shipped = load_policy(str(REPO / "policies/default.yaml"), settings.profiles)
    builtin = load_policy(None, settings.profiles)
    assert (shipped.rules, shipped.defaults) == (builtin.rules, builtin.defaults)
    assert (
        yaml.safe_load(BUILTIN_POLICY)["spec"]
        == yaml.safe_load((REPO / "policies/default.yaml").read_text())["spec"]
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            policy_text("mode: downgrad"),
            "policy.yaml:5: spec.defaults.mode: 'downgrad' is not one of downgrade, skip, deny "
            "(did you mean 'downgrade'?)",
        ),
        (
            policy_text(rules="- name: a\n  match: {}\n  allowedProfile: [full]"),
            "policy.yaml:7: spec.rules[0].allowedProfile: unknown field (did you mean 'allowedProfiles'?)",  # noqa: E501
        ),
        (
            policy_text(rules="- name: a\n  match: {}\n  allowedProfiles: [ful]"),
            "policy.yaml:7: spec.rules[0].allowedProfiles[0]: unknown profile 'ful' (did you mean 'full'?)",  # noqa: E501
        ),
        (
            policy_text(rules="- name: a\n  allowedProfiles: [full]"),
            "policy.yaml:5: spec.rules[0]: missing required field 'match'",
        ),
        (
            policy_text("maxSessionDuration: 8 hours"),
            "policy.yaml:5: spec.defaults.maxSessionDuration: '8 hours' is not a duration",
        ),
        (
            policy_text("defaultProfile: full"),
            "policy.yaml:5: spec.defaults.defaultProfile: defaultProfile 'full' needs an RBAC grant",  # noqa: E501
        ),
        (
            policy_text("allowedProfiles: [perf]\ndefaultProfile: lttng"),
            "policy.yaml:6: spec.defaults.defaultProfile: defaultProfile 'lttng' is not in allowedProfiles",  # noqa: E501
        ),
        (
            policy_text(
                rules="- name: a\n  match:\n    namespaceSelector:\n      matchExpressions:\n"
                "        - {key: a, operator: In}"
            ),
            "policy.yaml:9: spec.rules[0].match.namespaceSelector.matchExpressions[0]: operator In needs values",  # noqa: E501
        ),
        (
            policy_text(rules="- name: a\n  match: {}\n- name: a\n  match: {}"),
            "policy.yaml:7: spec.rules[1].name: duplicate rule name 'a' (first at policy.yaml:5)",
        ),
        (
            policy_text().replace("DebugPolicy", "DebugPolicyy"),
            "policy.yaml:2: kind: 'DebugPolicyy' is not one of DebugPolicy",
        ),
        (
            "apiVersion: sidecar-debug.io/v1alpha1\nkind: DebugPolicy\nspec:\n  rules: [\n",
            "policy.yaml:5: (document): not valid YAML",
        ),
        ("apiVersion: a\napiVersion: b\n", "policy.yaml:2: apiVersion: duplicate key"),
        ("", "policy.yaml: (document): empty file"),
    ],
)
def test_file_errors_name_file_line_path_and_problem(
    settings: Settings, tmp_path: Path, text: str, expected: str
) -> None:
    path = write(tmp_path / "policy.yaml", text)
    with pytest.raises(PolicyError) as excinfo:
        load_policy(path, settings.profiles)
    message = str(excinfo.value).replace(str(tmp_path) + os.sep, "")
    assert expected in message, message


def test_start_up_with_a_broken_file_is_fatal(settings: Settings, tmp_path: Path) -> None:
    path = write(tmp_path / "policy.yaml", policy_text("mode: nope"))
    with pytest.raises(PolicyError, match=r"policy.yaml:5: spec.defaults.mode"):
        load_policy_engine(dataclasses.replace(settings, policy_path=path), FakeCluster())


def test_directory_of_files_in_name_order(settings: Settings, tmp_path: Path) -> None:
    write(
        tmp_path / "20-dev.yaml",
        policy_text(rules="- name: dev\n  match: {namespaces: ['*']}\n  allowedProfiles: [perf]"),
    )
    write(
        tmp_path / "10-prod.yaml",
        policy_text(
            rules="- name: prod\n  match: {namespaces: [prod]}\n  allowedProfiles: [lttng]"
        ),
    )
    write(tmp_path / "notes.txt", "ignored")
    (tmp_path / "..data").mkdir()  # a ConfigMap volume's internals are skipped
    policy = load_policy(str(tmp_path), settings.profiles)
    assert [r.name for r in policy.rules] == ["prod", "dev"]
    write(tmp_path / "30-more.yaml", policy_text("mode: skip"))
    write(tmp_path / "40-more.yaml", policy_text("mode: deny"))
    with pytest.raises(
        PolicyError, match="40-more.yaml:4: spec.defaults: defaults are already set in"
    ):
        load_policy(str(tmp_path), settings.profiles)


def test_reload_on_change_and_keep_last_good_on_error(
    settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A changed file is read in a thread of its own: the review that notices the change is
    answered with the policy in force, the next ones with the new policy."""
    clock = Clock()
    gate = make_gate(settings, FakeCluster(), policy_text("mode: skip"), tmp_path, clock=clock)
    path = tmp_path / "policy.yaml"
    assert profile_name(gate.evaluate(request(settings, "full"))) is None  # skip

    def reloaded_after(seconds: float) -> None:
        clock.now += seconds
        gate.evaluate(request(settings, "full"))  # starts the reload, does not wait for it
        gate.store.wait_for_reload(10)

    path.write_text(policy_text("mode: deny"))
    os.utime(path, ns=(1, 10**18))
    assert gate.evaluate(request(settings, "full")).allowed  # not re-read before the interval
    reloaded_after(3)
    assert not gate.evaluate(request(settings, "full")).allowed  # deny now

    failed = metric("sidecar_debug_policy_reloads_total", {"outcome": "failed"})
    path.write_text(policy_text("mode: bogus"))
    os.utime(path, ns=(1, 2 * 10**18))
    with caplog.at_level("ERROR", logger="webhook.policy"):
        reloaded_after(3)
        assert not gate.evaluate(request(settings, "full")).allowed  # last good policy stays
        reloaded_after(3)
    errors = [r for r in caplog.records if "policy reload failed" in r.getMessage()]
    assert len(errors) == 1 and "policy.yaml:5: spec.defaults.mode" in errors[0].getMessage()
    assert gate.store.last_error is not None
    assert metric("sidecar_debug_policy_reloads_total", {"outcome": "failed"}) == failed + 1

    path.write_text(policy_text("mode: downgrade"))
    os.utime(path, ns=(1, 3 * 10**18))
    reloaded_after(3)
    assert profile_name(gate.evaluate(request(settings, "full"))) == "lttng"
    assert gate.store.last_error is None


def metric(name: str, labels: dict[str, str]) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_load_policy_engine_without_a_path_uses_the_builtin_policy(settings: Settings) -> None:
    gate = load_policy_engine(settings, FakeCluster())
    result = gate.evaluate(request(settings, "full"))
    assert (profile_name(result), result.reason) == ("lttng", "no-rbac-grant")


def test_parse_duration() -> None:
    assert parse_duration("1d2h3m4s") == dt.timedelta(days=1, hours=2, minutes=3, seconds=4)


def test_default_and_dev_prod_example_compose_in_one_directory(
    settings: Settings, tmp_path: Path
) -> None:
    # As the chart mounts them: `policies.files: [default.yaml, examples/dev-and-prod.yaml]`.
    write(tmp_path / "default.yaml", (REPO / "policies/default.yaml").read_text())
    write(tmp_path / "examples-dev-and-prod.yaml", DEV_PROD)
    policy = load_policy(str(tmp_path), settings.profiles)
    assert policy.defaults.mode == "downgrade" and "default.yaml" in policy.defaults_where
    assert [r.name for r in policy.rules] == ["production-lttng-only", "prod-by-name", "dev-full"]


def test_a_bug_in_the_gate_injects_nothing(settings: Settings, tmp_path: Path) -> None:
    class Exploding(FakeCluster):
        def namespace_labels(self, name: str, timeout: float) -> Mapping[str, str]:
            return None  # type: ignore[return-value]  # dict(None) raises TypeError inside

    cluster = Exploding()
    cluster.grant_sa("dev", "app", "full")
    gate = make_gate(settings, cluster)
    gate._pod_security_warnings = None  # type: ignore[assignment,method-assign]  # a bug on purpose
    result = gate.evaluate(request(settings, "full"))
    assert (profile_name(result), result.allowed, result.reason) == (None, True, "policy-error")
