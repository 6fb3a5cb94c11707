"""Should this pod get a sidecar, and which profile? A pure function that always says why.

Modelled on Istio's `injectRequired` and vault-k8s's `ShouldInject`: no I/O, no mutation, a
reason code for metrics and audit plus a message a person can act on. Namespace opt-in is
decided by the webhook configuration's selectors; this function applies what the pod says.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.config import Settings
from webhook.profiles import Profile
from webhook.wire import constants
from webhook.wire.shape import type_name
from webhook.wire.status import read_status

_FALSE_WORDS = frozenset({"false", "no", "off", "0", "disabled"})
_TRUE_WORDS = frozenset({"true", "yes", "on", "1", "enabled"})
# What a container's `image` takes: registry, path, tag, digest; no spaces or control characters.
_IMAGE_REFERENCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,511}")


def _shown(value: str, limit: int = 64) -> str:
    """A user's value quoted for a message, cut short: messages must stay readable."""
    return repr(value if len(value) <= limit else value[:limit] + "...")


@dataclass(frozen=True)
class Decision:
    inject: bool
    reason: str  # machine-readable: "inject", "excluded-namespace", "opt-out-label", ...
    message: str  # for the person who created the pod
    profile: Profile | None = None
    runtime: str | None = None
    refuse: bool = False  # reject the pod (a mistake the user must fix, e.g. an unknown profile)
    image: str | None = None  # the toolset-image annotation, when it is an image reference
    warnings: tuple[str, ...] = ()
    mode: str = constants.MODE_INJECTED  # injected | standby (only the inert wiring)


