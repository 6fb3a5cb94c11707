"""Should this pod get a sidecar, and which profile? A pure function that always says why.

Modelled on Istio's `injectRequired` and vault-k8s's `ShouldInject`: no I/O, no mutation, a
reason code for metrics and audit plus a message a person can act on. Namespace opt-in is
decided by the webhook configuration's selectors; this function applies what the pod says.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from webhook import constants
from webhook.config import Profile, Settings

_FALSE_WORDS = frozenset({"false", "no", "off", "0", "disabled"})


@dataclass(frozen=True)
class Decision:
    inject: bool
    reason: str  # machine-readable: "inject", "excluded-namespace", "opt-out-label", ...
    message: str  # for the person who created the pod
    profile: Profile | None = None
    runtime: str | None = None
    refuse: bool = False  # reject the pod (a mistake the user must fix, e.g. an unknown profile)
    warnings: tuple[str, ...] = ()
    mode: str = constants.MODE_INJECTED  # injected | standby (only the inert wiring)


def pod_annotations(pod: dict[str, Any]) -> dict[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def pod_labels(pod: dict[str, Any]) -> dict[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def is_injected(pod: dict[str, Any], settings: Settings) -> bool:
    """True when our status annotation is present and its sidecar is still in the pod."""
    status = pod_annotations(pod).get(constants.ANNOTATION_STATUS)
    if status is None:
        return False
    try:
        container = json.loads(status).get("container", settings.sidecar_name)
    except (ValueError, AttributeError):
        container = settings.sidecar_name
    spec = pod.get("spec") or {}
    names = {
        c.get("name") for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
    }
    return container in names


def wired_standby(pod: dict[str, Any]) -> bool:
    """True when our status annotation says the pod was wired in standby (it has no sidecar
    container to look for)."""
    raw = pod_annotations(pod).get(constants.ANNOTATION_STATUS)
    if not isinstance(raw, str):
        return False
    try:
        status = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return isinstance(status, dict) and status.get("mode") == constants.MODE_STANDBY


def _os_in_selector_terms(affinity: Any) -> set[str] | None:
    """The OSes a required node affinity allows, when every term pins kubernetes.io/os (terms
    are ORed, a term's expressions ANDed); None when some term leaves the OS open."""
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = (
        node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node_affinity, dict)
        else None
    )
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    if not isinstance(terms, list) or not terms:
        return None
    allowed: set[str] = set()
    for term in terms:
        expressions = term.get("matchExpressions") if isinstance(term, dict) else None
        pinned = [
            e
            for e in expressions or ()
            if isinstance(e, dict)
            and e.get("key") in (constants.LABEL_OS, constants.LABEL_OS_BETA)
            and e.get("operator") == "In"
            and isinstance(e.get("values"), list)
        ]
        if not pinned:
            return None
        allowed |= {str(v).lower() for v in pinned[0]["values"]}
    return allowed


