"""Build the debug sidecar and apply it to a pod: pure functions on plain dicts.

`inject_pod` returns a mutated copy (sharing what it did not change); the caller diffs it
against the original (webhook.inject.patch), so no JSON-pointer indices are ever computed by hand.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook import __version__
from webhook.config import Settings
from webhook.profiles import EnvHint, Profile
from webhook.wire import constants
from webhook.wire.rfc3339 import format_time
from webhook.wire.status import InjectionStatus

DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"


@dataclass(frozen=True)
class InjectionPlan:
    """What to inject; decided before (webhook.inject.decision + policy), applied here."""

    profile: Profile
    runtime: str | None = None
    image: str | None = None  # None: the configured toolset image
    requested_profile: str | None = None
    grant: str = "none"
    reason: str = "inject"
    extra_annotations: dict[str, str] = field(default_factory=dict)
    # Does the pod run to completion (Job, CronJob, bare pod with restartPolicy Never or
    # OnFailure)? None: read the pod's restartPolicy. Offline `inject` of a Job says True.
    completes: bool | None = None
    # standby: only the inert parts (shared volumes in the app containers, shared PID namespace,
    # runtime hints), no container; `attach` adds the toolset as an ephemeral container.
    mode: str = constants.MODE_INJECTED
    # The CA bundle of the results service (PEM), read by the webhook where it serves from:
    # with settings.results_url, the injected toolset gets the results token, URL and CA.
    # Empty (offline `inject`, or no CA readable yet): no results wiring.
    results_ca: str = ""
    # The session's facts (session_env): set by the webhook's admission, None offline.
    started: dt.datetime | None = None
    deadline: dt.datetime | None = None


@dataclass
class InjectionNotes:
    """What `inject_pod` had to adapt, for warnings and the status annotation."""

    warnings: list[str] = field(default_factory=list)
    reused_volumes: dict[str, str] = field(default_factory=dict)  # mountPath -> existing volume


def _plain_copy(value: Any) -> Any:
    """A deep copy of JSON-like data: the sidecar must not share objects with the settings, which
    live as long as the process (copy.deepcopy does the same at several times the cost)."""
    if isinstance(value, Mapping):
        return {key: _plain_copy(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_copy(item) for item in value]
    return value


def _copy_container(container: Any) -> Any:
    if not isinstance(container, dict):
        return container
    copied = dict(container)
    if isinstance(copied.get("volumeMounts"), list):
        copied["volumeMounts"] = list(copied["volumeMounts"])
    if isinstance(copied.get("env"), list):
        copied["env"] = [dict(item) if isinstance(item, dict) else item for item in copied["env"]]
    return copied


def writable_copy(pod: dict[str, Any]) -> dict[str, Any]:
    """A copy of `pod` in which exactly what `inject_pod` writes is new: the pod, its metadata and
    annotations, the spec, the container and volume lists, and in each container its dict, its
    volumeMounts list and its env entries. Everything else is shared with the original, which
    is never written to, so the diff skips those parts by identity. A whole-pod deep copy was
    the largest cost of a large pod's review (docs/performance.md)."""
    mutated = dict(pod)
    metadata = mutated.get("metadata")
    if isinstance(metadata, dict):
        metadata = mutated["metadata"] = dict(metadata)
        for key in ("annotations", "labels"):
            if isinstance(metadata.get(key), dict):
                metadata[key] = dict(metadata[key])
    spec = mutated.get("spec")
    if isinstance(spec, dict):
        spec = mutated["spec"] = dict(spec)
        for key in ("containers", "initContainers"):
            if isinstance(spec.get(key), list):
                spec[key] = [_copy_container(c) for c in spec[key]]
        if isinstance(spec.get("volumes"), list):
            spec["volumes"] = list(spec["volumes"])
    return mutated


def _slot(parent: dict[str, Any], key: str, empty: type[list[Any]] | type[dict[str, Any]]) -> Any:
    """parent[key] to write into, created empty when absent or JSON null (null counts as absent,
    as in the Kubernetes API: a manifest's bare `annotations:` is null)."""
    value = parent.get(key)
    if value is None:
        value = parent[key] = empty()
    return value


def _norm(path: str) -> str:
    return path.rstrip("/") or "/"


