"""capabilities_restricted (restricted): drop ALL, add NET_BIND_SERVICE at most."""

from __future__ import annotations

from typing import Final

from webhook.guard.pss.check_capabilities_baseline import (
    capabilities_added,
    check_capabilities_baseline,
)
from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.messages import join_quote, quote
from webhook.guard.pss.model import (
    Finding,
    Violation,
    containers_phrase,
    finding,
    unique,
    violation,
)
from webhook.guard.pss.pod import PodView
from webhook.guard.pss.version import v1

RESTRICTED_CAPABILITIES: Final = frozenset({"NET_BIND_SERVICE"})
CAPABILITY_ALL: Final = "ALL"


def check_capabilities_restricted(pod: PodView) -> Finding | None:
    if pod.windows:  # 1.25: Windows has no capabilities; baseline's check still applies
        return check_capabilities_baseline(pod)
    return check_capabilities_restricted_1_22(pod)


def check_capabilities_restricted_1_22(pod: PodView) -> Finding | None:
    check, reason = "capabilities_restricted", "unrestricted capabilities"
    missing: list[Violation] = []
    for c in pod.containers:
        where = f"{c.ref.path}.securityContext.capabilities"
        capabilities = pod.mapping(c.security.get("capabilities"), where)
        drop = pod.sequence(capabilities.get("drop"), f"{where}.drop")
        if CAPABILITY_ALL not in [d for d in drop if isinstance(d, str)]:
            text = (
                f'container {quote(c.ref.name)} must set securityContext.capabilities.drop=["ALL"]'
            )
            missing.append(violation(check, reason, f"{where}.drop", text, drop or None, c.ref))
    added, values = capabilities_added(pod, check, reason, RESTRICTED_CAPABILITIES)
    parts: list[str] = []
    if missing:
        refs = [v.container for v in missing if v.container]
        parts.append(
            f'{containers_phrase(refs)} must set securityContext.capabilities.drop=["ALL"]'
        )
    if added:
        refs = unique(v.container for v in added if v.container)
        parts.append(
            f"{containers_phrase(refs)} must not include {join_quote(values)} in "
            "securityContext.capabilities.add"
        )
    return finding(check, reason, "; ".join(parts), missing + added)


CHECK: Final = Check(
    "capabilities_restricted",
    "restricted",
    (
        VersionedCheck(v1(22), check_capabilities_restricted_1_22),
        VersionedCheck(v1(25), check_capabilities_restricted),
    ),
    ("capabilities_baseline",),
)
