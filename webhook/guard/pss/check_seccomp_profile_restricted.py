"""seccompProfile_restricted (restricted): RuntimeDefault or Localhost, set for every container."""

from __future__ import annotations

from typing import Final

from webhook.guard.pss.check_seccomp_profile_baseline import (
    check_seccomp_baseline,
    explicit_seccomp,
    seccomp_annotations,
    seccomp_detail,
)
from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.messages import quote
from webhook.guard.pss.model import Finding, containers_phrase, finding, violation
from webhook.guard.pss.pod import PodView
from webhook.guard.pss.version import v1


def check_seccomp_restricted(pod: PodView) -> Finding | None:
    if pod.windows:  # 1.25: Windows has no seccomp; baseline's check still applies
        return check_seccomp_baseline(pod)
    return check_seccomp_restricted_1_19(pod)


def check_seccomp_restricted_1_19(pod: PodView) -> Finding | None:
    check = "seccompProfile_restricted"
    found, values, pod_good, unset = explicit_seccomp(pod, check)
    from_annotations, annotations = seccomp_annotations(pod, check)
    found += from_annotations
    if found:
        return finding(check, "seccompProfile", seccomp_detail(found, values, annotations), found)
    if pod_good or not unset:
        return None
    implicit = [
        violation(
            check,
            "seccompProfile",
            f"{c.ref.path}.securityContext.seccompProfile.type",
            f"pod or container {quote(c.ref.name)} must set securityContext.seccompProfile.type "
            'to "RuntimeDefault" or "Localhost"',
            None,
            c.ref,
        )
        for c in unset
    ]
    refs = [c.ref for c in unset]
    detail = (
        f"pod or {containers_phrase(refs)} must set securityContext.seccompProfile.type to "
        '"RuntimeDefault" or "Localhost"'
    )
    return finding(check, "seccompProfile", detail, implicit)


CHECK: Final = Check(
    "seccompProfile_restricted",
    "restricted",
    (
        VersionedCheck(v1(19), check_seccomp_restricted_1_19),
        VersionedCheck(v1(25), check_seccomp_restricted),
    ),
    ("seccompProfile_baseline",),
)
