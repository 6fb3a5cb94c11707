"""The namespace-label gates: validating checks on the labels that open a namespace to injection
(`/validate-namespace`), that put it under the guard (`/validate-namespace-guard`), and that name
it (`/validate-namespace-name`: on Kubernetes < 1.21 the apiserver neither sets nor protects
`kubernetes.io/metadata.name`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from webhook.admission import review as admission
from webhook.config import Settings
from webhook.guard.pss import LEVELS, resolve
from webhook.policy.namespace_labels import NamespaceLabelGate
from webhook.wire import constants, shape

log = logging.getLogger(__name__)

# (allowed, reason, message) for the requester, the namespace and what the change does.
Decide = Callable[[Mapping[str, Any], str, str], tuple[bool, str, str]]


def _labels(obj: Any) -> dict[str, str]:
    labels = ((obj or {}).get("metadata") or {}).get("labels")
    return labels if isinstance(labels, dict) else {}


def _unreadable(request: admission.Request) -> admission.Review | None:
    """A 400 answer for a review the apiserver never sends (a client calling directly can)."""
    problem = (
        shape.problem(request, shape.ENVELOPE, "request")
        or shape.problem(request.get("object"), shape.NAMESPACE, "request.object")
        or shape.problem(request.get("oldObject"), shape.NAMESPACE, "request.oldObject")
    )
    if problem is None:
        return None
    uid = request.get("uid")
    return admission.build_response(
        {"uid": uid if isinstance(uid, str) else ""},
        allowed=False,
        code=400,
        message=f"sidecar-debug cannot read the namespace review: {problem}",
    )


def _name(request: admission.Request) -> str:
    new = request.get("object") or {}
    return str((new.get("metadata") or {}).get("name") or request.get("name") or "")


def _decide(
    request: admission.Request, event: str, change: str, decide: Decide
) -> admission.Review:
    """Ask `decide` whether the requester may make `change`; log, audit and answer."""
    namespace = _name(request)
    user = request.get("userInfo") or {}
    allowed, reason, message = decide(user, namespace, change)
    audit = {
        constants.AUDIT_DECISION: "allow" if allowed else "deny",
        constants.AUDIT_REASON: reason,
    }
    log.info(
        "%s %s",
        event,
        "allowed" if allowed else "denied",
        extra={
            "event": event,
            "namespace": namespace,
            "decision": reason,
            "user": user.get("username", ""),
        },
    )
    if allowed:
        return admission.build_response(request, allowed=True, audit=audit)
    return admission.build_response(request, allowed=False, code=403, message=message, audit=audit)


def review_namespace(request: admission.Request, engine: NamespaceLabelGate) -> admission.Review:
    """Validating check on namespaces: only subjects with `use` on debugprofiles
    `namespace-opt-in` may add the opt-in label or change it to the enabled value."""
    unreadable = _unreadable(request)
    if unreadable is not None:
        return unreadable
    settings = engine.settings
    key, enabled = settings.label_key, settings.label_enabled
    new_value = _labels(request.get("object")).get(key)
    old_value = _labels(request.get("oldObject")).get(key)
    if (
        request.get("operation") not in ("CREATE", "UPDATE")
        or new_value != enabled
        or old_value == enabled
    ):
        return admission.build_response(request, allowed=True)
    return _decide(
        request,
        "namespace-opt-in",
        "",
        lambda user, namespace, _: engine.may_opt_in_namespace(user, namespace),
    )


def guard_change(settings: Settings, old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """How a change of namespace labels changes what the guard holds: the guard label added,
    changed or removed, the Pod Security version of a guarded namespace lowered, or the opt-in
    label removed from a namespace it alone put under the guard. Empty when the guard holds the
    namespace as before."""
    old_level, new_level = old.get(constants.LABEL_GUARD), new.get(constants.LABEL_GUARD)
    if old_level != new_level:
        if new_level is None:
            return f"removing {constants.LABEL_GUARD}={old_level}"
        if old_level is None:
            return f"adding {constants.LABEL_GUARD}={new_level}"
        return f"changing {constants.LABEL_GUARD} from {old_level} to {new_level}"
    opt_in = f"{settings.label_key}={settings.label_enabled}"
    opted_in = old.get(settings.label_key) == settings.label_enabled
    guarded = new_level is not None or new.get(settings.label_key) == settings.label_enabled
    version_key = constants.LABEL_POD_SECURITY_ENFORCE_VERSION
    old_version, new_version = old.get(version_key), new.get(version_key)
    if guarded and resolve(new_version).applied < resolve(old_version).applied:
        # The guard applies the namespace's Pod Security version: an older one drops checks
        # (probe hosts before v1.34, runAsUser before v1.23 in restricted...). A newer one, or
        # latest, only follows Pod Security forward.
        return (f"changing {version_key} from {old_version or 'latest (unset)'} to "
                f"{new_version}, an older Pod Security version for the guard")
    if opted_in and new.get(settings.label_key) != settings.label_enabled and new_level is None:
        # Un-guarded: whatever Pod Security was relaxed to there for the debug sidecar now
        # holds for every pod, and the running sidecars' annotations lose their owner check.
        return f"removing {opt_in} (which leaves the namespace unguarded)"
    return ""


def review_namespace_guard(
    request: admission.Request, engine: NamespaceLabelGate
) -> admission.Review:
    """Validating check on namespaces: only subjects with `use` on debugprofiles
    `namespace-guard` may add, change or remove the guard label, lower the Pod Security version
    (enforce-version) of a guarded namespace, or remove the opt-in label where that leaves the
    namespace unguarded. A guard label naming no level is refused."""
    unreadable = _unreadable(request)
    if unreadable is not None:
        return unreadable
    settings = engine.settings
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return admission.build_response(request, allowed=True)
    new = _labels(request.get("object"))
    change = guard_change(settings, _labels(request.get("oldObject")), new)
    if not change:
        return admission.build_response(request, allowed=True)
    name = _name(request)
    if settings.namespace_excluded(name) or name in settings.guard_exempt_namespaces:
        return admission.build_response(request, allowed=True)
    level = new.get(constants.LABEL_GUARD)
    if level is not None and level not in LEVELS:
        return admission.build_response(
            request,
            allowed=False,
            code=400,
            message=(
                f"{constants.LABEL_GUARD} must name a Pod Security level "
                f"({' or '.join(LEVELS)}), got {level!r}; fix the label"
            ),
        )
    return _decide(request, "namespace-guard", change, engine.may_change_namespace_guard)


def review_namespace_name(request: admission.Request) -> admission.Review:
    """Validating check on namespaces, for everyone: `kubernetes.io/metadata.name`, when set,
    is the namespace's own name. Kubernetes >= 1.21 sets and protects it (this then always
    passes); on 1.20 anyone who may patch a namespace could write `kube-system` there and
    leave every selector that excludes by it (issue 24). Removing it passes: on < 1.21 the
    chart's selectors do not rely on it, the webhook knows namespaces by the request's name."""
    unreadable = _unreadable(request)
    if unreadable is not None:
        return unreadable
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return admission.build_response(request, allowed=True)
    key = constants.LABEL_NAMESPACE_NAME
    labels = _labels(request.get("object"))
    name = _name(request)
    if key not in labels or labels[key] == name:
        return admission.build_response(request, allowed=True)
    value = labels[key]
    user = (request.get("userInfo") or {}).get("username", "")
    log.warning(
        "namespace-name denied",
        extra={"event": "namespace-name", "namespace": name, "decision": "forged-name-label",
               "user": user, "value": str(value)[:253]},
    )
    audit = {constants.AUDIT_DECISION: "deny", constants.AUDIT_REASON: "forged-name-label"}
    return admission.build_response(
        request,
        allowed=False,
        code=403,
        message=(
            f"namespace {name!r} may not carry {key}={str(value)[:253]!r}: that label names "
            "a namespace, and selectors (sidecar-debug's webhooks, NetworkPolicies) exclude or "
            "admit namespaces by it; Kubernetes < 1.21 does not protect it. Set it to the "
            f"namespace's own name (kubectl label namespace {name} {key}={name} --overwrite) "
            f"or remove it (kubectl label namespace {name} {key}-)"
        ),
        audit=audit,
    )
