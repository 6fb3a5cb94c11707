"""The policy gate's shared core: which debug profile a pod may get, decided by policy files AND
RBAC.

A privileged sidecar with host mounts is root on the node, so injecting one is a privilege
grant. A profile that needs a grant (webhook.guard.privilege.requires_grant) is injected only
when the matching policy rule allows it AND a SubjectAccessReview says the pod's service account
(or the requesting user, unless that user is a controller) may `use` debugprofiles/<profile> in
the pod's namespace.
When the gate says no, the rule's mode decides: downgrade (default), skip or deny.

Policy files (kind DebugPolicy, see docs/policy.md and webhook/data/policy.schema.json) are
validated with errors naming file, line, path and problem; the first matching rule wins, and no
match means the file's `defaults`. Changed files are reloaded on the fly; a broken change keeps
the last good policy. With no policy file at all the built-in default applies.

This module holds what every question shares: the cluster look-ups and their caches, the rule
matching and the grant judgement (policy rule, then RBAC). Each kind of caller asks in a module
of its own, all of them the one gate (webhook.policy.engine.PolicyGate, load_policy_engine):
- webhook.policy.decision: which profile a pod (or an ephemeral container) gets, and why
  (the mutating webhook, offline `inject`'s pipeline, `sidecar-debug policy explain`);
- webhook.policy.guard_questions: whether a toolset already in a pod is held now, the guard
  level and image of its rule (the guard, webhook.admission.guard);
- webhook.policy.namespace_labels: who may put a namespace's opt-in or guard labels
  (webhook.admission.namespace);
- webhook.policy.rule_lookup: which rule covers a namespace and service account (session
  expiry, schedules, the results service and the CLI's session listing).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from webhook.config import Settings
from webhook.guard.privilege import profile_reasons, requires_grant
from webhook.kube.access import (
    AccessCheck,
    ClusterAPI,
    ClusterAPIError,
    TTLCache,
    service_account_check,
    user_check,
)
from webhook.policy.api import PolicyRequest
from webhook.policy.loader import PolicyStore
from webhook.policy.model import BUILTIN_NON_GRANTING, Identities, Policy, Rule, RuleSettings
from webhook.profiles import Profile
from webhook.wire import constants

# The gate's one logger (its records keep the name webhook.policy.gate, whichever module of the
# gate logs).
log = logging.getLogger(__name__)

# How long a failed namespace look-up is remembered (at most sarCacheSeconds).
NAMESPACE_FAILURE_CACHE_SECONDS = 2.0


Reason = Literal[
    "unprivileged",
    "granted-serviceaccount",
    "granted-user",
    "granted-both",
    "not-allowed-by-policy",
    "no-rbac-grant",
    "rbac-check-failed",
    "namespace-lookup-failed",
    "image-not-allowed",
    "policy-error",
    "standby",
]


def is_controller_identity(
    user: Mapping[str, Any], identities: Identities = BUILTIN_NON_GRANTING
) -> bool:
    """True for an identity that never grants: by default kube-system service accounts, nodes
    and the control plane's own users (a policy's nonGrantingIdentities replace the list)."""
    return identities.match(user) is not None


@dataclass
class Refusal:
    """Why the gate says no: a Reason code, the detail, and the RBAC binding that would fix it."""

    reason: Reason
    detail: str
    hint: str = ""


class GateCore:
    """The gate's state (settings, policy store, cluster, caches) and the steps every question
    takes: match the rule, judge the grant."""

    def __init__(
        self,
        settings: Settings,
        store: PolicyStore,
        cluster: ClusterAPI,
        *,
        role_prefix: str = constants.DEFAULT_ROLE_PREFIX,
        wall_clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.store = store
        self.cluster = cluster
        self.role_prefix = role_prefix
        self._now = wall_clock
        cache_ttl = settings.sar_cache_seconds
        self._access_cache = TTLCache(ttl=cache_ttl, clock=monotonic)
        self._namespace_cache = TTLCache(ttl=cache_ttl, clock=monotonic)
        # A failed look-up is remembered briefly: while the API cannot be reached, reviews that
        # need the namespace refuse privilege at once instead of each waiting sarTimeoutSeconds.
        self._namespace_failures = TTLCache(
            ttl=min(cache_ttl, NAMESPACE_FAILURE_CACHE_SECONDS), clock=monotonic
        )

    # -- cluster look-ups ---------------------------------------------------------------------

    def _access(self, check: AccessCheck, trace: list[str], counter: list[int]) -> bool | str:
        """True/False from RBAC, or an error text (never a grant)."""
        key = (
            check.user,
            tuple(sorted(check.groups)),
            check.extra,
            check.namespace,
            check.resource_name,
        )
        hit, verdict = self._access_cache.get(key)
        if hit:
            trace.append(f"RBAC: {check.user} may use {check.resource_name}: {verdict} (cached)")
            return bool(verdict)
        counter[0] += 1
        try:
            allowed = self.cluster.access_allowed(check, self.settings.sar_timeout_seconds)
        except ClusterAPIError as exc:
            trace.append(f"RBAC: SubjectAccessReview for {check.user} failed: {exc}")
            log.warning(
                "SubjectAccessReview failed (no grant): %s", exc, extra={"event": "sar-failed"}
            )
            return str(exc)
        except Exception as exc:  # a bug or an unexpected client error must not grant either
            trace.append(f"RBAC: SubjectAccessReview for {check.user} failed: {exc!r}")
            log.exception("SubjectAccessReview raised unexpectedly (no grant)")
            return repr(exc)
        self._access_cache.put(key, allowed)
        trace.append(
            f"RBAC: {check.user} may use {check.resource_name} in {check.namespace}: {allowed}"
        )
        return allowed

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        """The namespace's labels (cached briefly); raises ClusterAPIError."""
        hit, labels = self._namespace_cache.get(namespace)
        if hit:
            return cast(Mapping[str, str], labels)
        failed, error = self._namespace_failures.get(namespace)
        if failed:
            ttl = self._namespace_failures.ttl
            raise ClusterAPIError(f"{error} (failed less than {ttl:g} s ago)")
        try:
            fetched = dict(
                self.cluster.namespace_labels(namespace, self.settings.sar_timeout_seconds)
            )
        except ClusterAPIError as exc:
            self._namespace_failures.put(namespace, str(exc))
            raise
        except Exception as exc:
            failure = ClusterAPIError(f"namespace {namespace}: {exc!r}")
            self._namespace_failures.put(namespace, str(failure))
            raise failure from exc
        # Kubernetes >= 1.21 sets this label itself; older clusters get it here so selectors
        # written for current clusters behave the same. Always the name: on < 1.21 anyone who
        # may label the namespace can write the label (issue 24), and a rule selecting
        # `kubernetes.io/metadata.name` means the namespace of that name.
        fetched[constants.LABEL_NAMESPACE_NAME] = namespace
        self._namespace_cache.put(namespace, fetched)
        return fetched

    # -- rules and grants ---------------------------------------------------------------------

    def _match(
        self, policy: Policy, namespace: str, service_account: str, trace: list[str]
    ) -> tuple[Rule | None, bool]:
        """The first matching rule, and whether it is only a rule that could not be decided.

        A namespaceSelector rule whose namespace cannot be read ends the search: a later rule
        may be looser (a catch-all allowing every profile), so falling through to it would let
        an unreachable API widen what a pod gets. The undecided rule applies, and nothing that
        needs a grant is given under it (reason namespace-lookup-failed)."""
        for rule in policy.rules:
            if rule.namespaces and not any(
                fnmatch.fnmatchcase(namespace, g) for g in rule.namespaces
            ):
                continue
            if rule.service_accounts and not any(
                fnmatch.fnmatchcase(service_account, g) for g in rule.service_accounts
            ):
                continue
            if rule.namespace_selector is not None:
                try:
                    labels = self.namespace_labels(namespace)
                except ClusterAPIError as exc:
                    trace.append(
                        f"rule {rule.name!r} ({rule.where}): namespace labels unknown "
                        f"({exc}); this rule is applied as if it matched (no later rule is "
                        "tried) and profiles that need a grant are refused"
                    )
                    return rule, True
                if not rule.namespace_selector.matches(labels):
                    continue
            trace.append(
                f"rule {rule.name!r} ({rule.where}) matches namespace {namespace!r}, "
                f"service account {service_account!r}"
            )
            return rule, False
        trace.append(f"no rule matches; the defaults ({policy.defaults_where}) apply")
        return None, False

    def _judge(
        self,
        request: PolicyRequest,
        rule: RuleSettings,
        uncertain: bool,
        label: str,
        trace: list[str],
        calls: list[int],
    ) -> tuple[Reason, str] | Refusal:
        """Does the request hold its profile: (reason, grant), or why not."""
        profile = request.requested_profile
        if uncertain and requires_grant(profile):
            # The rule that could not be decided applies (its mode, its defaultProfile), and
            # nothing that needs a grant is given while it is undecided.
            return Refusal(
                "namespace-lookup-failed",
                f"profile {profile.name!r} needs an RBAC grant and namespace "
                f"{request.namespace!r} could not be read to match the policy",
            )
        if not rule.allows_profile(profile.name):
            return Refusal(
                "not-allowed-by-policy",
                f"profile {profile.name!r} is not allowed by {label} "
                f"(allowed: {rule.describe_profiles()})",
            )
        if not requires_grant(profile):
            trace.append(f"profile {profile.name!r} needs no grant")
            return "unprivileged", "unprivileged"
        return self._check_grant(request, profile, rule, trace, calls)

    def _check_grant(
        self,
        request: PolicyRequest,
        profile: Profile,
        rule: RuleSettings,
        trace: list[str],
        calls: list[int],
    ) -> tuple[Reason, str] | Refusal:
        """At most two SubjectAccessReviews: the pod's service account and/or the requesting
        user, as the rule's grantSubject says (either, serviceAccount, user, both)."""
        if request.ephemeral_container is not None:
            return self._check_requester_grant(request, profile, rule, trace, calls)
        namespace, sa, subject = request.namespace, request.service_account, rule.grant_subject
        user = request.user
        username = str(user.get("username", ""))
        sa_check = service_account_check(namespace, sa, profile.name)
        sa_name = f"service account {namespace}:{sa}"
        errors: list[str] = []
        sa_verdict: bool | str | None = None  # None: not asked
        if subject != "user":
            sa_verdict = self._access(sa_check, trace, calls)
            if sa_verdict is True and subject in ("either", "serviceAccount"):
                return "granted-serviceaccount", f"serviceaccount:{namespace}:{sa}"
            if isinstance(sa_verdict, str):
                errors.append(sa_verdict)
        user_verdict: bool | str | None = None
        never = rule.non_granting.match(user) if username else "anonymous"
        if subject != "serviceAccount":
            if never is not None:
                trace.append(
                    f"requester {username!r} never grants ({never} in nonGrantingIdentities)"
                    if username
                    else "the request names no user: it never grants"
                )
            elif username == sa_check.user and sa_verdict is not None:
                user_verdict = sa_verdict  # the same subject: asked once
            else:
                user_verdict = self._access(
                    user_check(user, namespace, profile.name), trace, calls
                )
                if isinstance(user_verdict, str):
                    errors.append(user_verdict)
            if user_verdict is True and subject in ("either", "user"):
                return "granted-user", f"user:{username}"
            if user_verdict is True and sa_verdict is True:  # both
                return "granted-both", f"serviceaccount:{namespace}:{sa},user:{username}"
        needs = "; ".join(profile_reasons(profile))
        what = (
            f"'use' debugprofiles.{constants.RBAC_GROUP} {profile.name!r} in namespace "
            f"{namespace!r}"
        )
        sa_hint = self._binding_hint(profile.name, namespace, f"{namespace}:{sa}", sa)
        user_hint = (
            self._binding_hint(profile.name, namespace, username)
            if username and never is None
            else ""
        )
        if subject == "either":
            who = f"{sa_name} may not"
            if user_verdict is not None and username != sa_check.user:
                who = f"neither {sa_name} nor user {username!r} may"
            hint = sa_hint
        elif subject == "serviceAccount":
            who, hint = f"{sa_name} may not", sa_hint
        elif subject == "user":
            who, hint = f"user {username or '(none)'!r} may not", user_hint
        else:
            lacking = [
                name
                for name, verdict in ((sa_name, sa_verdict), (f"user {username!r}", user_verdict))
                if verdict is not True
            ]
            who = f"both {sa_name} and user {username!r} must hold the grant; " + (
                " and ".join(lacking) + " may not"
            )
            hint = " and ".join(
                h
                for h, verdict in ((sa_hint, sa_verdict), (user_hint, user_verdict))
                if h and verdict is not True
            )
        if errors:
            return Refusal(
                "rbac-check-failed",
                f"profile {profile.name!r} needs an RBAC grant ({needs}) and the "
                f"SubjectAccessReview failed ({errors[0]}); no grant assumed",
                hint,
            )
        detail = f"profile {profile.name!r} needs an RBAC grant ({needs}): {who} {what}"
        if subject != "either":
            detail += f" (grantSubject {subject})"
        if never is not None and subject != "serviceAccount" and username:
            detail += (
                f" (the pod was created by {username}, which never grants: "
                + (
                    "bind the pod's service account)"
                    if subject == "either"
                    else "with this grantSubject such pods get no privileged profile)"
                )
            )
        return Refusal("no-rbac-grant", detail, hint)

    def _binding_hint(
        self, profile: str, namespace: str, subject: str, sa: str | None = None
    ) -> str:
        """The `kubectl create rolebinding` that grants `profile` to a service account
        (`sa` given: subject is NS:SA) or to a user (a service account's username included)."""
        prefix = "system:serviceaccount:"
        if sa is not None:
            flag, suffix = f"--serviceaccount={subject}", sa
        elif subject.startswith(prefix) and subject.count(":") == 3:
            flag, suffix = f"--serviceaccount={subject.removeprefix(prefix)}", dns_safe(subject)
        else:
            flag, suffix = f"--user={subject}", dns_safe(subject)
        return (
            f"kubectl create rolebinding sidecar-debug-{profile}-{suffix} "
            f"--clusterrole={self.role_prefix}{profile} {flag} -n {namespace}"
        )

    def _check_requester_grant(
        self,
        request: PolicyRequest,
        profile: Profile,
        rule: RuleSettings,
        trace: list[str],
        calls: list[int],
    ) -> tuple[Reason, str] | Refusal:
        """One SubjectAccessReview, for the requester only: whoever adds an ephemeral container
        to a running pod must hold the grant themselves (whatever the rule's grantSubject)."""
        namespace, user = request.namespace, request.user
        username = str(user.get("username", ""))
        needs = "; ".join(profile_reasons(profile))
        what = (
            f"profile {profile.name!r} needs an RBAC grant ({needs}) held by whoever adds the "
            f"ephemeral container {request.ephemeral_container!r}"
        )
        never = rule.non_granting.match(user) if username else "anonymous"
        if never is not None:
            trace.append(f"requester {username!r} never grants ({never})")
            return Refusal(
                "no-rbac-grant", f"{what}; {username or 'an anonymous requester'} never grants"
            )
        verdict = self._access(user_check(user, namespace, profile.name), trace, calls)
        if verdict is True:
            return "granted-user", f"user:{username}"
        hint = self._binding_hint(profile.name, namespace, username)
        if isinstance(verdict, str):
            return Refusal(
                "rbac-check-failed",
                f"{what}, and the SubjectAccessReview failed ({verdict}); no grant assumed",
                hint,
            )
        return Refusal(
            "no-rbac-grant",
            f"{what}: user {username!r} may not 'use' debugprofiles.{constants.RBAC_GROUP} "
            f"{profile.name!r} in namespace {namespace!r} (the pod's service account does not "
            "grant an ephemeral container)",
            hint,
        )


GRANT_TEXT: dict[str, str] = {
    "unprivileged": "needs no grant",
    "granted-serviceaccount": "granted to the pod's service account",
    "granted-user": "granted to the requesting user",
    "granted-both": "granted to both the pod's service account and the requesting user",
}


def grant_suffix(grant: str) -> str:
    return "" if grant == "unprivileged" else f": {grant}"


def dns_safe(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:40] or "user"

