"""What the guard (webhook.admission.guard) asks the policy gate about a pod it reviews: whether
a toolset already in the pod is held now (the rules, grantSubject, SubjectAccessReviews and cache
of the injection, without the rule's mode), the guard level of the pod's rule, and whether its
toolset may run an image."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from webhook.policy.api import PolicyRequest
from webhook.policy.gate import GRANT_TEXT, GateCore, Reason, Refusal, grant_suffix, log


@dataclass(frozen=True)
class GrantVerdict:
    """check_grant's answer: whether a toolset already in a pod is held, and by whom."""

    granted: bool
    grant: str  # "unprivileged", "serviceaccount:NS:SA", "user:NAME", ...; "none" when not
    reason: str  # a Reason code
    message: str  # who granted it; or why not, with the `kubectl create rolebinding` to fix it
    max_session: dt.timedelta | None = None  # the matching rule's maxSessionDuration


class GuardQuestions(GateCore):
    """check_grant, guard_level and allows_image: the guard's questions."""

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
            judged: tuple[Reason, str] | Refusal
            if wanted and wanted != self.settings.toolset_image and not rule.allows_image(wanted):
                judged = Refusal(
                    "image-not-allowed",
                    f"toolset image {wanted!r} is not allowed by {label} (allowedImages: "
                    f"{', '.join(rule.allowed_images) or 'none'})",
                )
            else:
                judged = self._judge(request, rule, uncertain, label, trace, [0])
        except Exception as exc:  # a bug must not grant
            log.exception("grant check failed; no grant")
            return GrantVerdict(False, "none", "policy-error", f"the policy gate failed ({exc!r})")
        if isinstance(judged, Refusal):
            hint = f" To grant it: {judged.hint}" if judged.hint else ""
            return GrantVerdict(
                False, "none", judged.reason, f"{judged.detail}; decided by {label}.{hint}",
                rule.max_session,
            )
        reason, grant = judged
        text = f"{GRANT_TEXT[reason]}{grant_suffix(grant)}"
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
