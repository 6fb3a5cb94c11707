"""allowPrivilegeEscalation (restricted): every container sets it false."""

from __future__ import annotations

from typing import Final

from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.messages import quote, shown
from webhook.guard.pss.model import Finding, Violation, containers_phrase, finding, violation
from webhook.guard.pss.pod import PodView
from webhook.guard.pss.version import v1


def check_allow_privilege_escalation(pod: PodView) -> Finding | None:
    if pod.windows:  # 1.25: no such thing on Windows
        return None
    return check_allow_privilege_escalation_1_8(pod)


def check_allow_privilege_escalation_1_8(pod: PodView) -> Finding | None:
    check, reason = "allowPrivilegeEscalation", "allowPrivilegeEscalation != false"
    found: list[Violation] = []
    for c in pod.containers:
        value = c.security.get("allowPrivilegeEscalation")
        if value is False:
            continue
        text = (
            f"container {quote(c.ref.name)} must set securityContext.allowPrivilegeEscalation="
            f"false (it is {'unset' if value is None else shown(value)})"
        )
        path = f"{c.ref.path}.securityContext.allowPrivilegeEscalation"
        found.append(violation(check, reason, path, text, value, c.ref))
    refs = [v.container for v in found if v.container]
    detail = f"{containers_phrase(refs)} must set securityContext.allowPrivilegeEscalation=false"
    return finding(check, reason, detail, found)


CHECK: Final = Check(
    "allowPrivilegeEscalation",
    "restricted",
    (
        VersionedCheck(v1(8), check_allow_privilege_escalation_1_8),
        VersionedCheck(v1(25), check_allow_privilege_escalation),
    ),
)
