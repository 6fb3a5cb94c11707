"""capabilities_baseline (baseline): only the default capabilities may be added."""

from __future__ import annotations

from typing import Any, Final

from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.messages import as_text, join_quote, quote, shown
from webhook.guard.pss.model import (
    Finding,
    Violation,
    containers_phrase,
    finding,
    unique,
    violation,
)
from webhook.guard.pss.pod import Container, PodView
from webhook.guard.pss.version import v1

# check_capabilities_baseline.go: the only capabilities baseline lets a container add. Names are
# compared exactly, as PSA does: `CAP_CHOWN` or `chown` is not `CHOWN`.
BASELINE_CAPABILITIES: Final = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)


def added_capabilities(pod: PodView, c: Container) -> list[tuple[int, Any]]:
    where = f"{c.ref.path}.securityContext.capabilities"
    capabilities = pod.mapping(c.security.get("capabilities"), where)
    return list(enumerate(pod.sequence(capabilities.get("add"), f"{where}.add")))


def capabilities_added(
    pod: PodView, check: str, reason: str, allowed: frozenset[str]
) -> tuple[list[Violation], list[str]]:
    found: list[Violation] = []
    values: set[str] = set()
    for c in pod.containers:
        for index, capability in added_capabilities(pod, c):
            if isinstance(capability, str) and capability in allowed:
                continue
            values.add(as_text(capability))
            text = (
                f"container {quote(c.ref.name)} must not include {shown(capability)} in "
                "securityContext.capabilities.add"
            )
            path = f"{c.ref.path}.securityContext.capabilities.add[{index}]"
            found.append(violation(check, reason, path, text, capability, c.ref))
    return found, sorted(values)


def check_capabilities_baseline(pod: PodView) -> Finding | None:
    check, reason = "capabilities_baseline", "non-default capabilities"
    found, values = capabilities_added(pod, check, reason, BASELINE_CAPABILITIES)
    refs = unique(v.container for v in found if v.container)
    detail = (
        f"{containers_phrase(refs)} must not include {join_quote(values)} in "
        "securityContext.capabilities.add"
    )
    return finding(check, reason, detail, found)


CHECK: Final = Check(
    "capabilities_baseline",
    "baseline",
    (VersionedCheck(v1(0), check_capabilities_baseline),),
)
