"""Which profile a pod gets, and why: the policy gate's answer to the mutation path (the
webhook's review, offline `inject`'s pipeline, the ephemeral-container gate; the PolicyEngine
contract of webhook.policy.api) and to `sidecar-debug policy explain` (the steps that led to
it). The rules and grants are judged by the shared core (webhook.policy.gate)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

from webhook.guard.privilege import pod_security_refusal, requires_grant, strongest_unprivileged
from webhook.kube.access import ClusterAPIError
from webhook.policy.api import PolicyRequest, PolicyResult
from webhook.policy.gate import GRANT_TEXT, GateCore, Reason, Refusal, grant_suffix, log
from webhook.policy.model import RuleSettings, format_duration
from webhook.profiles import Profile
from webhook.wire import constants
from webhook.wire.rfc3339 import format_time


@dataclass
class Explanation:
    """A decision plus the steps that led to it (for `policy explain` and debug logs)."""

    result: PolicyResult
    rule: str  # matched rule name, or "defaults"
    rule_where: str
    trace: list[str] = field(default_factory=list)
    access_checks: int = 0  # SubjectAccessReview calls actually made (cache hits excluded)


class Decisions(GateCore):
    """evaluate(PolicyRequest) -> PolicyResult: policy rules first, then RBAC, then the mode."""

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
                    return self._refuse(request, rule, Refusal("image-not-allowed", text), label)
                warnings.append(f"{text}; using the configured image {self.settings.toolset_image}")

        judged = self._judge(request, rule, uncertain, label, trace, calls)
        if isinstance(judged, Refusal):
            trace.append(judged.detail)
            return self._refuse(request, rule, judged, label, warnings)
        reason, grant = judged

        message = f"profile {profile.name!r} injected ({GRANT_TEXT[reason]}{grant_suffix(grant)})"
        if request.ephemeral_container is not None:
            message = (
                f"ephemeral container {request.ephemeral_container!r} may use profile "
                f"{profile.name!r} ({GRANT_TEXT[reason]}{grant_suffix(grant)})"
            )
        return self._result(request, rule, profile, True, reason, message, grant, image, warnings)

    def _standby(
        self, request: PolicyRequest, rule: RuleSettings, label: str, trace: list[str]
    ) -> PolicyResult:
        """Standby adds no container, image or privilege (shared emptyDirs, a shared PID
        namespace, environment hints): the profile must be allowed, no grant is needed. The
        toolset itself is gated when `attach` adds it."""
        profile = request.requested_profile
        if not rule.allows_profile(profile.name):
            refusal = Refusal(
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

    def _refuse(
        self,
        request: PolicyRequest,
        rule: RuleSettings,
        refusal: Refusal,
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