def pod_annotations(pod: dict[str, Any]) -> dict[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def pod_labels(pod: dict[str, Any]) -> dict[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def status_container(pod: dict[str, Any], settings: Settings, warnings: list[str]) -> str | None:
    """The sidecar our status annotation names; None without the annotation. Anyone who can
    create the pod can write it, so a value that is not our status is reported and read as
    naming the default sidecar."""
    reading = read_status(pod)
    if not reading.present:
        return None
    if reading.status is None:
        warnings.append(
            f"sidecar-debug: annotation {constants.ANNOTATION_STATUS} is not sidecar-debug's "
            f"status ({reading.problem}); ignored: the pod counts as injected only if it has a "
            f"container named {settings.sidecar_name!r}"
        )
        return settings.sidecar_name
    return reading.status.container or settings.sidecar_name


def is_injected(pod: dict[str, Any], settings: Settings, warnings: list[str] | None = None) -> bool:
    """True when our status annotation is present and its sidecar is still in the pod."""
    container = status_container(pod, settings, [] if warnings is None else warnings)
    if container is None:
        return False
    spec = pod.get("spec") or {}
    names = {
        c.get("name")
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
        if isinstance(c, dict)
    }
    return container in names


def _annotation(annotations: Mapping[str, Any], key: str, warnings: list[str]) -> str | None:
    """The annotation's value with surrounding blanks removed; None when absent or not text."""
    value = annotations.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        warnings.append(
            f"sidecar-debug: annotation {key} must be a string, got {type_name(value)}; ignored"
        )
        return None
    return value.strip()


def wired_standby(pod: dict[str, Any]) -> bool:
    """True when our status annotation says the pod was wired in standby (it has no sidecar
    container to look for)."""
    status = read_status(pod).status
    return status is not None and status.standby


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
    # Every value below is written by whoever creates the pod: each gets a type and shape check
    # and, when it fails, one warning saying what was made of it.
    warnings: list[str] = []
    label = labels.get(settings.label_key)
    if label is not None and label not in (settings.label_enabled, settings.label_disabled):
        word = label.strip().lower() if isinstance(label, str) else ""
        opted_in = word in _TRUE_WORDS
        warnings.append(
            f"sidecar-debug: label {settings.label_key}={_shown(str(label))} is neither "
            f"{settings.label_enabled!r} nor {settings.label_disabled!r}; read as "
            f"{settings.label_enabled if opted_in else settings.label_disabled!r}"
        )
        if not opted_in:
            label = settings.label_disabled
    if label == settings.label_disabled:
        return Decision(
            False,
            "opt-out-label",
            f"pod opted out with label {settings.label_key}={settings.label_disabled}",
            warnings=tuple(warnings),
        )
    inject = _annotation(annotations, constants.ANNOTATION_INJECT, warnings)
    if inject is not None and inject.lower() not in _TRUE_WORDS | _FALSE_WORDS:
        # The annotation exists to opt out: a value we cannot read is taken as the safe answer.
        warnings.append(
            f"sidecar-debug: annotation {constants.ANNOTATION_INJECT}: {_shown(inject)} is "
            f'neither "true" nor "false"; read as "false" (no debug sidecar)'
        )
        inject = "false"
    if inject is not None and inject.lower() in _FALSE_WORDS:
        return Decision(
            False,
            "opt-out-annotation",
            f"pod opted out with annotation {constants.ANNOTATION_INJECT}",
            warnings=tuple(warnings),
        )
    if is_injected(pod, settings, warnings):
        return Decision(
            False,
            "already-injected",
            "pod already has the debug sidecar",
            warnings=tuple(warnings),
        )
    if wired_standby(pod):
        return Decision(
            False,
            "already-injected",
            "pod is already wired for debugging (standby)",
            warnings=tuple(warnings),
        )
    why = foreign_os(pod)
    if why is not None:
        return Decision(
            False,
            "unsupported-os",
            f"pod runs on non-Linux nodes ({why}); the debug toolset is a Linux container, so "
            "nothing was injected",
            warnings=tuple(warnings),
        )
    requested = profile_override or _annotation(annotations, constants.ANNOTATION_PROFILE, warnings)
    if requested == "":
        warnings.append(
            f"sidecar-debug: annotation {constants.ANNOTATION_PROFILE} is empty; the default "
            f"profile {settings.default_profile!r} is used"
        )
    profile_name = (requested or settings.default_profile).strip()
    profile = settings.profiles.get(profile_name)
    if profile is None:
        known = ", ".join(sorted(settings.profiles))
        return Decision(
            False,
            "unknown-profile",
            f"unknown debug profile {_shown(profile_name)} in annotation "
            f"{constants.ANNOTATION_PROFILE}; known profiles: {known}. Fix the annotation, or "
            f"remove it to get the default profile {settings.default_profile!r}.",
            refuse=True,
            warnings=tuple(warnings),
        )
    runtime = runtime_override or _annotation(annotations, constants.ANNOTATION_RUNTIME, warnings)
    if runtime and runtime not in settings.profile_set.runtimes:
        known = ", ".join(sorted(settings.profile_set.runtimes))
        warnings.append(
            f"sidecar-debug: unknown runtime {_shown(runtime)} in annotation "
            f"{constants.ANNOTATION_RUNTIME} (known: {known}); no environment hints added"
        )
        runtime = ""
    image = _annotation(annotations, constants.ANNOTATION_TOOLSET_IMAGE, warnings)
    if image is not None and not _IMAGE_REFERENCE.fullmatch(image):
        warnings.append(
            f"sidecar-debug: annotation {constants.ANNOTATION_TOOLSET_IMAGE}: {_shown(image)} is "
            f"not an image reference; the configured toolset image is used"
        )
        image = None
    requested_mode = mode_override or _annotation(annotations, constants.ANNOTATION_MODE, warnings)
    if requested_mode:
        mode = requested_mode.lower()
        if mode not in constants.MODES:
            return Decision(
                False,
                "unknown-mode",
                f"unknown debug mode {_shown(requested_mode)} in annotation "
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
                f"={_shown(namespace_mode)}, not one of {', '.join(constants.MODES)}; the default "
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
        image=image or None,
        warnings=tuple(warnings),
        mode=mode,
    )
