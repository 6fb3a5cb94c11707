"""The policy gate: which debug profile a pod may get, decided by policy files AND RBAC.

A privileged sidecar with host mounts is root on the node, so injecting one is a privilege
grant. A profile that needs a grant (webhook.guard.privilege.requires_grant) is injected only
when the matching policy rule allows it AND a SubjectAccessReview says the pod's service account
(or the requesting user, unless that user is a controller) may `use` debugprofiles/<profile> in
the pod's namespace.
When the gate says no, the rule's mode decides: downgrade (default), skip or deny.

Policy files (kind DebugPolicy, see docs/policy.md and webhook/data/policy.schema.json) are
validated with errors naming file, line, path and problem; the first matching rule wins, and no
match means the file's `defaults`. Changed files are reloaded on the fly; a broken change keeps
the last good policy. With no policy file at all the built-in default below applies.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from webhook import constants
from webhook.config import Settings
from webhook.guard.privilege import (
    pod_security_refusal,
    profile_reasons,
    requires_grant,
    strongest_unprivileged,
)
from webhook.kube.access import (
    AccessCheck,
    ClusterAPI,
    ClusterAPIError,
    KubernetesClusterAPI,
    TTLCache,
    service_account_check,
    user_check,
)
from webhook.policy.api import PolicyRequest, PolicyResult
from webhook.policy.loader import RELOAD_CHECK_SECONDS, PolicyStore
from webhook.policy.model import (
    BUILTIN_NON_GRANTING,
    Identities,
    Policy,
    Rule,
    RuleSettings,
    format_duration,
)
from webhook.profiles import Profile
from webhook.rfc3339 import format_time

log = logging.getLogger(__name__)


# The chart names its grant ClusterRoles `<fullname>-profile-<name>`; default release name.


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
class Explanation:
    """A decision plus the steps that led to it (for `policy explain` and debug logs)."""

    result: PolicyResult
    rule: str  # matched rule name, or "defaults"
    rule_where: str
    trace: list[str] = field(default_factory=list)
    access_checks: int = 0  # SubjectAccessReview calls actually made (cache hits excluded)


@dataclass(frozen=True)
class GrantVerdict:
    """check_grant's answer: whether a toolset already in a pod is held, and by whom."""

    granted: bool
    grant: str  # "unprivileged", "serviceaccount:NS:SA", "user:NAME", ...; "none" when not
    reason: str  # a Reason code
    message: str  # who granted it; or why not, with the `kubectl create rolebinding` to fix it
    max_session: dt.timedelta | None = None  # the matching rule's maxSessionDuration


@dataclass
class _Refusal:
    reason: Reason
    detail: str
    hint: str = ""


