"""Events on the objects a component acts on (the controller's expiry and schedule checks, the
results service's failed recordings): one deterministic name per (object, reason, detail), so
that a second report of the same thing is the apiserver's 409, not a second Event.

Calls: create events (in the object's namespace, or `default` for a cluster-scoped one).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging

from webhook.kube.api import ApiError, KubeApi
from webhook.wire.rfc3339 import format_time

log = logging.getLogger(__name__)


def event_name(pod: str, uid: str, reason: str, detail: str = "") -> str:
    """One name per (pod, reason, detail): the Event is created once, a second create is a 409
    (an Event per pass would flood the namespace); the same after a failover."""
    digest = hashlib.sha256(f"{uid}/{reason}/{detail}".encode()).hexdigest()[:10]
    return f"{pod[:200]}.{digest}"


def post_event(api: KubeApi, involved: dict[str, str], reason: str, message: str, *,
               warning: bool, detail: str, identity: str, now: dt.datetime,
               component: str) -> str:
    """Create an Event on `involved` (a Pod or a Namespace): "created", "exists" (its
    deterministic name was taken: reported before, by this replica or an earlier leader) or
    "failed" (logged; tried again next pass). `component` is the reporter (the controller's,
    or the results service's), `identity` its replica."""
    stamp = format_time(now)
    # A cluster-scoped object's Events live in `default` (the apiserver requires an Event's
    # namespace to be its object's, or default for none); `kubectl describe namespace` finds them.
    namespace = involved.get("namespace") or "default"
    body = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": event_name(involved["name"], involved.get("uid", ""), reason,
                                        detail),
                     "namespace": namespace},
        "involvedObject": involved,
        "reason": reason, "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        "source": {"component": component},
        "reportingComponent": component, "reportingInstance": identity,
    }
    try:
        api.call("POST", f"/api/v1/namespaces/{namespace}/events", body)
    except ApiError as error:
        if error.status == 409:
            return "exists"
        log.warning("event %s on %s %s/%s: %s", reason, involved.get("kind"), namespace,
                    involved["name"], error)
        return "failed"
    return "created"
