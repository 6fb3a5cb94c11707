"""Debug sessions as the API shows them, and when each one expires (pure: pods in, data out).

A pod holds up to three kinds of session:

- `injected`: a toolset container among the pod's containers or init containers, found by what
  the toolset carries in its env (its profile), not by the status annotation, which whoever may
  patch the pod could delete or rewrite (issue 17). It started with the pod.
- `standby`: no toolset, and the status annotation says `mode: standby`: only the inert wiring,
  so nothing expires (an `attach` to it is its own session).
- `attached`: an ephemeral toolset container (`debug-toolset-<6 hex>`, or any ephemeral container
  with attach's marker variable) that is running. It started when its container started.

The session's facts come from the toolset's env, written by the webhook at admission and
unchangeable afterwards (webhook.inject.sidecar.session_env): profile, grant, start, deadline.
A session's expiry is the earliest of: its start plus the policy rule's `maxSessionDuration`
(the rule covering the pod's namespace and service account, read now), and the deadline the
webhook wrote from the rule in force at admission (a promise made then stays kept when the
policy is loosened). The start is the earliest of the env's and the API's own (the pod's
creation, the container's start): a forged fact can only shorten a session.
Used by `sidecar-debug controller` and by `sidecar-debug sessions`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.inject.attach import env_value, is_attached
from webhook.wire import constants
from webhook.wire.pod import PodView, mapping, named
from webhook.wire.rfc3339 import parse_time
from webhook.wire.status import read_status

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
    deadline: dt.datetime | None  # from the toolset's env: when it must end at the latest

    @property
    def can_expire(self) -> bool:
        """A standby pod runs no toolset: nothing to end."""
        return self.kind != STANDBY

    def describe(self) -> str:
        if self.kind == STANDBY:
            return "standby wiring (no toolset)"
        what = "injected sidecar" if self.kind == INJECTED else "attached ephemeral container"
        return f"{what} {self.container} (profile {self.profile or 'unknown'})"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def is_attached_toolset(container: Any) -> bool:
    """An ephemeral container of ours: attach's marker, or attach's name (prefix + 6 hex)."""
    name = container.get("name") if isinstance(container, dict) else None
    return is_attached(container) or (isinstance(name, str) and bool(_ATTACHED_NAME.match(name)))


def sessions_of(pod: Mapping[str, Any]) -> list[Session]:
    """The debug sessions of one pod (empty for a pod we never touched)."""
    view = PodView.of(pod)
    status = mapping(pod.get("status"))
    namespace, name = view.namespace, view.name
    uid = _text(view.metadata.get("uid"))
    account = view.service_account
    created = parse_time(view.metadata.get("creationTimestamp"))
    found: list[Session] = []

    toolsets = [c for c in view.containers(("initContainers", "containers"))
                if env_value(c, constants.ENV_PROFILE) is not None]
    for container in toolsets:
        found.append(_from_env(INJECTED, container, namespace, name, uid, account, created,
                               created))
    recorded = read_status(pod).status
    if not toolsets and recorded is not None and recorded.standby:
        found.append(Session(namespace, name, uid, STANDBY, "", recorded.profile, recorded.grant,
                             account, created, created, None))

    states = {s["name"]: s.get("state") for s in named(status.get("ephemeralContainerStatuses"))}
    for container in view.containers(("ephemeralContainers",)):
        if not is_attached_toolset(container):
            continue
        state = states.get(container["name"])
        state = state if isinstance(state, dict) else {}
        if isinstance(state.get("terminated"), dict):
            continue  # it ended (stopped, or exited): no session any more
        running = state.get("running")
        started = parse_time(running.get("startedAt")) if isinstance(running, dict) else None
        found.append(_from_env(ATTACHED, container, namespace, name, uid, account, created,
                               started))
    return found


def _from_env(kind: str, container: dict[str, Any], namespace: str, pod: str, uid: str,
              account: str, created: dt.datetime | None, started: dt.datetime | None
              ) -> Session:
    """A session whose facts are the toolset's env; `started` is the API's own start."""
    admitted = parse_time(env_value(container, constants.ENV_SESSION_STARTED))
    if admitted is not None and (started is None or admitted < started):
        started = admitted
    return Session(
        namespace=namespace, pod=pod, uid=uid, kind=kind, container=container["name"],
        profile=env_value(container, constants.ENV_PROFILE) or "",
        grant=env_value(container, constants.ENV_GRANT) or "",
        service_account=account, created=created, started=started,
        deadline=parse_time(env_value(container, constants.ENV_SESSION_DEADLINE)))


def is_active_pod(pod: Mapping[str, Any]) -> bool:
    """Running or about to: not being deleted, not finished."""
    metadata, status = mapping(pod.get("metadata")), mapping(pod.get("status"))
    return not metadata.get("deletionTimestamp") and status.get("phase") not in (
        "Succeeded", "Failed")


def expiry_of(session: Session, max_session: dt.timedelta | None) -> dt.datetime | None:
    """When the session expires (see the module doc); None: never."""
    if not session.can_expire:
        return None
    candidates: list[dt.datetime] = []
    if max_session is not None and session.started is not None:
        candidates.append(session.started + max_session)
    if session.deadline is not None:
        candidates.append(session.deadline)
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