class PolicyGate:
    """evaluate(PolicyRequest) -> PolicyResult: policy rules first, then RBAC, then the mode."""

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

    def namespace_mode(self, namespace: str) -> str | None:
        """The namespace's default mode label; None when absent or the namespace cannot be
        read (the settings' defaultMode then applies)."""
        try:
            return self.namespace_labels(namespace).get(constants.LABEL_NAMESPACE_MODE)
        except ClusterAPIError as exc:
            log.warning(
                "namespace %s unreadable, its default mode is unknown: %s",
                namespace,
                exc,
                extra={"event": "namespace-lookup-failed"},
            )
            return None

    # -- the decision -------------------------------------------------------------------------

    def evaluate(self, request: PolicyRequest) -> PolicyResult:
        try:
            return self.explain(request).result
        except Exception:
            # A bug here must neither grant privileges nor block pod creation.
            log.exception("policy evaluation failed; injecting nothing")
            return PolicyResult(
                profile=None,
                allowed=True,
                reason="policy-error",
                message="no debug sidecar injected: the policy gate failed (see webhook logs)",
                grant="none",
            )

    def explain(self, request: PolicyRequest) -> Explanation:
        policy = self.store.current()
        trace: list[str] = []
        rule, uncertain = self._match(policy, request.namespace, request.service_account, trace)
        rule_settings = rule.settings if rule else policy.defaults
        rule_name, rule_where = (
            (rule.name, rule.where) if rule else ("defaults", policy.defaults_where)
        )
        calls = [0]
        explanation = Explanation(
            result=self._decide(request, rule_settings, rule_name, uncertain, trace, calls),
            rule=rule_name,
            rule_where=rule_where,
            trace=trace,
        )
        explanation.access_checks = calls[0]
        return explanation

    def rule_for(self, namespace: str, service_account: str) -> tuple[RuleSettings, str]:
        """The settings of the rule that covers this namespace and service account (the
        expiry controller's question), and where it is written. Raises ClusterAPIError when a
        namespaceSelector rule could not be evaluated: better no answer than the wrong rule."""
        policy = self.store.current()
        trace: list[str] = []
        rule, uncertain = self._match(policy, namespace, service_account, trace)
        if uncertain:
            raise ClusterAPIError(f"policy rules for namespace {namespace!r}: {trace[-1]}")
        if rule is None:
            return policy.defaults, f"the defaults ({policy.defaults_where})"
        return rule.settings, f"policy rule {rule.name!r} ({rule.where})"

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

    def _decide(
        self,
        request: PolicyRequest,
        rule: RuleSettings,
        rule_name: str,
        uncertain: bool,
        trace: list[str],
        calls: list[int],
    ) -> PolicyResult:
        profile = request.requested_profile
        label = "the defaults" if rule_name == "defaults" else f"policy rule {rule_name!r}"
        warnings: list[str] = []
        if request.mode == constants.MODE_STANDBY and request.ephemeral_container is None:
            return self._standby(request, rule, label, trace)

        # The toolset image: a pod must not point a (possibly privileged) sidecar at any image.
        image: str | None = None
        wanted = request.requested_image
        if wanted and wanted != self.settings.toolset_image:
            if rule.allows_image(wanted):
                image = wanted
                trace.append(f"toolset image {wanted!r} allowed by {label}")
            else:
                text = (
                    f"toolset image {wanted!r} is not allowed by {label} (allowedImages: "
                    f"{', '.join(rule.allowed_images) or 'none'})"
                )
                trace.append(text)
                # An ephemeral container's image cannot be swapped for the configured one.
                if rule.mode != "downgrade" or request.ephemeral_container is not None:
                    return self._refuse(request, rule, _Refusal("image-not-allowed", text), label)
                warnings.append(f"{text}; using the configured image {self.settings.toolset_image}")

        judged = self._judge(request, rule, uncertain, label, trace, calls)
        if isinstance(judged, _Refusal):
            trace.append(judged.detail)
            return self._refuse(request, rule, judged, label, warnings)
        reason, grant = judged

        message = f"profile {profile.name!r} injected ({_GRANT_TEXT[reason]}{grant_suffix(grant)})"
        if request.ephemeral_container is not None:
            message = (
                f"ephemeral container {request.ephemeral_container!r} may use profile "
                f"{profile.name!r} ({_GRANT_TEXT[reason]}{grant_suffix(grant)})"
            )
        return self._result(request, rule, profile, True, reason, message, grant, image, warnings)

    def _judge(
        self,
        request: PolicyRequest,
        rule: RuleSettings,
        uncertain: bool,
        label: str,
        trace: list[str],
        calls: list[int],
    ) -> tuple[Reason, str] | _Refusal:
        """Does the request hold its profile: (reason, grant), or why not."""
        profile = request.requested_profile
        if uncertain and requires_grant(profile):
            # The rule that could not be decided applies (its mode, its defaultProfile), and
            # nothing that needs a grant is given while it is undecided.
            return _Refusal(
                "namespace-lookup-failed",
                f"profile {profile.name!r} needs an RBAC grant and namespace "
                f"{request.namespace!r} could not be read to match the policy",
            )
        if not rule.allows_profile(profile.name):
            return _Refusal(
                "not-allowed-by-policy",
                f"profile {profile.name!r} is not allowed by {label} "
                f"(allowed: {rule.describe_profiles()})",
            )
        if not requires_grant(profile):
            trace.append(f"profile {profile.name!r} needs no grant")
            return "unprivileged", "unprivileged"
        return self._check_grant(request, profile, rule, trace, calls)

    def check_grant(self, request: PolicyRequest) -> GrantVerdict:
        """Does the request hold `requested_profile` (and its image) right now: the rules,
        RBAC checks and cache of evaluate(), without the rule's mode (no downgrade, no skip).
        The guard (webhook.admission.guard) asks this of a toolset already in a pod."""
        policy = self.store.current()
        trace: list[str] = []
        try:
            matched, uncertain = self._match(
                policy, request.namespace, request.service_account, trace
            )
            rule = matched.settings if matched else policy.defaults
            label = f"policy rule {matched.name!r}" if matched else "the defaults"
            wanted = request.requested_image
            judged: tuple[Reason, str] | _Refusal
            if wanted and wanted != self.settings.toolset_image and not rule.allows_image(wanted):
                judged = _Refusal(
                    "image-not-allowed",
                    f"toolset image {wanted!r} is not allowed by {label} (allowedImages: "
                    f"{', '.join(rule.allowed_images) or 'none'})",
                )
            else:
                judged = self._judge(request, rule, uncertain, label, trace, [0])
        except Exception as exc:  # a bug must not grant
            log.exception("grant check failed; no grant")
            return GrantVerdict(False, "none", "policy-error", f"the policy gate failed ({exc!r})")
        if isinstance(judged, _Refusal):
            hint = f" To grant it: {judged.hint}" if judged.hint else ""
            return GrantVerdict(
                False, "none", judged.reason, f"{judged.detail}; decided by {label}.{hint}",
                rule.max_session,
            )
        reason, grant = judged
        text = f"{_GRANT_TEXT[reason]}{grant_suffix(grant)}"
        return GrantVerdict(True, grant, reason, text, rule.max_session)

    def guard_level(self, namespace: str, service_account: str) -> str | None:
        """The guardLevel of the rule for this pod; "restricted" when the rule cannot be decided
        (the guard then holds the pod to the strictest level rather than guess)."""
        rule, uncertain = self._match(self.store.current(), namespace, service_account, [])
        if uncertain:
            return "restricted"
        return (rule.settings if rule else self.store.current().defaults).guard_level

    def allows_image(self, namespace: str, service_account: str, image: str) -> bool:
        """Whether the rule for this pod lets its toolset run `image` (its allowedImages; the
        configured toolset image always). An undecidable rule allows nothing else."""
        if image == self.settings.toolset_image:
            return True
        try:
            rule, uncertain = self._match(self.store.current(), namespace, service_account, [])
        except Exception:  # a bug must not widen anything
            log.exception("image check failed; image refused")
            return False
        settings = rule.settings if rule else self.store.current().defaults
        return not uncertain and settings.allows_image(image)

    def _standby(
        self, request: PolicyRequest, rule: RuleSettings, label: str, trace: list[str]
    ) -> PolicyResult:
        """Standby adds no container, image or privilege (shared emptyDirs, a shared PID
        namespace, environment hints): the profile must be allowed, no grant is needed. The
        toolset itself is gated when `attach` adds it."""
        profile = request.requested_profile
        if not rule.allows_profile(profile.name):
            refusal = _Refusal(
                "not-allowed-by-policy",
                f"profile {profile.name!r} is not allowed by {label} "
                f"(allowed: {rule.describe_profiles()})",
            )
            trace.append(refusal.detail)
            return self._refuse(request, rule, refusal, label)
        trace.append(f"standby: profile {profile.name!r} wired without a toolset; no grant needed")
        message = (
            f"profile {profile.name!r} wired in standby (shared volumes and hints, no toolset "
            "container, no grant needed; `sidecar-debug attach` adds the toolset and is gated)"
        )
        return self._result(
            request, rule, profile, True, "standby", message, "unprivileged", None, []
        )

    def _check_grant(
        self,
        request: PolicyRequest,
        profile: Profile,
        rule: RuleSettings,
        trace: list[str],
        calls: list[int],
    ) -> tuple[Reason, str] | _Refusal:
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
            return _Refusal(
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
        return _Refusal("no-rbac-grant", detail, hint)

    def _binding_hint(
        self, profile: str, namespace: str, subject: str, sa: str | None = None
    ) -> str:
        """The `kubectl create rolebinding` that grants `profile` to a service account
        (`sa` given: subject is NS:SA) or to a user (a service account's username included)."""
        prefix = "system:serviceaccount:"
        if sa is not None:
            flag, suffix = f"--serviceaccount={subject}", sa
        elif subject.startswith(prefix) and subject.count(":") == 3:
            flag, suffix = f"--serviceaccount={subject.removeprefix(prefix)}", _dns_safe(subject)
        else:
            flag, suffix = f"--user={subject}", _dns_safe(subject)
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
    ) -> tuple[Reason, str] | _Refusal:
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
            return _Refusal(
                "no-rbac-grant", f"{what}; {username or 'an anonymous requester'} never grants"
            )
        verdict = self._access(user_check(user, namespace, profile.name), trace, calls)
        if verdict is True:
            return "granted-user", f"user:{username}"
        hint = self._binding_hint(profile.name, namespace, username)
        if isinstance(verdict, str):
            return _Refusal(
                "rbac-check-failed",
                f"{what}, and the SubjectAccessReview failed ({verdict}); no grant assumed",
                hint,
            )
        return _Refusal(
            "no-rbac-grant",
            f"{what}: user {username!r} may not 'use' debugprofiles.{constants.RBAC_GROUP} "
            f"{profile.name!r} in namespace {namespace!r} (the pod's service account does not "
            "grant an ephemeral container)",
            hint,
        )

    def _refuse(
        self,
        request: PolicyRequest,
        rule: RuleSettings,
        refusal: _Refusal,
        label: str,
        warnings: Sequence[str] = (),
    ) -> PolicyResult:
        hint = f" To grant it: {refusal.hint}" if refusal.hint else ""
        if request.ephemeral_container is not None:
            message = (
                f"sidecar-debug denied the ephemeral container {request.ephemeral_container!r}: "
                f"{refusal.detail}; decided by {label}.{hint}"
            )
            return self._result(
                request, rule, None, False, refusal.reason, message, "none", None, warnings
            )
        if rule.mode == "deny":
            message = (
                f"sidecar-debug denied the pod: {refusal.detail} (mode deny in {label}).{hint}"
            )
            return self._result(
                request, rule, None, False, refusal.reason, message, "none", None, warnings
            )
        target = self.downgrade_target(rule) if rule.mode == "downgrade" else None
        if refusal.reason == "image-not-allowed" or target is None:
            why = "mode skip" if rule.mode == "skip" else "no unprivileged profile is allowed"
            message = f"no debug sidecar injected: {refusal.detail} ({why} in {label}).{hint}"
            return self._result(
                request, rule, None, True, refusal.reason, message, "none", None, warnings
            )
        message = (
            f"profile {target.name!r} injected instead of {request.requested_profile.name!r}: "
            f"{refusal.detail} (mode downgrade in {label}).{hint}"
        )
        image = (
            request.requested_image
            if request.requested_image and rule.allows_image(request.requested_image)
            else None
        )
        return self._result(
            request,
            rule,
            target,
            True,
            refusal.reason,
            message,
            "unprivileged",
            image,
            warnings,
        )

    def downgrade_target(self, rule: RuleSettings) -> Profile | None:
        """The rule's defaultProfile, else the strongest allowed profile that needs no grant."""
        profiles = self.settings.profiles
        if rule.default_profile is not None and rule.default_profile in profiles:
            return profiles[rule.default_profile]
        return strongest_unprivileged(p for p in profiles.values() if rule.allows_profile(p.name))

    def _result(
        self,
        request: PolicyRequest,
        rule: RuleSettings,
        profile: Profile | None,
        allowed: bool,
        reason: Reason,
        message: str,
        grant: str,
        image: str | None,
        warnings: Sequence[str],
    ) -> PolicyResult:
        annotations: dict[str, str] = {}
        all_warnings = list(warnings)
        started = deadline = None
        # A standby pod runs no toolset: nothing to expire, nothing Pod Security would refuse.
        if profile is not None and request.mode != constants.MODE_STANDBY:
            started = self._now().astimezone(dt.UTC).replace(microsecond=0)
            max_session = rule.max_session
            if max_session is not None:
                deadline = started + max_session
            # The overdue annotation goes on a pod being created; an ephemeral container's
            # review cannot change the pod's metadata. It only informs: the session's facts
            # are in the toolset's env (started, deadline), which no update can change.
            if max_session is not None and request.ephemeral_container is None:
                overdue = annotations[constants.ANNOTATION_OVERDUE_AFTER] = format_time(
                    started + max_session)
                message = (
                    f"{message.rstrip('.')}. The pod is marked overdue for removal after "
                    f"{format_duration(max_session)} ({constants.ANNOTATION_OVERDUE_AFTER}="
                    f"{overdue})."
                )
            all_warnings.extend(self._pod_security_warnings(request.namespace, profile))
        return PolicyResult(
            profile=profile,
            allowed=allowed,
            reason=reason,
            message=message,
            grant=grant,
            image=image,
            annotations=annotations,
            warnings=tuple(all_warnings),
            started=started if allowed else None,
            deadline=deadline if allowed else None,
        )

    def _pod_security_warnings(self, namespace: str, profile: Profile) -> list[str]:
        try:
            labels = self.namespace_labels(namespace)
        except ClusterAPIError as exc:
            log.debug("no Pod Security check for namespace %s: %s", namespace, exc)
            return []
        found: list[str] = []
        guarded = (labels.get(self.settings.label_key) == self.settings.label_enabled
                   or constants.LABEL_GUARD in labels)
        if requires_grant(profile) and not guarded:
            # Pod opt-in in a namespace the guard does not see: whatever Pod Security was
            # relaxed to there for this sidecar, it is relaxed for every other pod too.
            found.append(
                f"namespace {namespace!r} is not guarded by sidecar-debug: if its Pod Security "
                f"is relaxed for the privileged debug sidecar (profile {profile.name!r}), label "
                f"it {constants.LABEL_GUARD}=baseline so that every other container stays "
                "baseline (docs/policy.md, the guard)"
            )
        level = labels.get(constants.LABEL_POD_SECURITY_ENFORCE, "")
        refusal = pod_security_refusal(
            profile.security_context,
            {h.name: h.path for h in profile.host_paths},
            level,
            self.settings.sidecar_name,
        )
        if refusal:
            found.append(
                f"namespace {namespace!r} enforces Pod Security {level!r}, which rejects the "
                f"debug sidecar of profile {profile.name!r} (it {refusal}): the pod "
                f"will be refused; label the namespace "
                f"{constants.LABEL_POD_SECURITY_ENFORCE}=privileged (with "
                f"{self.settings.label_key}={self.settings.label_enabled} or "
                f"{constants.LABEL_GUARD}=baseline, the guard holds every other container to "
                "baseline) or use an unprivileged profile"
            )
        return found

    # -- the namespace-label gate -------------------------------------------------------------

    def may_opt_in_namespace(
        self, user: Mapping[str, Any], namespace: str
    ) -> tuple[bool, str, str]:
        """(allowed, reason, message) for labelling `namespace` with the opt-in label."""
        label = f"{self.settings.label_key}={self.settings.label_enabled}"
        return self._may_label_namespace(
            user,
            namespace,
            constants.NAMESPACE_OPT_IN_GRANT,
            f"labelling namespace {namespace!r} {label}",
            "opens it to debug sidecar injection",
            allowed=f"may open namespace {namespace!r} to debug sidecars",
            binding="opt-in",
        )

    def may_change_namespace_guard(
        self, user: Mapping[str, Any], namespace: str, change: str
    ) -> tuple[bool, str, str]:
        """(allowed, reason, message) for a label change that makes the guard hold `namespace`
        differently (`change` says how, e.g. "removing sidecar-debug.io/guard=restricted")."""
        return self._may_label_namespace(
            user,
            namespace,
            constants.NAMESPACE_GUARD_GRANT,
            f"{change} on namespace {namespace!r}",
            "changes how the guard holds its pods to Pod Security",
            allowed=f"may change how the guard holds namespace {namespace!r}",
            binding="guard",
        )

    def _may_label_namespace(
        self,
        user: Mapping[str, Any],
        namespace: str,
        grant_name: str,
        what: str,
        effect: str,
        *,
        allowed: str,
        binding: str,
    ) -> tuple[bool, str, str]:
        """Whether the requester holds `use` on debugprofiles `grant_name` in `namespace`."""
        trace: list[str] = []
        verdict = self._access(user_check(user, namespace, grant_name), trace, [0])
        username = str(user.get("username", ""))
        if verdict is True:
            return True, "granted-user", f"{username} {allowed}"
        grant = f"verb 'use' on debugprofiles.{constants.RBAC_GROUP} {grant_name!r}"
        if isinstance(verdict, str):
            return (
                False,
                "rbac-check-failed",
                f"{what} needs {grant}, and the check failed ({verdict}); try again",
            )
        return (
            False,
            "no-rbac-grant",
            (
                f"{what} {effect} and needs {grant}, which {username!r} lacks. A cluster "
                f"admin can grant it: kubectl create clusterrolebinding "
                f"sidecar-debug-{binding}-{_dns_safe(username)} "
                f"--clusterrole={self.role_prefix}{grant_name} --user={username}"
            ),
        )


_GRANT_TEXT: dict[str, str] = {
    "unprivileged": "needs no grant",
    "granted-serviceaccount": "granted to the pod's service account",
    "granted-user": "granted to the requesting user",
    "granted-both": "granted to both the pod's service account and the requesting user",
}


def grant_suffix(grant: str) -> str:
    return "" if grant == "unprivileged" else f": {grant}"


def _dns_safe(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:40] or "user"


def load_policy_engine(
    settings: Settings,
    cluster: ClusterAPI | None = None,
    *,
    role_prefix: str | None = None,
    check_interval: float = RELOAD_CHECK_SECONDS,
) -> PolicyGate:
    """The gate for `settings.policy_path` (file or directory; None = the built-in default policy,
    i.e. privileged profiles only with the RBAC grant, downgrade otherwise). Raises PolicyError
    naming file and line when the policy is invalid: the webhook must not start with it."""
    store = PolicyStore(settings.policy_path, settings.profiles, check_interval=check_interval)
    prefix = role_prefix or settings.profile_role_prefix or constants.DEFAULT_ROLE_PREFIX
    return PolicyGate(settings, store, cluster or KubernetesClusterAPI(), role_prefix=prefix)
