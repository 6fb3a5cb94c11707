"""Ephemeral containers go through the same gate as an injected sidecar.

A `pods/ephemeralcontainers` UPDATE adds containers to a running pod (`sidecar-debug attach`,
`kubectl debug`). Each NEW container that asks for privileges - by the one privilege rule
(webhook.guard.privilege: beyond Pod Security baseline, the guard's checks) applied to its
securityContext and hostPath mounts - or that is our toolset naming a profile (env
SIDECAR_DEBUG_PROFILE) is decided like an injection: profile (one whose toolset goes beyond
baseline in every way the container does, same fields, same values), policy, RBAC, but with
the requester's grant only (the pod's service account did not ask for
it). A refusal denies the whole update, saying why and which `kubectl create rolebinding` would
allow it. Opt-in and opt-out labels play no part here: a label must not open or close the gate.
Unprivileged containers that are not our toolset pass untouched.

Shapes: Kubernetes 1.20-1.21 send an `EphemeralContainers` object (the list at the top level,
metadata without labels, no volumes, no service account: the pod is read when a new container
needs them, see tests/fixtures/admission/ephemeral-containers.json); 1.22+ send the Pod.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from webhook.admission.review import Request
from webhook.config import Settings
from webhook.guard.privilege import beyond, extent, privilege_reasons, requires_grant
from webhook.inject.attach import env_value, is_attached
from webhook.inject.patch import create_patch
from webhook.inject.sidecar import session_env, with_session_env
from webhook.policy.api import PolicyEngine, PolicyRequest
from webhook.profiles import Profile
from webhook.wire import constants, shape
from webhook.wire.pod import service_account

if TYPE_CHECKING:
    from webhook.kube.access import PodReader

log = logging.getLogger(__name__)

LEGACY_KIND = "EphemeralContainers"  # the subresource's own kind before Kubernetes 1.22
POD_READ_TIMEOUT_SECONDS = 2.0

Status = Literal["attached", "ignored", "denied"]


@dataclass
class EphemeralOutcome:
    status: Status
    reason: str
    message: str
    code: int = 403
    patch: list[dict[str, Any]] = field(default_factory=list)
    profile: str = ""  # the gated containers' profiles, comma-separated
    grant: str = ""
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Verdict:
    allowed: bool
    reason: str
    message: str
    code: int = 403
    profile: str = ""
    grant: str = ""
    warnings: tuple[str, ...] = ()
    started: dt.datetime | None = None
    deadline: dt.datetime | None = None


class _PodContext:
    """The pod behind the review: the object itself from 1.22, else read once when needed."""

    def __init__(
        self, request: Request, obj: dict[str, Any], legacy: bool, reader: PodReader | None
    ) -> None:
        self._request, self._reader = request, reader
        self._pod: dict[str, Any] | None = None if legacy else obj
        self._error = ""
        self.namespace = str(
            request.get("namespace") or (obj.get("metadata") or {}).get("namespace") or ""
        )
        self.name = str(request.get("name") or (obj.get("metadata") or {}).get("name") or "")

    def get(self) -> dict[str, Any] | None:
        """The pod, or None (then `error` says why)."""
        if self._pod is None and not self._error:
            if self._reader is None:
                self._error = "the webhook has no Kubernetes API access configured"
            else:
                try:
                    pod = self._reader.read_pod(self.namespace, self.name, POD_READ_TIMEOUT_SECONDS)
                except Exception as exc:  # noqa: BLE001 - any failure means "cannot check"
                    self._error = str(exc) or repr(exc)
                else:
                    if isinstance(pod, dict) and isinstance(pod.get("spec"), dict):
                        self._pod = pod
                    else:
                        self._error = "the API returned no pod spec"
        return self._pod

    @property
    def error(self) -> str:
        return (
            f"reading pod {self.namespace}/{self.name} failed ({self._error}); the webhook "
            "needs `get` on pods for ephemeral containers on Kubernetes < 1.22"
        )

    def service_account(self) -> str | None:
        pod = self.get()
        if pod is None:
            return None
        return service_account(pod)

    def volumes(self) -> dict[str, dict[str, Any]] | None:
        pod = self.get()
        if pod is None:
            return None
        volumes = pod["spec"].get("volumes")
        return {
            str(v.get("name")): v
            for v in (volumes if isinstance(volumes, list) else [])
            if isinstance(v, dict)
        }


def _containers(obj: dict[str, Any], legacy: bool) -> tuple[list[Any], str]:
    """(the ephemeral containers, where the list lives) in either shape."""
    if legacy:
        found = obj.get("ephemeralContainers")
        return (found if isinstance(found, list) else []), "ephemeralContainers"
    spec = obj.get("spec")
    found = spec.get("ephemeralContainers") if isinstance(spec, dict) else None
    return (found if isinstance(found, list) else []), "spec.ephemeralContainers"


def uncovered(
    profile: Profile, security_context: Mapping[str, Any], host_paths: list[str]
) -> tuple[str, ...]:
    """What the container asks for beyond `profile`'s own securityContext and hostPaths, by
    the one privilege rule (Pod Security baseline, as the guard checks it)."""
    return beyond(
        security_context,
        host_paths,
        profile.security_context,
        [h.path for h in profile.host_paths],
    )


def covering_profile(
    settings: Settings, security_context: Mapping[str, Any], host_paths: list[str]
) -> Profile | None:
    """The least privileged profile whose grant covers what the container asks for: the grant
    a `kubectl debug --profile=sysadmin` container needs is `use` on that profile."""
    candidates = [
        p
        for p in settings.profiles.values()
        if requires_grant(p) and not uncovered(p, security_context, host_paths)
    ]
    if not candidates:
        return None
    return min(
        candidates,
        key=lambda p: extent(p.security_context, [h.path for h in p.host_paths]),
    )


def _review_container(
    container: dict[str, Any],
    context: _PodContext,
    request: Request,
    settings: Settings,
    policy: PolicyEngine,
) -> _Verdict:
    name = str(container.get("name"))
    toolset = is_attached(container)
    env = container.get("env")
    named_profile = any(
        isinstance(item, dict) and item.get("name") == constants.ENV_PROFILE
        for item in (env if isinstance(env, list) else [])
    )
    profile_name = env_value(container, constants.ENV_PROFILE)
    if named_profile and profile_name is None:
        return _Verdict(
            False,
            "invalid-profile",
            f"ephemeral container {name!r}: {constants.ENV_PROFILE} must be a literal value "
            "naming a debug profile",
            code=400,
        )
    raw_context = container.get("securityContext")
    security_context: Mapping[str, Any] = raw_context if isinstance(raw_context, dict) else {}
    raw_mounts = container.get("volumeMounts")
    mounts = [m for m in raw_mounts if isinstance(m, dict)] if isinstance(raw_mounts, list) else []
    host_paths: list[str] = []
    if mounts:
        volumes = context.volumes()
        if volumes is None:
            return _Verdict(
                False,
                "pod-lookup-failed",
                f"sidecar-debug cannot check the volumes ephemeral container {name!r} mounts: "
                f"{context.error}",
            )
        for mount in mounts:
            source = (volumes.get(str(mount.get("name"))) or {}).get("hostPath")
            if isinstance(source, dict):
                host_paths.append(str(source.get("path", "")).rstrip("/") or "/")
    own = privilege_reasons(security_context, host_paths)
    if profile_name is None and not own:
        if toolset:
            return _Verdict(
                True,
                "unprivileged",
                f"ephemeral container {name!r} needs no grant",
                grant="unprivileged",
            )
        return _Verdict(
            True, "unprivileged-ephemeral", f"ephemeral container {name!r} asks for no privileges"
        )
    image = str(container.get("image") or "")
    if profile_name is not None:
        profile = settings.profiles.get(profile_name)
        if profile is None:
            return _Verdict(
                False,
                "unknown-profile",
                f"ephemeral container {name!r} asks for unknown debug profile {profile_name!r} "
                f"({constants.ENV_PROFILE}); known profiles: "
                f"{', '.join(sorted(settings.profiles))}",
                code=400,
            )
        missing = uncovered(profile, security_context, host_paths)
        if missing:
            return _Verdict(
                False,
                "beyond-profile",
                f"sidecar-debug denied the ephemeral container {name!r}: it asks for "
                f"{'; '.join(missing)}, beyond what profile {profile.name!r} grants; use a "
                "profile that covers it, or drop those settings",
                profile=profile.name,
            )
    else:
        covering = covering_profile(settings, security_context, host_paths)
        if covering is None:
            return _Verdict(
                False,
                "no-covering-profile",
                f"sidecar-debug denied the ephemeral container {name!r}: it asks for "
                f"{'; '.join(own)}, and no debug profile grants that much (profiles: "
                f"{', '.join(sorted(settings.profiles))}); a platform team can add one",
            )
        profile = covering
    service_account = context.service_account()
    if service_account is None:
        return _Verdict(
            False,
            "pod-lookup-failed",
            f"sidecar-debug cannot decide on ephemeral container {name!r}: {context.error}",
            profile=profile.name,
        )
    ours = toolset or profile_name is not None
    result = policy.evaluate(
        PolicyRequest(
            namespace=context.namespace,
            service_account=service_account,
            user=request.get("userInfo") or {},
            requested_profile=profile,
            requested_image=image if ours and image != settings.toolset_image else None,
            dry_run=bool(request.get("dryRun")),
            ephemeral_container=name,
        )
    )
    if not result.allowed or result.profile is None or result.profile.name != profile.name:
        # Every refusal of an ephemeral request is a denial (PolicyGate); another engine that
        # downgrades or skips is refused here too: the container cannot be changed into another.
        message = result.message
        if result.allowed:
            message = f"sidecar-debug denied the ephemeral container {name!r}: {message}"
        if profile_name is None:
            message = (
                f"ephemeral container {name!r} asks for {'; '.join(own)}, which profile "
                f"{profile.name!r} covers. {message}"
            )
        return _Verdict(
            False, result.reason, message, profile=profile.name, warnings=result.warnings
        )
    return _Verdict(
        True,
        result.reason,
        result.message,
        profile=profile.name,
        grant=result.grant,
        warnings=result.warnings,
        started=result.started,
        deadline=result.deadline,
    )


def review_ephemeral(
    request: Request,
    settings: Settings,
    policy: PolicyEngine,
    pods: PodReader | None = None,
) -> EphemeralOutcome:
    """The decision for one `pods/ephemeralcontainers` review (either shape)."""
    if request.get("operation") != "UPDATE":
        return EphemeralOutcome(
            "ignored",
            "operation",
            f"operation {request.get('operation')!r} on ephemeralcontainers is not reviewed",
        )
    namespace = str(request.get("namespace") or "")
    if settings.namespace_excluded(namespace):
        # By the request's name (the apiserver's), as the injection and the guard: on
        # Kubernetes < 1.21 the chart's entries cannot exclude by the unprotected name label.
        return EphemeralOutcome(
            "ignored", "excluded-namespace",
            f"namespace {namespace!r} is excluded from debug injection",
        )
    obj = request.get("object")
    if not isinstance(obj, dict):
        return EphemeralOutcome("ignored", "no-object", "request carries no object")
    kind = request.get("kind") or {}
    legacy = obj.get("kind") == LEGACY_KIND or kind.get("kind") == LEGACY_KIND
    expected = shape.EPHEMERAL_CONTAINERS if legacy else shape.POD
    old = request.get("oldObject")
    problem = shape.problem(obj, expected, "object") or shape.problem(old, expected, "oldObject")
    if problem is not None:
        return EphemeralOutcome(
            "denied",
            "malformed",
            f"sidecar-debug cannot read the {'EphemeralContainers' if legacy else 'Pod'}: "
            f"{problem}",
            code=400,
        )
    containers, where = _containers(obj, legacy)
    old_containers, _ = _containers(old, legacy) if isinstance(old, dict) else ([], "")
    old_names = {c.get("name") for c in old_containers if isinstance(c, dict)}
    context = _PodContext(request, obj, legacy, pods)
    added: list[tuple[int, dict[str, Any]]] = []
    for index, container in enumerate(containers):
        if not isinstance(container, dict) or not isinstance(container.get("name"), str):
            return EphemeralOutcome(
                "denied",
                "malformed",
                f"{where}[{index}] is not a container with a name",
                code=400,
            )
        if container["name"] not in old_names:
            added.append((index, container))
    if not added:
        return EphemeralOutcome(
            "ignored", "no-new-ephemeral-container", "no ephemeral container was added"
        )
    verdicts: list[tuple[int, dict[str, Any], _Verdict]] = []
    for index, container in added:
        verdict = _review_container(container, context, request, settings, policy)
        if not verdict.allowed:
            return EphemeralOutcome(
                "denied",
                verdict.reason,
                verdict.message,
                code=verdict.code,
                profile=verdict.profile,
                warnings=list(verdict.warnings),
            )
        verdicts.append((index, container, verdict))
    gated = [(i, c, v) for i, c, v in verdicts if v.grant]
    if not gated:
        return EphemeralOutcome(
            "ignored",
            verdicts[0][2].reason,
            "; ".join(v.message for _, _, v in verdicts),
        )
    mutated_list = list(containers)
    for index, container, verdict in gated:
        if is_attached(container) or env_value(container, constants.ENV_PROFILE) is not None:
            # The session's facts (who granted it, since when, until when), replacing whatever
            # the requester wrote there; the guard checks them, the controller reads them.
            mutated_list[index] = with_session_env(
                container, session_env(verdict.grant, verdict.started, verdict.deadline)
                or [{"name": constants.ENV_GRANT, "value": verdict.grant}],
            )
    if legacy:
        mutated = {**obj, "ephemeralContainers": mutated_list}
    else:
        mutated = {**obj, "spec": {**obj["spec"], "ephemeralContainers": mutated_list}}
    warnings = [w for _, _, v in verdicts for w in v.warnings]
    return EphemeralOutcome(
        "attached",
        ",".join(dict.fromkeys(v.reason for _, _, v in gated)),
        "; ".join(v.message for _, _, v in gated),
        patch=create_patch(obj, mutated),
        profile=",".join(v.profile for _, _, v in gated if v.profile),
        grant=",".join(v.grant for _, _, v in gated),
        warnings=warnings,
    )