def _unique_name(base: str, taken: set[str]) -> str:
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def names_in_use(spec: dict[str, Any]) -> set[str]:
    """Every volume name the pod uses: its volumes', and those its containers of every kind
    mount or attach as devices, declared or not. A volume we add under a name an app container
    already mounts (a dangling mount) would be bound into that container: the node's directory,
    writable, in the app."""
    refs: list[Any] = list(spec.get("volumes") or ())
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        for container in spec.get(kind) or ():
            if isinstance(container, dict):
                refs += container.get("volumeMounts") or ()
                refs += container.get("volumeDevices") or ()
    return {r["name"] for r in refs if isinstance(r, dict) and isinstance(r.get("name"), str)}


def app_containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Containers that run beside the app: regular ones and native sidecars (restartable init)."""
    natives = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    return natives + list(spec.get("containers") or [])


def _apply_env_hints(container: dict[str, Any], hints: list[EnvHint]) -> None:
    env: list[dict[str, Any]] = _slot(container, "env", list)
    by_name = {item.get("name"): item for item in env}
    for hint in hints:
        existing = by_name.get(hint.name)
        if hint.value is not None:
            if existing is None:
                entry = {"name": hint.name, "value": hint.value}
                env.append(entry)
                by_name[hint.name] = entry
        elif hint.append is not None:
            if existing is None:
                entry = {"name": hint.name, "value": hint.append}
                env.append(entry)
                by_name[hint.name] = entry
            elif "valueFrom" not in existing:
                current = str(existing.get("value", ""))
                if hint.append not in current:
                    existing["value"] = f"{current} {hint.append}".strip()
    if not env:
        del container["env"]


def toolset_env(profile: Profile, settings: Settings) -> list[dict[str, Any]]:
    """The toolset container's environment for `profile`: the profile's own variables, then its
    name and techniques, then the debuginfod servers of the settings (when there are any); the
    injected sidecar and the container `attach` adds share it."""
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in profile.env]
    env += [
        {"name": constants.ENV_PROFILE, "value": profile.name},
        {"name": constants.ENV_TECHNIQUES, "value": ",".join(sorted(profile.techniques))},
    ]
    if settings.debuginfod_urls.split():
        env += [
            {"name": constants.ENV_DEBUGINFOD_URLS,
             "value": " ".join(settings.debuginfod_urls.split())},
            {"name": constants.ENV_DEBUGINFOD_MAXTIME,
             "value": str(settings.debuginfod_timeout_seconds)},
            {"name": constants.ENV_DEBUGINFOD_MAXSIZE, "value": str(settings.debuginfod_max_bytes)},
        ]
    return env


def results_env(settings: Settings, ca_pem: str) -> list[dict[str, Any]]:
    """Where the toolset's results agent pulls plans and pushes runs, and the CA it trusts;
    the pod's name (downward API) for apiservers that do not bind tokens to pods."""
    return [
        {"name": constants.ENV_RESULTS_URL, "value": settings.results_url},
        {"name": constants.ENV_RESULTS_CA, "value": ca_pem},
        {"name": constants.ENV_POD_NAME,
         "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
    ]
SESSION_FACTS = (constants.ENV_GRANT, constants.ENV_SESSION_STARTED, constants.ENV_SESSION_DEADLINE)


def session_env(
    grant: str, started: dt.datetime | None, deadline: dt.datetime | None
) -> list[dict[str, Any]]:
    """The session's facts in the toolset's env, where no update of the pod can change them
    (annotations can be): who granted the profile, when the webhook admitted the toolset, when
    it must end (absent: no limit). Nothing without an admission (offline inject): the webhook
    writes them when the pod is created (webhook.inject.pipeline), the guard checks them."""
    if started is None:
        return []
    env = [
        {"name": constants.ENV_GRANT, "value": grant},
        {"name": constants.ENV_SESSION_STARTED, "value": format_time(started)},
    ]
    if deadline is not None:
        env.append({"name": constants.ENV_SESSION_DEADLINE, "value": format_time(deadline)})
    return env


def with_session_env(container: dict[str, Any], facts: list[dict[str, Any]]) -> dict[str, Any]:
    """A copy of the container whose session facts are `facts` (any it had are replaced)."""
    env = container.get("env")
    kept = [
        item
        for item in (env if isinstance(env, list) else [])
        if not (isinstance(item, dict) and item.get("name") in SESSION_FACTS)
    ]
    return {**container, "env": [*kept, *facts]}


RUN_TO_COMPLETION = frozenset({"Never", "OnFailure"})


def runs_to_completion(spec: dict[str, Any], plan: InjectionPlan) -> bool:
    if plan.completes is not None:
        return plan.completes
    return spec.get("restartPolicy") in RUN_TO_COMPLETION


def build_sidecar(
    plan: InjectionPlan,
    settings: Settings,
    name: str,
    mounts: list[dict[str, Any]],
    exit_with: list[str] | None = None,
) -> dict[str, Any]:
    """The toolset container; `exit_with` (the app containers' names) makes it exit once the
    app has (a pod that runs to completion, without native sidecars)."""
    profile = plan.profile
    env = toolset_env(profile, settings)
    if exit_with is not None:
        env += [
            {"name": constants.ENV_EXIT_WITH_APP, "value": constants.ENV_EXIT_WITH_APP_VALUE},
            {"name": constants.ENV_APP_CONTAINERS, "value": ",".join(exit_with)},
        ]
    env += session_env(plan.grant, plan.started, plan.deadline)
    container: dict[str, Any] = {
        "name": name,
        "image": plan.image or settings.toolset_image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": list(settings.sidecar_command),
        "env": env,
        "resources": _plain_copy(settings.sidecar_resources),
        "securityContext": _plain_copy(profile.security_context),
        "volumeMounts": mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    ready = {"exec": {"command": list(settings.sidecar_ready_command)}}
    if settings.native_sidecar:
        # A restartable init container: the kubelet starts the app only after its startupProbe.
        container["restartPolicy"] = "Always"
        container["startupProbe"] = {**ready, "periodSeconds": 1, "failureThreshold": 60}
    elif "lttng" in profile.techniques:
        # Apps register with LTTng only if the session daemon runs when they start: as the first
        # container with a blocking postStart, the sidecar is ready before the app is started.
        container["lifecycle"] = {"postStart": ready}
    return container


def _write_status(metadata: dict[str, Any], plan: InjectionPlan, status: InjectionStatus) -> None:
    annotations: dict[str, str] = _slot(metadata, "annotations", dict)
    annotations.update(plan.extra_annotations)
    status.write(annotations)


def inject_pod(
    pod: dict[str, Any], plan: InjectionPlan, settings: Settings
) -> tuple[dict[str, Any], InjectionNotes]:
    """A copy of `pod` with the sidecar, shared volumes, hints and status applied; `pod` itself
    is left as it was (the copy shares its unchanged parts: see writable_copy)."""
    mutated = writable_copy(pod)
    notes = InjectionNotes()
    metadata = _slot(mutated, "metadata", dict)
    spec = _slot(mutated, "spec", dict)
    profile = plan.profile
    apps = app_containers(spec)
    volumes: list[dict[str, Any]] = _slot(spec, "volumes", list)
    volume_names = names_in_use(spec)
    sidecar_mounts: list[dict[str, Any]] = []

    for shared in profile.shared_volumes:
        # Reuse a volume an app container already mounts at this path: perf maps and LTTng
        # sockets only help if both sides see the very same directory.
        existing = next(
            (
                m.get("name")
                for c in apps
                for m in c.get("volumeMounts") or []
                if _norm(str(m.get("mountPath", ""))) == shared.mount_path and not m.get("subPath")
            ),
            None,
        )
        if existing is not None:
            volume_name = str(existing)
            notes.reused_volumes[shared.mount_path] = volume_name
        else:
            volume_name = _unique_name(shared.name, volume_names)
            volume_names.add(volume_name)
            volumes.append({"name": volume_name, "emptyDir": {}})
        sidecar_mounts.append({"name": volume_name, "mountPath": shared.mount_path})
        for container in apps:
            mounts = _slot(container, "volumeMounts", list)
            at_path = [m for m in mounts if _norm(str(m.get("mountPath", ""))) == shared.mount_path]
            if not at_path:
                mounts.append({"name": volume_name, "mountPath": shared.mount_path})
            elif at_path[0].get("name") != volume_name:
                notes.warnings.append(
                    f"sidecar-debug: container {container.get('name')!r} mounts another volume at "
                    f"{shared.mount_path}; the sidecar cannot see it there"
                )

    # hostPaths are the sidecar's alone (and a grant): a standby pod gets none, an ephemeral
    # container cannot add them later, so BCC in standby relies on BTF (/sys/kernel/btf).
    standby = plan.mode == constants.MODE_STANDBY
    for host in () if standby else profile.host_paths:
        volume_name = _unique_name(host.name, volume_names)
        volume_names.add(volume_name)
        volumes.append({"name": volume_name, "hostPath": {"path": host.path, "type": host.type}})
        sidecar_mounts.append({"name": volume_name, "mountPath": host.path, "readOnly": True})

    results = not standby and bool(plan.results_ca and settings.results_url)
    if results:
        # The toolset's identity towards the results service: a projected token bound to this
        # pod and to the service's audience (useless against the apiserver), renewed by the
        # kubelet, mounted in the toolset only. The label lets the service's NetworkPolicy
        # admit the pod (it opens the network path; the token decides).
        token_volume = _unique_name(constants.RESULTS_TOKEN_VOLUME, volume_names)
        volume_names.add(token_volume)
        volumes.append({"name": token_volume, "projected": {"sources": [{
            "serviceAccountToken": {"audience": settings.results_audience,
                                    "expirationSeconds": settings.results_token_seconds,
                                    "path": constants.RESULTS_TOKEN_FILE}}]}})
        sidecar_mounts.append({"name": token_volume, "mountPath": constants.RESULTS_TOKEN_DIR,
                               "readOnly": True})
        _slot(metadata, "labels", dict)[constants.LABEL_RESULTS_AGENT] = \
            constants.LABEL_RESULTS_AGENT_VALUE

    if not volumes:
        del spec["volumes"]

    if plan.runtime:
        hints = [
            h
            for h in settings.profile_set.runtimes.get(plan.runtime, ())
            if h.technique in profile.techniques
        ]
        for container in apps:
            _apply_env_hints(container, hints)

    if profile.share_process_namespace:
        if spec.get("hostPID"):
            # The API rejects hostPID together with shareProcessNamespace; the host PID
            # namespace already holds the app's processes.
            pass
        else:
            if spec.get("shareProcessNamespace") is False:
                notes.warnings.append(
                    f"sidecar-debug: shareProcessNamespace was false; set to true because profile "
                    f"{profile.name!r} needs to see the app's processes (opt out with annotation "
                    f'{constants.ANNOTATION_INJECT}: "false")'
                )
            spec["shareProcessNamespace"] = True

    if standby:
        standby_status = InjectionStatus(
            version=__version__,
            mode=constants.MODE_STANDBY,
            profile=profile.name,
            requested_profile=plan.requested_profile or profile.name,
            grant=plan.grant,
            reason=plan.reason,
            runtime=plan.runtime or "",
            volumes=tuple(m["name"] for m in sidecar_mounts),
        )
        _write_status(metadata, plan, standby_status)
        return mutated, notes

    taken = {
        c.get("name") for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
    }
    name = _unique_name(settings.sidecar_name, {n for n in taken if isinstance(n, str)})
    containers = _slot(spec, "containers", list)
    exit_with: list[str] | None = None
    if runs_to_completion(spec, plan) and not settings.native_sidecar:
        # Without native sidecars (Kubernetes < 1.29) a toolset that idles forever would keep a
        # Job's pod running: the toolset exits 0 once the app's processes are gone.
        exit_with = [str(c.get("name", "")) for c in containers]
        if spec.get("hostPID") or not spec.get("shareProcessNamespace"):
            notes.warnings.append(
                "sidecar-debug: the pod runs to completion but the toolset cannot see the app's "
                "processes (no shared PID namespace), so it cannot exit with the app: the pod "
                "keeps running after the app ends until the sidecar is stopped"
            )
    sidecar = build_sidecar(plan, settings, name, sidecar_mounts, exit_with)
    if results:
        sidecar["env"] += results_env(settings, plan.results_ca)
    annotations: dict[str, str] = _slot(metadata, "annotations", dict)
    if settings.native_sidecar:
        _slot(spec, "initContainers", list).insert(0, sidecar)
    else:
        # First, so that the kubelet starts it (and waits for its postStart) before the app.
        if containers and DEFAULT_CONTAINER_ANNOTATION not in annotations:
            # Keep `kubectl logs/exec` pointed at the app, not at the sidecar now in front.
            annotations[DEFAULT_CONTAINER_ANNOTATION] = str(containers[0].get("name", ""))
        containers.insert(0, sidecar)

    status = InjectionStatus(
        version=__version__,
        profile=profile.name,
        requested_profile=plan.requested_profile or profile.name,
        grant=plan.grant,
        reason=plan.reason,
        container=name,
        image=str(sidecar["image"]),
        runtime=plan.runtime or "",
        volumes=tuple(m["name"] for m in sidecar_mounts),
    )
    _write_status(metadata, plan, status)
    return mutated, notes
