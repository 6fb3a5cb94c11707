"""The toolset as an ephemeral container (`sidecar-debug attach`), and how to recognise one.

Pure, like the sidecar builder it shares the environment with: the session code reads the pod and
the installed settings and sends the result; the webhook's ephemeral-container gate
(webhook.admission.ephemeral) reads the marker and the requested profile back.

What the API allows an ephemeral container: it may mount the pod's volumes but never add one;
it gets no resources, probes, ports or lifecycle hooks; and before Kubernetes 1.23 no
securityContext either (the caller says whether to add it).
"""

from __future__ import annotations

import copy
from typing import Any

from webhook.config import Settings
from webhook.inject.sidecar import app_containers, toolset_env
from webhook.profiles import Profile
from webhook.wire import constants
from webhook.wire.pod import PodView


def env_value(container: Any, name: str) -> str | None:
    """The literal value of `name` in the container's env (None when absent, set through
    valueFrom, or the env is malformed: nothing here trusts the shape)."""
    env = container.get("env") if isinstance(container, dict) else None
    if not isinstance(env, list):
        return None
    for item in env:
        if isinstance(item, dict) and item.get("name") == name:
            value = item.get("value")
            return value if isinstance(value, str) and "valueFrom" not in item else None
    return None


def is_attached(container: Any) -> bool:
    """A container `attach` added: our name prefix AND our marker variable."""
    if not isinstance(container, dict):
        return False
    name = container.get("name")
    return (
        isinstance(name, str)
        and name.startswith(constants.ATTACHED_CONTAINER_PREFIX)
        and env_value(container, constants.ENV_ATTACHED) == constants.ENV_ATTACHED_VALUE
    )


def attached_name(token: str) -> str:
    """`debug-toolset-<token>`; the token (6 hex digits from `attach`) makes it unique."""
    return f"{constants.ATTACHED_CONTAINER_PREFIX}{token}"




def shared_mounts(pod: dict[str, Any], settings: Settings) -> list[dict[str, Any]]:
    """Mounts of the pod's emptyDirs that an app container has at one of the profiles' shared
    paths (/tmp, /var/run/lttng): an injected pod's or a standby pod's shared volumes, or the
    app's own /tmp emptyDir. Perf maps and the LTTng socket are then the same files on both
    sides. Only emptyDirs: a hostPath the app mounts at /tmp must not reach the toolset."""
    view = PodView.of(pod)
    spec, volumes = view.spec, view.volumes
    paths: list[str] = []
    for profile in settings.profiles.values():
        for shared in profile.shared_volumes:
            if shared.mount_path not in paths:
                paths.append(shared.mount_path)
    containers = [c for c in app_containers(spec) if isinstance(c, dict)]
    mounts: list[dict[str, Any]] = []
    for path in paths:
        for container in containers:
            candidates = container.get("volumeMounts")
            found = next(
                (
                    m
                    for m in (candidates if isinstance(candidates, list) else [])
                    if isinstance(m, dict)
                    and str(m.get("mountPath", "")).rstrip("/") == path
                    and not m.get("subPath")
                    and not m.get("subPathExpr")
                ),
                None,
            )
            volume = volumes.get(str((found or {}).get("name")))
            if volume is not None and "emptyDir" in volume:
                mounts.append({"name": volume["name"], "mountPath": path})
                break
    return mounts


def host_path_mounts(pod: dict[str, Any], profile: Profile) -> list[dict[str, Any]]:
    """Read-only mounts of hostPath volumes the pod already has at the profile's host paths
    (an injected bcc/full pod's kernel headers). A hostPath mount is a privilege: the webhook's
    gate asks for the profile's grant, which covers exactly these paths."""
    mounts: list[dict[str, Any]] = []
    for host in profile.host_paths:
        for volume in PodView.of(pod).volumes.values():
            source = volume.get("hostPath")
            if isinstance(source, dict) and str(source.get("path", "")).rstrip("/") == host.path:
                mounts.append({"name": volume["name"], "mountPath": host.path, "readOnly": True})
                break
    return mounts


def default_target(pod: dict[str, Any], settings: Settings) -> str | None:
    """The first app container (not our injected sidecar): whose PID namespace `attach` joins."""
    for container in PodView.of(pod).spec.get("containers") or []:
        name = container.get("name") if isinstance(container, dict) else None
        if isinstance(name, str) and name != settings.sidecar_name:
            return name
    return None


def build_attach_container(
    pod: dict[str, Any],
    settings: Settings,
    profile: Profile | None,
    *,
    name: str,
    target: str,
    image: str | None = None,
    with_security_context: bool = True,
) -> dict[str, Any]:
    """The ephemeral toolset container for `pod`: the settings' image and command, the profile's
    environment (and securityContext when the cluster allows one), our marker, and mounts of the
    pod's shared emptyDirs (plus the profile's hostPaths the pod already has)."""
    env = toolset_env(profile, settings) if profile is not None else []
    env.append({"name": constants.ENV_ATTACHED, "value": constants.ENV_ATTACHED_VALUE})
    container: dict[str, Any] = {
        "name": name,
        "image": image or settings.toolset_image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": list(settings.sidecar_command),
        "targetContainerName": target,
        "env": env,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    mounts = shared_mounts(pod, settings)
    if profile is not None:
        taken = {m["mountPath"] for m in mounts}
        mounts += [m for m in host_path_mounts(pod, profile) if m["mountPath"] not in taken]
    if mounts:
        container["volumeMounts"] = mounts
    if profile is not None and with_security_context and profile.security_context:
        container["securityContext"] = copy.deepcopy(dict(profile.security_context))
    return container
