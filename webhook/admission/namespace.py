"""The namespace opt-in gate: a validating check on labelling a namespace for injection."""

from __future__ import annotations

import logging

from webhook import constants
from webhook.admission import review as admission
from webhook.inject import shape
from webhook.policy.gate import PolicyGate

log = logging.getLogger(__name__)


def review_namespace(request: admission.Request, engine: PolicyGate) -> admission.Review:
    """Validating check on namespaces: only subjects with `use` on debugprofiles
    `namespace-opt-in` may add the opt-in label or change it to the enabled value."""
    settings = engine.settings
    problem = (
        shape.problem(request, shape.ENVELOPE, "request")
        or shape.problem(request.get("object"), shape.NAMESPACE, "request.object")
        or shape.problem(request.get("oldObject"), shape.NAMESPACE, "request.oldObject")
    )
    if problem is not None:
        # The apiserver never sends such a review; a client calling the webhook directly can.
        uid = request.get("uid")
        return admission.build_response(
            {"uid": uid if isinstance(uid, str) else ""},
            allowed=False,
            code=400,
            message=f"sidecar-debug cannot read the namespace review: {problem}",
        )
    operation = request.get("operation")
    new = request.get("object") or {}
    old = request.get("oldObject") or {}
    key, enabled = settings.label_key, settings.label_enabled
    new_value = ((new.get("metadata") or {}).get("labels") or {}).get(key)
    old_value = ((old.get("metadata") or {}).get("labels") or {}).get(key)
    if operation not in ("CREATE", "UPDATE") or new_value != enabled or old_value == enabled:
        return admission.build_response(request, allowed=True)
    namespace = str((new.get("metadata") or {}).get("name") or request.get("name") or "")
    user = request.get("userInfo") or {}
    allowed, reason, message = engine.may_opt_in_namespace(user, namespace)
    audit = {
        constants.AUDIT_DECISION: "allow" if allowed else "deny",
        constants.AUDIT_REASON: reason,
    }
    log.info(
        "namespace opt-in %s",
        "allowed" if allowed else "denied",
        extra={
            "event": "namespace-opt-in",
            "namespace": namespace,
            "decision": reason,
            "user": user.get("username", ""),
        },
    )
    if allowed:
        return admission.build_response(request, allowed=True, audit=audit)
    return admission.build_response(request, allowed=False, code=403, message=message, audit=audit)
