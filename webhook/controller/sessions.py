"""Debug sessions as the API shows them, and when each one expires (pure: pods in, data out).

A pod holds up to three kinds of session:

- `injected`: our status annotation names a toolset container that is in the pod (the webhook
  injected the sidecar when the pod was created). It started with the pod.
- `standby`: the status annotation says `mode: standby`: only the inert wiring, no toolset runs,
  so nothing expires (an `attach` to it is its own session).
- `attached`: an ephemeral toolset container (`debug-toolset-<6 hex>`, or any ephemeral container
  with attach's marker variable) that is running. It started when its container started.

A session's expiry is the earliest of: its start plus the policy rule's `maxSessionDuration`
(the rule covering the pod's namespace and service account, read now), and, for an injected
sidecar, the `sidecar-debug.io/overdue-after` annotation the webhook wrote from the rule in force
when the pod was created (a promise made at admission stays kept when the policy is loosened).
Used by `sidecar-debug controller` and by `sidecar-debug sessions`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook import constants
from webhook.inject.attach import env_value, is_attached
from webhook.inject.status import read_status

INJECTED = constants.MODE_INJECTED
STANDBY = constants.MODE_STANDBY
ATTACHED = "attached"

# `attach` names its containers `debug-toolset-` + 6 hex digits (webhook.inject.attach).
_ATTACHED_NAME = re.compile(re.escape(constants.ATTACHED_CONTAINER_PREFIX) + r"[0-9a-f]{6}$")


@dataclass(frozen=True)
class Session:
    namespace: str
    pod: str
    uid: str
    kind: str  # injected | standby | attached
    container: str  # the toolset container ("" for standby)
    profile: str
    grant: str  # who granted the profile: "unprivileged", "user:alice", "serviceaccount:ns:sa"
    service_account: str
    created: dt.datetime | None  # the pod's creation
    started: dt.datetime | None  # when the session began (None: not started yet)
    overdue_after: dt.datetime | None  # the webhook's annotation (injected sessions only)

    @property
    def can_expire(self) -> bool:
        """A standby pod runs no toolset: nothing to end."""
        return self.kind != STANDBY

    def describe(self) -> str:
        if self.kind == STANDBY:
            return "standby wiring (no toolset)"
        what = "injected sidecar" if self.kind == INJECTED else "attached ephemeral container"
        return f"{what} {self.container} (profile {self.profile or 'unknown'})"


def parse_time(value: Any) -> dt.datetime | None:
    """An RFC 3339 time from the API (`2026-12-03T06:13:38Z`, fractions allowed); None when
    absent or malformed (annotations are written by whoever may edit the pod)."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def format_time(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _named(items: Any) -> list[dict[str, Any]]:
    return [c for c in (items if isinstance(items, list) else [])
            if isinstance(c, dict) and isinstance(c.get("name"), str)]


def field_dict(parent: Mapping[str, Any], key: str) -> dict[str, Any]:
    """parent[key] when it is an object, else {} (API objects are read without trusting them)."""
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def is_attached_toolset(container: Any) -> bool:
    """An ephemeral container of ours: attach's marker, or attach's name (prefix + 6 hex)."""
    name = container.get("name") if isinstance(container, dict) else None
    return is_attached(container) or (isinstance(name, str) and bool(_ATTACHED_NAME.match(name)))


def sessions_of(pod: Mapping[str, Any], sidecar_name: str = constants.DEFAULT_SIDECAR_NAME
                ) -> list[Session]:
    """The debug sessions of one pod (empty for a pod we never touched)."""
    metadata, spec = field_dict(pod, "metadata"), field_dict(pod, "spec")
    status = field_dict(pod, "status")
    annotations = field_dict(metadata, "annotations")
    namespace, name = _text(metadata.get("namespace")), _text(metadata.get("name"))
    uid = _text(metadata.get("uid"))
    account = _text(spec.get("serviceAccountName")) or "default"
    created = parse_time(metadata.get("creationTimestamp"))
    found: list[Session] = []

    # A status that is not ours still counts as injected when the sidecar is there.
    reading = read_status(pod)
    if reading.present:
        recorded = reading.status
        profile = recorded.profile if recorded else ""
        grant = recorded.grant if recorded else ""
        if recorded is not None and recorded.standby:
            found.append(Session(namespace, name, uid, STANDBY, "", profile, grant, account,
                                 created, created, None))
        else:
            sidecar = (recorded.container if recorded else "") or sidecar_name
            present = {c["name"] for c in _named(spec.get("containers"))
                       + _named(spec.get("initContainers"))}
            if sidecar in present:
                overdue = parse_time(annotations.get(constants.ANNOTATION_OVERDUE_AFTER))
                found.append(Session(namespace, name, uid, INJECTED, sidecar, profile, grant,
                                     account, created, created, overdue))

    states = {s["name"]: s.get("state") for s in _named(status.get("ephemeralContainerStatuses"))}
    for container in _named(spec.get("ephemeralContainers")):
        if not is_attached_toolset(container):
            continue
        state = states.get(container["name"])
        state = state if isinstance(state, dict) else {}
        if isinstance(state.get("terminated"), dict):
            continue  # it ended (stopped, or exited): no session any more
        running = state.get("running")
        started = parse_time(running.get("startedAt")) if isinstance(running, dict) else None
        found.append(Session(
            namespace=namespace, pod=name, uid=uid, kind=ATTACHED, container=container["name"],
            profile=env_value(container, constants.ENV_PROFILE) or "",
            grant=env_value(container, constants.ENV_GRANT) or "",
            service_account=account, created=created, started=started, overdue_after=None))
    return found


def is_active_pod(pod: Mapping[str, Any]) -> bool:
    """Running or about to: not being deleted, not finished."""
    metadata, status = field_dict(pod, "metadata"), field_dict(pod, "status")
    return not metadata.get("deletionTimestamp") and status.get("phase") not in (
        "Succeeded", "Failed")


def expiry_of(session: Session, max_session: dt.timedelta | None) -> dt.datetime | None:
    """When the session expires (see the module doc); None: never."""
    if not session.can_expire:
        return None
    candidates: list[dt.datetime] = []
    if max_session is not None and session.started is not None:
        candidates.append(session.started + max_session)
    if session.kind == INJECTED and session.overdue_after is not None:
        candidates.append(session.overdue_after)
    return min(candidates) if candidates else None


def format_age(delta: dt.timedelta) -> str:
    """kubectl's style: 45s, 12m, 3h5m, 2d4h."""
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 48:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
