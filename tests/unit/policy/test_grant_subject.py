"""Who must hold the grant (grantSubject), who never grants (nonGrantingIdentities), and a failed
namespace look-up that must stop at the undecidable rule (issue 12 items 11 and 13)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.unit.policy.test_policy import profile_name
from webhook.config import Settings, load_settings
from webhook.policy.engine import PolicyGate
from webhook.policy.loader import PolicyError, load_policy
from webhook.policy.model import BUILTIN_NON_GRANTING
from webhook.wire.identity import UserInfo

from .test_policy import (
    ALICE,
    REPLICASET_CONTROLLER,
    REPO,
    FakeCluster,
    make_gate,
    policy_text,
    request,
    write,
)

SA = "system:serviceaccount:dev:app"


@pytest.fixture
def settings() -> Settings:
    return load_settings(environ={})


ARGO: UserInfo = {
    "username": "system:serviceaccount:argo:argo",
    "groups": ["system:serviceaccounts", "system:serviceaccounts:argo", "system:authenticated"],
}


def _gate(settings: Settings, tmp_path: Path, cluster: FakeCluster, defaults: str) -> PolicyGate:
    return make_gate(settings, cluster, policy_text(defaults), tmp_path)


# ---------------------------------------------------------------------------------------------
# grantSubject: each value, with the service account's grant, the user's, both and neither


GRANTS = {
    "none": set(),
    "sa": {(SA, "full", "dev")},
    "user": {("alice", "full", "dev")},
    "both": {(SA, "full", "dev"), ("alice", "full", "dev")},
}


@pytest.mark.parametrize(
    ("subject", "holder", "reason", "grant"),
    [
        # either (the default, the PodSecurityPolicy model): one of the two is enough
        ("either", "sa", "granted-serviceaccount", "serviceaccount:dev:app"),
        ("either", "user", "granted-user", "user:alice"),
        ("either", "none", "no-rbac-grant", "unprivileged"),
        # serviceAccount: the requester's own grant does not count
        ("serviceAccount", "sa", "granted-serviceaccount", "serviceaccount:dev:app"),
        ("serviceAccount", "user", "no-rbac-grant", "unprivileged"),
        # user: the service account's grant does not count
        ("user", "user", "granted-user", "user:alice"),
        ("user", "sa", "no-rbac-grant", "unprivileged"),
        # both: each must hold it
        ("both", "both", "granted-both", "serviceaccount:dev:app,user:alice"),
        ("both", "sa", "no-rbac-grant", "unprivileged"),
        ("both", "user", "no-rbac-grant", "unprivileged"),
    ],
)
def test_grant_subject(
    settings: Settings, tmp_path: Path, subject: str, holder: str, reason: str, grant: str
) -> None:
    cluster = FakeCluster()
    cluster.grants |= GRANTS[holder]
    gate = _gate(settings, tmp_path, cluster, f"grantSubject: {subject}")
    result = gate.evaluate(request(settings, "full", user=ALICE))
    assert (result.reason, result.grant) == (reason, grant)
    assert profile_name(result) == ("full" if reason.startswith("granted") else "lttng")
    assert len(cluster.calls) <= 2
    if subject == "serviceAccount":
        assert [c.user for c in cluster.calls] == [SA]  # the user is never asked
    if subject == "user":
        assert [c.user for c in cluster.calls] == ["alice"]  # the service account never asked
    if reason == "no-rbac-grant" and subject != "either":
        assert f"(grantSubject {subject})" in result.message


def test_grant_subject_user_names_the_user_binding(settings: Settings, tmp_path: Path) -> None:
    cluster = FakeCluster()
    result = _gate(settings, tmp_path, cluster, "grantSubject: user").evaluate(
        request(settings, "full", user=ALICE)
    )
    assert "user 'alice' may not 'use' debugprofiles.sidecar-debug.io 'full'" in result.message
    assert (
        "kubectl create rolebinding sidecar-debug-full-alice "
        "--clusterrole=sidecar-debug-profile-full --user=alice -n dev" in result.message
    )
    assert "--serviceaccount" not in result.message


def test_grant_subject_both_names_what_is_missing(settings: Settings, tmp_path: Path) -> None:
    cluster = FakeCluster()
    cluster.grants |= GRANTS["sa"]
    result = _gate(settings, tmp_path, cluster, "grantSubject: both").evaluate(
        request(settings, "full", user=ALICE)
    )
    assert "user 'alice' may not" in result.message
    assert "service account dev:app may not" not in result.message
    assert "--user=alice" in result.message and "--serviceaccount" not in result.message


@pytest.mark.parametrize("subject", ["user", "both"])
def test_controller_made_pods_get_no_privilege_when_the_user_must_grant(
    settings: Settings, tmp_path: Path, subject: str
) -> None:
    """A Deployment's pod is created by the replicaset-controller, which never grants: with
    grantSubject user or both, such pods never get a privileged profile, even with the service
    account bound and a (mis)bound controller."""
    cluster = FakeCluster()
    cluster.grants |= {(SA, "full", "dev"), (REPLICASET_CONTROLLER["username"], "full", "dev")}
    result = _gate(settings, tmp_path, cluster, f"grantSubject: {subject}").evaluate(
        request(settings, "full")
    )
    assert (profile_name(result), result.reason) == ("lttng", "no-rbac-grant")
    assert REPLICASET_CONTROLLER["username"] not in [c.user for c in cluster.calls]
    assert "never grants" in result.message


def test_grant_subject_per_rule_overrides_defaults(settings: Settings, tmp_path: Path) -> None:
    rules = "- name: prod\n  match:\n    namespaces: [prod]\n  grantSubject: serviceAccount"
    cluster = FakeCluster()
    cluster.grants |= {("alice", "full", "dev"), ("alice", "full", "prod")}
    gate = make_gate(settings, cluster, policy_text("grantSubject: user", rules), tmp_path)
    assert gate.evaluate(request(settings, "full", user=ALICE)).reason == "granted-user"
    prod = gate.evaluate(request(settings, "full", namespace="prod", user=ALICE))
    assert prod.reason == "no-rbac-grant"


def test_ephemeral_containers_always_need_the_requesters_grant(
    settings: Settings, tmp_path: Path
) -> None:
    """grantSubject serviceAccount does not let the pod's service account grant an ephemeral
    container: whoever adds it must hold the grant."""
    cluster = FakeCluster()
    cluster.grants |= GRANTS["sa"]
    gate = _gate(settings, tmp_path, cluster, "grantSubject: serviceAccount")
    ask = dataclasses.replace(request(settings, "full", user=ALICE), ephemeral_container="dbg")
    result = gate.evaluate(ask)
    assert (result.allowed, result.reason) == (False, "no-rbac-grant")
    assert [c.user for c in cluster.calls] == ["alice"]


def test_unknown_grant_subject_is_a_policy_error(settings: Settings, tmp_path: Path) -> None:
    path = write(tmp_path / "p.yaml", policy_text("grantSubject: serviceaccount"))
    with pytest.raises(PolicyError) as error:
        load_policy(path, settings.profiles)
    assert "spec.defaults.grantSubject: 'serviceaccount' is not one of either, serviceAccount" in (
        str(error.value)
    )
    assert "did you mean 'serviceAccount'?" in str(error.value)


# ---------------------------------------------------------------------------------------------
# nonGrantingIdentities


def test_builtin_non_granting_identities_by_default(settings: Settings) -> None:
    policy = load_policy(None, settings.profiles)
    assert policy.defaults.non_granting == BUILTIN_NON_GRANTING
    assert policy.defaults.grant_subject == "either"


def test_argo_workflows_controller_never_grants_when_listed(
    settings: Settings, tmp_path: Path
) -> None:
    """Argo Workflows' controller creates a workflow's pods itself (outside kube-system): with
    it in nonGrantingIdentities, its grant no longer hands privileged sidecars to everyone who
    may submit a Workflow."""
    cluster = FakeCluster()
    cluster.grants.add((ARGO["username"], "full", "dev"))
    builtin = make_gate(settings, cluster).evaluate(request(settings, "full", user=ARGO))
    assert builtin.reason == "granted-user"  # today's list does not know Argo

    example = REPO / "policies/examples/argo-workflows.yaml"
    cluster = FakeCluster()
    cluster.grants.add((ARGO["username"], "full", "dev"))
    gate = make_gate(settings, cluster, example.read_text(), tmp_path)
    result = gate.evaluate(request(settings, "full", user=ARGO))
    assert (profile_name(result), result.reason) == ("lttng", "no-rbac-grant")
    assert [c.user for c in cluster.calls] == [SA]
    assert "system:serviceaccount:argo:argo, which never grants" in result.message
    # The example keeps the built-in entries: kube-system's controllers still never grant.
    cluster.grants.add((REPLICASET_CONTROLLER["username"], "full", "dev"))
    assert gate.evaluate(request(settings, "full")).reason == "no-rbac-grant"
    # And people still grant for the pods they create themselves.
    cluster.grants.add(("alice", "full", "dev"))
    assert gate.evaluate(request(settings, "full", user=ALICE)).reason == "granted-user"


@pytest.mark.parametrize(
    ("identities", "user", "never"),
    [
        ("{users: ['ci-*']}", {"username": "ci-runner"}, True),
        ("{users: ['ci-*']}", {"username": "alice"}, False),
        ("{groups: [robots]}", {"username": "bot", "groups": ["robots"]}, True),
        # users given, groups inherited (the built-in system:nodes)
        ("{users: []}", {"username": "x", "groups": ["system:nodes"]}, True),
        # an empty list takes the built-in users out: a kube-system account grants again
        ("{users: []}", {"username": "system:serviceaccount:kube-system:job-controller"}, False),
    ],
)
def test_non_granting_identities_replace_the_builtin_lists(
    settings: Settings, tmp_path: Path, identities: str, user: UserInfo, never: bool
) -> None:
    cluster = FakeCluster()
    cluster.grants.add((user["username"], "full", "dev"))
    gate = _gate(settings, tmp_path, cluster, f"nonGrantingIdentities: {identities}")
    result = gate.evaluate(request(settings, "full", user=user))
    assert result.reason == ("no-rbac-grant" if never else "granted-user")


def test_non_granting_identities_apply_to_ephemeral_requesters(
    settings: Settings, tmp_path: Path
) -> None:
    cluster = FakeCluster()
    cluster.grants.add(("ci-runner", "full", "dev"))
    gate = _gate(settings, tmp_path, cluster, "nonGrantingIdentities: {users: ['ci-*']}")
    user: UserInfo = {"username": "ci-runner"}
    ask = dataclasses.replace(request(settings, "full", user=user), ephemeral_container="dbg")
    result = gate.evaluate(ask)
    assert (result.allowed, result.reason) == (False, "no-rbac-grant")
    assert cluster.calls == []


def test_non_granting_identities_schema(settings: Settings, tmp_path: Path) -> None:
    path = write(tmp_path / "p.yaml", policy_text("nonGrantingIdentities: {user: [a]}"))
    with pytest.raises(PolicyError) as error:
        load_policy(path, settings.profiles)
    assert "spec.defaults.nonGrantingIdentities.user: unknown field (did you mean 'users'?)" in (
        str(error.value)
    )


# ---------------------------------------------------------------------------------------------
# Item 11: a failed namespace look-up stops at the rule it could not decide


LOOKUP_RULES = """\
- name: production
  match:
    namespaceSelector:
      matchLabels: {environment: production}
  allowedProfiles: [lttng]
  mode: deny
  maxSessionDuration: 1h
