"""seccompProfile_baseline (baseline): seccomp never Unconfined, in fields or annotations.

Pod Security admission reads the annotations below policy v1.19 and the fields from v1.19; the
guard reads both at every version (stricter, as the package says: a kubelet honours either)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.messages import as_text, join_quote, plural, quote, shown
from webhook.guard.pss.model import Finding, Violation, finding, setters, unique, violation
from webhook.guard.pss.pod import Container, PodView, annotation_path, written_for_exempted
from webhook.guard.pss.version import v1

SECCOMP_TYPES: Final = frozenset({"RuntimeDefault", "Localhost"})
SECCOMP_POD_ANNOTATION: Final = "seccomp.security.alpha.kubernetes.io/pod"
SECCOMP_CONTAINER_ANNOTATION_PREFIX: Final = "container.seccomp.security.alpha.kubernetes.io/"


def seccomp_annotations(pod: PodView, check: str) -> tuple[list[Violation], list[str]]:
    """The seccomp annotations of Kubernetes < 1.19 (which 1.20's kubelet still honours):
    anything but runtime/default, docker/default or localhost/... (`unconfined`) is refused."""
    found: list[Violation] = []
    shown_values: list[str] = []
    for key, value in pod.annotations.items():
        if not isinstance(key, str) or not (
            key == SECCOMP_POD_ANNOTATION or key.startswith(SECCOMP_CONTAINER_ANNOTATION_PREFIX)
        ):
            continue
        if isinstance(value, str) and (
            value in ("runtime/default", "docker/default") or value.startswith("localhost/")
        ):
            continue
        if written_for_exempted(
            pod, key, SECCOMP_CONTAINER_ANNOTATION_PREFIX, "seccompProfile", value
        ):
            continue
        shown_values.append(f"{key}={shown(value)}")
        text = f"annotation {quote(key)} must not set seccomp profile {shown(value)}"
        found.append(violation(check, "seccompProfile", annotation_path(key), text, value, None))
    return found, sorted(shown_values)


def explicit_seccomp(
    pod: PodView, check: str
) -> tuple[list[Violation], set[str], bool, list[Container]]:
    """Fields that set a forbidden seccomp type; whether the pod level sets a good one; the
    containers that set none."""
    reason = "seccompProfile"
    found: list[Violation] = []
    values: set[str] = set()
    pod_good = False
    unset: list[Container] = []

    def bad(profile: Mapping[str, Any]) -> Any:
        value = profile.get("type")
        return None if isinstance(value, str) and value in SECCOMP_TYPES else (value or "")

    where = "spec.securityContext.seccompProfile"
    if pod.security.get("seccompProfile") is not None:
        value = bad(pod.mapping(pod.security.get("seccompProfile"), where))
        if value is None:
            pod_good = True
        else:
            values.add(as_text(value))
            text = f"pod must not set securityContext.seccompProfile.type to {shown(value)}"
            found.append(violation(check, reason, f"{where}.type", text, value, None))
    for c in pod.containers:
        where = f"{c.ref.path}.securityContext.seccompProfile"
        if c.security.get("seccompProfile") is None:
            unset.append(c)
            continue
        value = bad(pod.mapping(c.security.get("seccompProfile"), where))
        if value is not None:
            values.add(as_text(value))
            text = (
                f"container {quote(c.ref.name)} must not set securityContext.seccompProfile.type "
                f"to {shown(value)}"
            )
            found.append(violation(check, reason, f"{where}.type", text, value, c.ref))
    return found, values, pod_good, unset


def seccomp_detail(found: list[Violation], values: set[str], annotations: list[str]) -> str:
    parts: list[str] = []
    fields = [v for v in found if not v.field.startswith("metadata.")]
    if fields:
        pod_set = any(v.container is None for v in fields)
        refs = unique(v.container for v in fields if v.container)
        parts.append(
            f"{setters(pod_set, refs)} must not set securityContext.seccompProfile.type to "
            f"{join_quote(sorted(values))}"
        )
    if annotations:
        parts.append(
            f"forbidden {plural('annotation', 'annotations', len(annotations))} "
            f"{', '.join(annotations)}"
        )
    return "; ".join(parts)


def check_seccomp_baseline(pod: PodView) -> Finding | None:
    check = "seccompProfile_baseline"
    found, values, _, _ = explicit_seccomp(pod, check)
    from_annotations, annotations = seccomp_annotations(pod, check)
    found += from_annotations
    return finding(check, "seccompProfile", seccomp_detail(found, values, annotations), found)


CHECK: Final = Check(
    "seccompProfile_baseline",
    "baseline",
    (VersionedCheck(v1(0), check_seccomp_baseline),),
)
