"""procMount (baseline): the default /proc mask."""

from __future__ import annotations

from typing import Final

from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.messages import as_text, join_quote, quote, shown
from webhook.guard.pss.model import Finding, Violation, containers_phrase, finding, violation
from webhook.guard.pss.pod import PodView
from webhook.guard.pss.version import v1


def proc_mount(pod: PodView, check: str) -> Finding | None:
    reason = "procMount"
    found: list[Violation] = []
    values: set[str] = set()
    for c in pod.containers:
        value = c.security.get("procMount")
        if value is None or value == "Default":
            continue
        values.add(as_text(value))
        text = (
            f"container {quote(c.ref.name)} must not set securityContext.procMount to "
            f"{shown(value)}"
        )
        path = f"{c.ref.path}.securityContext.procMount"
        found.append(violation(check, reason, path, text, value, c.ref))
    refs = [v.container for v in found if v.container]
    detail = (
        f"{containers_phrase(refs)} must not set securityContext.procMount to "
        f"{join_quote(sorted(values))}"
    )
    return finding(check, reason, detail, found)


def check_proc_mount_baseline_1_0(pod: PodView) -> Finding | None:
    return proc_mount(pod, "procMount")


def check_proc_mount_baseline(pod: PodView) -> Finding | None:
    # 1.35: a pod in a user namespace (hostUsers: false) may unmask /proc.
    return None if pod.user_namespace else proc_mount(pod, "procMount")


CHECK: Final = Check(
    "procMount",
    "baseline",
    (
        VersionedCheck(v1(0), check_proc_mount_baseline_1_0),
        VersionedCheck(v1(35), check_proc_mount_baseline),
    ),
)
