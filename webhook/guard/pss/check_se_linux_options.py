"""seLinuxOptions (baseline): container SELinux types only, no user or role."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.messages import as_text, join_quote, plural, quote, shown
from webhook.guard.pss.model import (
    ContainerRef,
    Finding,
    Violation,
    finding,
    setters,
    unique,
    violation,
)
from webhook.guard.pss.pod import PodView
from webhook.guard.pss.version import v1

# check_seLinuxOptions.go: types a container may run as (container_engine_t from 1.31); user and
# role must stay empty.
SELINUX_TYPES_1_0: Final = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
SELINUX_TYPES: Final = SELINUX_TYPES_1_0 | {"container_engine_t"}


def check_selinux(pod: PodView, allowed: frozenset[str] = SELINUX_TYPES) -> Finding | None:
    check, reason = "seLinuxOptions", "seLinuxOptions"
    found: list[Violation] = []
    types: set[str] = set()
    user = role = pod_set = False

    def inspect(options: Mapping[str, Any], where: str, owner: ContainerRef | None) -> bool:
        nonlocal user, role
        who = "pod" if owner is None else f"container {quote(owner.name)}"
        bad = False
        kind = options.get("type")
        kind = "" if kind is None else kind  # null is absent, as in the API
        if not (isinstance(kind, str) and kind in allowed):
            types.add(as_text(kind))
            text = f"{who} must not set securityContext.seLinuxOptions.type to {shown(kind)}"
            found.append(violation(check, reason, f"{where}.type", text, kind, owner))
            bad = True
        for key in ("user", "role"):
            value = options.get(key)
            if value is None or value == "":
                continue
            user, role = user or key == "user", role or key == "role"
            text = f"{who} must not set securityContext.seLinuxOptions.{key} ({shown(value)})"
            found.append(violation(check, reason, f"{where}.{key}", text, value, owner))
            bad = True
        return bad

    where = "spec.securityContext.seLinuxOptions"
    pod_set = inspect(pod.mapping(pod.security.get("seLinuxOptions"), where), where, None)
    for c in pod.containers:
        where = f"{c.ref.path}.securityContext.seLinuxOptions"
        inspect(pod.mapping(c.security.get("seLinuxOptions"), where), where, c.ref)
    refs = unique(v.container for v in found if v.container)
    data = [f"{plural('type', 'types', len(types))} {join_quote(sorted(types))}"] if types else []
    data += ["user may not be set"] if user else []
    data += ["role may not be set"] if role else []
    detail = (
        f"{setters(pod_set, refs)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}"
    )
    return finding(check, reason, detail, found)


def check_selinux_1_0(pod: PodView) -> Finding | None:
    return check_selinux(pod, SELINUX_TYPES_1_0)


CHECK: Final = Check(
    "seLinuxOptions",
    "baseline",
    (VersionedCheck(v1(0), check_selinux_1_0), VersionedCheck(v1(31), check_selinux)),
)
