"""The status annotation (`sidecar-debug.io/status`): the one type that writes and reads it.

The webhook writes it on every pod it injects or wires (standby); it makes injection idempotent
and tells people what was injected. Anyone who may create or patch the pod can write the same
key, so a read never grants anything: it is a claim that the guard verifies against the pod
itself and RBAC, and the session's facts live in the toolset container's env.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.wire import constants, jsonio
from webhook.wire.shape import type_name, type_name_with_article


@dataclass(frozen=True)
class InjectionStatus:
    """What the webhook injected. `container` and `image` are empty in standby (no container)."""

    profile: str
    version: str = ""
    mode: str = constants.MODE_INJECTED
    requested_profile: str = ""
    grant: str = ""
    reason: str = ""
    container: str = ""
    image: str = ""
    runtime: str = ""
    volumes: tuple[str, ...] = field(default=())

    @property
    def standby(self) -> bool:
        return self.mode == constants.MODE_STANDBY

    def to_annotation(self) -> str:
        """The annotation's value: JSON with sorted keys. An injected pod's status carries no
        `mode` (as written since the first release); a standby pod's no container or image."""
        value: dict[str, Any] = {
            "version": self.version,
            "profile": self.profile,
            "requestedProfile": self.requested_profile or self.profile,
            "grant": self.grant,
            "reason": self.reason,
            "runtime": self.runtime,
            "volumes": list(self.volumes),
        }
        if self.standby:
            value["mode"] = self.mode
        else:
            value["container"] = self.container
            value["image"] = self.image
        return jsonio.dumps(value, sort_keys=True).decode()

    def write(self, annotations: dict[str, Any]) -> None:
        annotations[constants.ANNOTATION_STATUS] = self.to_annotation()


@dataclass(frozen=True)
class StatusReading:
    """The annotation as found on an object: absent, ours (`status`), or present but not ours
    (`problem` says why: not JSON, not an object, no container...)."""

    present: bool
    status: InjectionStatus | None = None
    problem: str = ""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def parse_status(raw: Any) -> StatusReading:
    """Read an annotation value; never raises. Fields of the wrong type read as empty, except
    the sidecar's container name, without which an injected status means nothing."""
    if raw is None:
        return StatusReading(False)
    try:
        value = json.loads(raw) if isinstance(raw, str | bytes) else raw
    except (ValueError, RecursionError):
        return StatusReading(True, problem="not JSON")
    if not isinstance(value, dict):
        return StatusReading(True, problem=f"a JSON {type_name(value)}, not an object")
    standby = value.get("mode") == constants.MODE_STANDBY
    container = value.get("container")
    if not standby:
        if "container" not in value:
            return StatusReading(True, problem='it names no "container"')
        if container == "":
            return StatusReading(True, problem='its "container" is empty')
        if not isinstance(container, str):
            return StatusReading(
                True,
                problem=f'its "container" is {type_name_with_article(container)}, not a '
                "container name",
            )
    volumes = value.get("volumes")
    status = InjectionStatus(
        profile=_text(value.get("profile")),
        version=_text(value.get("version")),
        mode=constants.MODE_STANDBY if standby else constants.MODE_INJECTED,
        requested_profile=_text(value.get("requestedProfile")),
        grant=_text(value.get("grant")),
        reason=_text(value.get("reason")),
        container="" if standby else str(container),
        image=_text(value.get("image")),
        runtime=_text(value.get("runtime")),
        volumes=tuple(v for v in volumes if isinstance(v, str))
        if isinstance(volumes, list)
        else (),
    )
    return StatusReading(True, status)


def read_status(obj: Mapping[str, Any]) -> StatusReading:
    """The status annotation of a pod or pod template (`metadata.annotations`), read safely."""
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if not isinstance(annotations, dict):
        return StatusReading(False)
    return parse_status(annotations.get(constants.ANNOTATION_STATUS))