- name: everything-else
  match: {}
  allowedProfiles: ["*"]
  mode: downgrade
"""


def test_failed_namespace_lookup_does_not_fall_through_to_a_looser_rule(
    settings: Settings, tmp_path: Path
) -> None:
    cluster = FakeCluster()
    cluster.fail_namespace = True
    cluster.grant_sa("shop", "app", "full")
    gate = make_gate(settings, cluster, policy_text(rules=LOOKUP_RULES), tmp_path)
    explanation = gate.explain(request(settings, "full", namespace="shop"))
    # Before: the catch-all rule applied (downgrade, pod admitted with lttng). Now the rule that
    # could not be decided applies, with its restrictive settings: mode deny.
    assert explanation.rule == "production"
    result = explanation.result
    assert (result.allowed, profile_name(result), result.reason) == (
        False,
        None,
        "namespace-lookup-failed",
    )
    assert "namespace 'shop' could not be read" in result.message
    assert "mode deny in policy rule 'production'" in result.message
    assert cluster.calls == []  # no RBAC question: nothing privileged can come of it
    assert any("no later rule is tried" in line for line in explanation.trace)
    # An unprivileged profile gets the undecided rule's settings too (its maxSessionDuration).
    lttng = gate.explain(request(settings, "lttng", namespace="shop"))
    assert (lttng.rule, profile_name(lttng.result)) == ("production", "lttng")
    assert "sidecar-debug.io/overdue-after" in lttng.result.annotations


def test_failed_namespace_lookup_refuses_a_profile_the_later_rule_would_allow(
    settings: Settings, tmp_path: Path
) -> None:
    """The undecided rule allows only lttng: perf (which the catch-all allows and RBAC
    grants) is not given on the strength of the later rule."""
    cluster = FakeCluster()
    cluster.fail_namespace = True
    cluster.grant_sa("shop", "app", "perf")
    rules = LOOKUP_RULES.replace("mode: deny", "mode: skip")
    gate = make_gate(settings, cluster, policy_text(rules=rules), tmp_path)
    result = gate.evaluate(request(settings, "perf", namespace="shop"))
    assert (result.allowed, profile_name(result)) == (True, None)
    assert result.reason == "namespace-lookup-failed"


def test_namespace_that_can_be_read_still_falls_through(
    settings: Settings, tmp_path: Path
) -> None:
    cluster = FakeCluster()
    cluster.labels["shop"] = {"environment": "staging"}
    cluster.grant_sa("shop", "app", "full")
    gate = make_gate(settings, cluster, policy_text(rules=LOOKUP_RULES), tmp_path)
    explanation = gate.explain(request(settings, "full", namespace="shop"))
    assert (explanation.rule, explanation.result.reason) == (
        "everything-else",
        "granted-serviceaccount",
    )