def foreign_os(pod: dict[str, Any]) -> str | None:
    """Why the pod cannot run on a Linux node, or None: spec.os.name, a nodeSelector or a
    required node affinity naming only other operating systems (e.g. windows)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return None
    os_field = spec.get("os")
    name = os_field.get("name") if isinstance(os_field, dict) else None
    if isinstance(name, str) and name.lower() != constants.OS_LINUX:
        return f"spec.os.name is {name!r}"
    selector = spec.get("nodeSelector")
    if isinstance(selector, dict):
        for key in (constants.LABEL_OS, constants.LABEL_OS_BETA):
            value = selector.get(key)
            if isinstance(value, str) and value.lower() != constants.OS_LINUX:
                return f"nodeSelector {key}={value}"
    allowed = _os_in_selector_terms(spec.get("affinity"))
    if allowed is not None and constants.OS_LINUX not in allowed:
        return f"required node affinity {constants.LABEL_OS} in ({', '.join(sorted(allowed))})"
    return None


def decide(
    pod: dict[str, Any],
    namespace: str,
    settings: Settings,
    *,
    profile_override: str | None = None,
    runtime_override: str | None = None,
    mode_override: str | None = None,
    namespace_mode: str | None = None,
) -> Decision:
    """`namespace_mode`: the namespace's mode label (read by the caller), used when the pod
    names no mode; the settings' defaultMode otherwise."""
    labels = pod_labels(pod)
    annotations = pod_annotations(pod)
    if settings.namespace_excluded(namespace):
        return Decision(
            False, "excluded-namespace", f"namespace {namespace!r} is excluded from debug injection"
        )
    if labels.get(settings.label_key) == settings.label_disabled:
        return Decision(
            False,
            "opt-out-label",
            f"pod opted out with label {settings.label_key}={settings.label_disabled}",
        )
    if str(annotations.get(constants.ANNOTATION_INJECT, "")).strip().lower() in _FALSE_WORDS:
        return Decision(
            False,
            "opt-out-annotation",
            f"pod opted out with annotation {constants.ANNOTATION_INJECT}",
        )
    if is_injected(pod, settings):
        return Decision(False, "already-injected", "pod already has the debug sidecar")
    if wired_standby(pod):
        return Decision(
            False, "already-injected", "pod is already wired for debugging (standby)"
        )
    why = foreign_os(pod)
    if why is not None:
        return Decision(
            False,
            "unsupported-os",
            f"pod runs on non-Linux nodes ({why}); the debug toolset is a Linux container, so "
            "nothing was injected",
        )
    profile_name = (
        profile_override
        or annotations.get(constants.ANNOTATION_PROFILE)
        or settings.default_profile
    ).strip()
    profile = settings.profiles.get(profile_name)
    if profile is None:
        known = ", ".join(sorted(settings.profiles))
        return Decision(
            False,
            "unknown-profile",
            f"unknown debug profile {profile_name!r} in annotation {constants.ANNOTATION_PROFILE};"
            f" known profiles: {known}. Fix the annotation, or remove it to get the default"
            f" profile {settings.default_profile!r}.",
            refuse=True,
        )
    warnings: list[str] = []
    runtime = (runtime_override or annotations.get(constants.ANNOTATION_RUNTIME) or "").strip()
    if runtime and runtime not in settings.profile_set.runtimes:
        known = ", ".join(sorted(settings.profile_set.runtimes))
        warnings.append(
            f"sidecar-debug: unknown runtime {runtime!r} in annotation "
            f"{constants.ANNOTATION_RUNTIME} (known: {known}); no environment hints added"
        )
        runtime = ""
    requested_mode = mode_override or annotations.get(constants.ANNOTATION_MODE)
    if requested_mode:
        mode = str(requested_mode).strip().lower()
        if mode not in constants.MODES:
            return Decision(
                False,
                "unknown-mode",
                f"unknown debug mode {str(requested_mode)[:64]!r} in annotation "
                f"{constants.ANNOTATION_MODE}; known modes: {', '.join(constants.MODES)}. Fix the "
                f"annotation, or remove it to get the namespace's or the default mode "
                f"{settings.default_mode!r}.",
                refuse=True,
                warnings=tuple(warnings),
            )
    elif namespace_mode is not None:
        mode = namespace_mode.strip().lower()
        if mode not in constants.MODES:
            warnings.append(
                f"sidecar-debug: namespace {namespace!r} has label {constants.LABEL_NAMESPACE_MODE}"
                f"={namespace_mode[:64]!r}, not one of {', '.join(constants.MODES)}; the default "
                f"mode {settings.default_mode!r} is used"
            )
            mode = settings.default_mode
    else:
        mode = settings.default_mode
    return Decision(
        True,
        "inject",
        f"inject profile {profile.name!r}"
        + (" in standby (no toolset container)" if mode == constants.MODE_STANDBY else ""),
        profile=profile,
        runtime=runtime or None,
        warnings=tuple(warnings),
        mode=mode,
    )
