"""runAsNonRoot (restricted): the pod or every container sets it true."""

from __future__ import annotations

from typing import Final

from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.messages import quote, shown
from webhook.guard.pss.model import (
    Finding,
    Violation,
    containers_phrase,
    finding,
    setters,
    violation,
)
from webhook.guard.pss.pod import PodView
from webhook.guard.pss.version import v1


def check_run_as_non_root(pod: PodView) -> Finding | None:
    if pod.user_namespace:  # 1.35: root in a user namespace is not root on the node
        return None
    return check_run_as_non_root_1_0(pod)


def check_run_as_non_root_1_0(pod: PodView) -> Finding | None:
    check, reason = "runAsNonRoot", "runAsNonRoot != true"
    explicit: list[Violation] = []
    implicit: list[Violation] = []
    pod_value = pod.security.get("runAsNonRoot")
    pod_true = pod_value is True
    if pod_value is not None and not pod_true:
        text = f"pod must not set securityContext.runAsNonRoot={shown(pod_value)}"
        path = "spec.securityContext.runAsNonRoot"
        explicit.append(violation(check, reason, path, text, pod_value, None))
    for c in pod.containers:
        value = c.security.get("runAsNonRoot")
        path = f"{c.ref.path}.securityContext.runAsNonRoot"
        if value is None:
            if not pod_true:
                text = (
                    f"pod or container {quote(c.ref.name)} must set "
                    "securityContext.runAsNonRoot=true"
                )
                implicit.append(violation(check, reason, path, text, None, c.ref))
        elif value is not True:
            text = (
                f"container {quote(c.ref.name)} must not set "
                f"securityContext.runAsNonRoot={shown(value)}"
            )
            explicit.append(violation(check, reason, path, text, value, c.ref))
    if explicit:
        pod_set = any(v.container is None for v in explicit)
        refs = [v.container for v in explicit if v.container]
        detail = f"{setters(pod_set, refs)} must not set securityContext.runAsNonRoot=false"
        return finding(check, reason, detail, explicit + implicit)
    refs = [v.container for v in implicit if v.container]
    detail = f"pod or {containers_phrase(refs)} must set securityContext.runAsNonRoot=true"
    return finding(check, reason, detail, implicit)


CHECK: Final = Check(
    "runAsNonRoot",
    "restricted",
    (
        VersionedCheck(v1(0), check_run_as_non_root_1_0),
        VersionedCheck(v1(35), check_run_as_non_root),
    ),
)
