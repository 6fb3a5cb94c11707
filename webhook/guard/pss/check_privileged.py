"""privileged (baseline): no privileged container."""

from __future__ import annotations

from typing import Final

from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.messages import quote, set_to, unset_or_false
from webhook.guard.pss.model import Finding, Violation, containers_phrase, finding, violation
from webhook.guard.pss.pod import PodView
from webhook.guard.pss.version import v1


def check_privileged(pod: PodView) -> Finding | None:
    check, reason = "privileged", "privileged"
    found: list[Violation] = []
    for c in pod.containers:
        value = c.security.get("privileged")
        if not unset_or_false(value):
            text = (
                f"container {quote(c.ref.name)} must not set "
                f"securityContext.privileged={set_to(value)}"
            )
            path = f"{c.ref.path}.securityContext.privileged"
            found.append(violation(check, reason, path, text, value, c.ref))
    refs = [v.container for v in found if v.container]
    detail = f"{containers_phrase(refs)} must not set securityContext.privileged=true"
    return finding(check, reason, detail, found)


CHECK: Final = Check(
    "privileged",
    "baseline",
    (VersionedCheck(v1(0), check_privileged),),
)
