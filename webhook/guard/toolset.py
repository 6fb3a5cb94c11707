"""Which containers of a pod are sidecar-debug's toolset, decided from the pod alone.

Nothing a pod's creator writes is trusted: not the status annotation, not a container's name,
not its image (the toolset image is public). A container is our toolset only if it is exactly
what the injector (webhook.inject.sidecar.build_sidecar) or `attach`
(webhook.inject.attach.build_attach_container) builds for the profile it claims (its env
SIDECAR_DEBUG_PROFILE): the same code builds the expected container from the settings and the
pod, and the two are compared field by field.

Why rebuild-and-compare rather than a signature: there is no key to keep, rotate and protect
(a key in a Secret readable by the webhook is one more thing that, once read, forges toolsets);
offline `guard check` verifies the same way without any secret; and a signature would still
need the fields it covers chosen exactly as here. What may differ from the built container is
only what the apiserver or the webhook adds on purpose:

- the webhook's facts in the env: SIDECAR_DEBUG_GRANT (who granted it) and the session's start
  and deadline (RFC 3339 UTC), each at most once, literal and well-formed;
- the mount names of the shared directories (the injector reuses an app's volume at /tmp), and
  of the profile's hostPaths, whose volumes must be exactly the profile's hostPath (path, type);
- the service account token mount the apiserver adds to every container (read-only, at
  /var/run/secrets/kubernetes.io/serviceaccount, of a projected or secret volume);
- the results wiring the webhook adds to an injected toolset when the results service is
  configured: the results token mount (a projected serviceAccountToken volume with exactly the
  settings' audience and lifetime) and the results env (the settings' URL, a PEM CA bundle,
  the pod's name from the downward API);
- the apiserver's defaults: terminationMessagePath, a probe's timeoutSeconds/successThreshold,
  securityContext.procMount Default; resources (requests and limits only: LimitRanges set
  them, and they grant nothing);
- the image: the configured toolset image, or one the caller's policy allows.

A container that runs the toolset image (its repository, with any tag or digest) and is not a
verified toolset is a violation; so is a status annotation that claims an injection no
verified toolset backs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from webhook.config import Settings
from webhook.guard.pss import ContainerRef, Violation, quote, shown
from webhook.inject.attach import build_attach_container, env_value, is_attached
from webhook.inject.sidecar import (
    SESSION_FACTS,
    InjectionPlan,
    app_containers,
    build_sidecar,
    results_env,
)
from webhook.profiles import Profile
from webhook.wire import constants
from webhook.wire.image import image_repository
from webhook.wire.shape import type_name_with_article
from webhook.wire.status import read_status

SERVICE_ACCOUNT_MOUNT: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
TERMINATION_MESSAGE_PATH: Final = "/dev/termination-log"
PROBE_DEFAULTS: Final = {"timeoutSeconds": 1, "successThreshold": 1}
_RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_GRANT_MAX = 512
CHECK_IMAGE: Final = "toolsetImage"
CHECK_STATUS: Final = "toolsetStatus"
REASON_IMAGE: Final = "reserved toolset image"
REASON_STATUS: Final = "unverified injection status"
STATUS_FIELD: Final = f"metadata.annotations[{quote(constants.ANNOTATION_STATUS)}]"


@dataclass(frozen=True)
class Toolset:
    """A container verified to be our toolset for `profile`; `host_volumes` are the hostPath
    volumes of the profile it mounts."""

    container: ContainerRef
    profile: str
    host_volumes: tuple[str, ...] = ()

    @property
    def attached(self) -> bool:
        return self.container.kind == "ephemeralContainers"


@dataclass(frozen=True)
class ToolsetReport:
    toolsets: tuple[Toolset, ...]
    violations: tuple[Violation, ...]


ImageAllowed = Callable[[str], bool]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _spec(pod: Any) -> Mapping[str, Any]:
    return _mapping(_mapping(pod).get("spec"))


def _volumes(pod: Any) -> dict[str, Mapping[str, Any]]:
    found: dict[str, Mapping[str, Any]] = {}
    for volume in _list(_spec(pod).get("volumes")):
        if isinstance(volume, Mapping) and isinstance(volume.get("name"), str):
            found.setdefault(volume["name"], volume)
    return found


def _fact_problem(name: str, value: Any) -> str | None:
    """Why a fact the webhook writes into the toolset's env is not one it wrote."""
    if not isinstance(value, str):
        return f"env {name} is {type_name_with_article(value)}, not a literal value"
    if name == constants.ENV_GRANT:
        if not value or len(value) > _GRANT_MAX or not value.isprintable():
            return f"env {name} {shown(value)} is not who granted it"
        return None
    if not _RFC3339_UTC.match(value):
        return f"env {name} {shown(value)} is not an RFC 3339 UTC time"
    try:
        dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return f"env {name} {shown(value)} is not an RFC 3339 UTC time"
    return None


def _env_problem(actual: Any, expected: list[dict[str, Any]]) -> str | None:
    if not isinstance(actual, list):
        return "its env is not what sidecar-debug builds"
    kept: list[Any] = []
    seen: set[str] = set()
    for item in actual:
        name = item.get("name") if isinstance(item, Mapping) else None
        if name in SESSION_FACTS:
            if name in seen:
                return f"env {name} is set twice"
            seen.add(str(name))
            if set(item) != {"name", "value"}:
                return f"env {name} is not a literal value"
            problem = _fact_problem(str(name), item.get("value"))
            if problem:
                return problem
            continue
        kept.append(item)
    if kept == expected:
        return None
    names = [str(i.get("name")) if isinstance(i, Mapping) else shown(i) for i in kept]
    wanted = [str(i["name"]) for i in expected]
    extra = [n for n in names if n not in wanted]
    if extra:
        return f"its env has {', '.join(extra[:3])}, which sidecar-debug does not set"
    return "its env differs from what sidecar-debug sets for the profile"


def _probe_problem(key: str, actual: Any, expected: Any) -> str | None:
    if not isinstance(actual, Mapping) or expected is None:
        return None if actual == expected else f"{key} differs"
    extra = {k: v for k, v in actual.items() if k not in expected}
    if any(PROBE_DEFAULTS.get(k) != v or type(v) is not int for k, v in extra.items()):
        return f"{key} differs"
    same = all(actual.get(k) == v for k, v in expected.items())
    return None if same else f"{key} differs"


def _security_problem(actual: Any, expected: Any) -> str | None:
    got = dict(_mapping(actual)) if actual is not None else {}
    if actual is not None and not isinstance(actual, Mapping):
        return "its securityContext is not an object"
    if got.get("procMount") == "Default" and "procMount" not in _mapping(expected):
        del got["procMount"]
    want = dict(_mapping(expected))
    if got == want:
        return None
    keys = sorted({*got, *want}, key=str)
    differing = [str(k) for k in keys if got.get(k) != want.get(k)]
    return f"its securityContext differs from the profile's ({', '.join(differing[:4])})"


def _results_token_problem(
    mount: Mapping[str, Any], volume: Mapping[str, Any], settings: Settings
) -> str | None:
    """Why a mount at the results token directory is not the one the webhook adds."""
    wanted = [
        {
            "serviceAccountToken": {
                "audience": settings.results_audience,
                "expirationSeconds": settings.results_token_seconds,
                "path": constants.RESULTS_TOKEN_FILE,
            }
        }
    ]
    projected = _mapping(volume.get("projected"))
    if (
        not settings.results_url
        or mount.get("readOnly") is not True
        or set(volume) - {"name", "projected"}
        or set(projected) - {"sources", "defaultMode"}
        or projected.get("sources") != wanted
    ):
        return f"its mount at {constants.RESULTS_TOKEN_DIR} is not the results token"
    return None


def _results_ca_problem(value: Any) -> str | None:
    if (
        not isinstance(value, str)
        or len(value) > 65536
        or "-----BEGIN CERTIFICATE-----" not in value
        or not value.isascii()
    ):
        return f"its {constants.ENV_RESULTS_CA} is not a PEM certificate bundle"
    return None


def _mounts(
    container: Mapping[str, Any], pod: Any, profile: Profile, settings: Settings
) -> tuple[list[dict[str, Any]], tuple[str, ...], str | None]:
    """The mounts the injector would have built (with the names found), the hostPath volumes
    among them, or why the container's mounts are not those."""
    volumes = _volumes(pod)
    actual = container.get("volumeMounts")
    if actual is not None and not isinstance(actual, list):
        return [], (), "its volumeMounts are not a list"
    mounts = [m for m in (actual or []) if isinstance(m, Mapping)]
    if len(mounts) != len(actual or []):
        return [], (), "its volumeMounts are not all objects"
    by_path: dict[str, Mapping[str, Any]] = {}
    for mount in mounts:
        path = mount.get("mountPath")
        if not isinstance(path, str) or path in by_path:
            return [], (), f"it mounts {shown(path)} twice or as no path"
        by_path[path] = mount
    expected: list[dict[str, Any]] = []
    host_volumes: list[str] = []
    for shared in profile.shared_volumes:
        if shared.mount_path not in by_path:
            return [], (), f"it does not mount the shared {shared.mount_path}"
        mount = by_path.pop(shared.mount_path)
        expected.append({"name": mount.get("name"), "mountPath": shared.mount_path})
    for host in profile.host_paths:
        if host.path not in by_path:
            return [], (), f"it does not mount the profile's hostPath {host.path}"
        mount = by_path.pop(host.path)
        name = mount.get("name")
        source = _mapping(_mapping(volumes.get(str(name))).get("hostPath"))
        if source.get("path") != host.path or (source.get("type") or "") != host.type:
            wanted = f"path {host.path}" + (f", type {host.type}" if host.type else "")
            return [], (), f"its mount at {host.path} is not the profile's hostPath ({wanted})"
        expected.append({"name": name, "mountPath": host.path, "readOnly": True})
        host_volumes.append(str(name))
    token = by_path.pop(constants.RESULTS_TOKEN_DIR, None)
    if token is not None:
        name = token.get("name")
        problem = _results_token_problem(token, _mapping(volumes.get(str(name))), settings)
        if problem:
            return [], (), problem
        expected.append({"name": name, "mountPath": constants.RESULTS_TOKEN_DIR, "readOnly": True})
    by_path.pop(SERVICE_ACCOUNT_MOUNT, None)  # checked by _compare
    if by_path:
        return [], (), f"it mounts {', '.join(sorted(by_path)[:3])}, which the profile does not"
    return expected, tuple(host_volumes), None


def _mounts_problem(
    actual: Any, expected: list[dict[str, Any]], volumes: Mapping[str, Mapping[str, Any]]
) -> str | None:
    """The container's mounts are `expected` (in any order), plus at most the service account
    token the apiserver mounts into every container. No subPath, no propagation."""
    given: list[Mapping[str, Any]] = []
    for mount in _list(actual):
        if not isinstance(mount, Mapping) or set(mount) - {"name", "mountPath", "readOnly"}:
            return "its volumeMounts are not the profile's (subPath, propagation, ...)"
        if mount.get("mountPath") == SERVICE_ACCOUNT_MOUNT:
            volume = volumes.get(str(mount.get("name")), {})
            if mount.get("readOnly") is not True or (
                volume.get("projected") is None and volume.get("secret") is None
            ):
                return f"its mount at {SERVICE_ACCOUNT_MOUNT} is not the service account token"
            continue
        given.append(mount)
    if sorted(map(_key, given)) != sorted(map(_key, expected)):
        return "its volumeMounts are not the profile's"
    return None


def _key(mount: Mapping[str, Any]) -> str:
    return repr(sorted(mount.items(), key=lambda kv: str(kv[0])))


def _compare(
    actual: Mapping[str, Any],
    expected: Mapping[str, Any],
    mounts: list[dict[str, Any]] | None,
    volumes: Mapping[str, Mapping[str, Any]],
) -> str | None:
    """Why `actual` is not `expected` (None: it is), with the tolerances the module says."""
    for key in sorted({*actual, *expected}, key=str):
        got, want = actual.get(key), expected.get(key)
        problem: str | None = None
        if key == "env":
            problem = _env_problem(got, want or [])
        elif key == "securityContext":
            problem = _security_problem(got, want)
        elif key == "volumeMounts":
            problem = _mounts_problem(got, mounts or [], volumes)
        elif key == "resources":
            if got is not None and not (
                isinstance(got, Mapping) and set(got) <= {"requests", "limits"}
            ):
                problem = "its resources ask for more than requests and limits"
        elif key == "terminationMessagePath":
            if got not in (None, TERMINATION_MESSAGE_PATH):
                problem = f"its terminationMessagePath is {shown(got)}"
        elif key in ("startupProbe", "livenessProbe", "readinessProbe"):
            problem = _probe_problem(key, got, want)
        elif got != want:
            problem = (
                f"it sets {key}, which sidecar-debug does not"
                if want is None
                else f"its {key} is not what sidecar-debug sets ({shown(got)})"
            )
        if problem:
            return problem
    return None


def _sidecar_name(name: str, settings: Settings) -> bool:
    """The injector's name: the configured one, or with -2, -3, ... when an app took it."""
    base = settings.sidecar_name
    if name == base:
        return True
    suffix = name.removeprefix(base + "-")
    return suffix != name and suffix.isdigit() and int(suffix) >= 2 and str(int(suffix)) == suffix


def _verify(
    pod: Any,
    ref: ContainerRef,
    container: Mapping[str, Any],
    settings: Settings,
    image_allowed: ImageAllowed | None,
) -> tuple[Toolset | None, str]:
    """The verified toolset, or None and why not."""
    profile_name = env_value(container, constants.ENV_PROFILE)
    if profile_name is None:
        return None, f"it names no debug profile ({constants.ENV_PROFILE})"
    profile = settings.profiles.get(profile_name)
    if profile is None:
        return None, f"it names {quote(profile_name)}, which is no debug profile"
    image = container.get("image")
    if not isinstance(image, str) or not (
        image == settings.toolset_image or (image_allowed is not None and image_allowed(image))
    ):
        return None, f"its image {shown(image)} is not one the policy allows for the toolset"
    volumes = _volumes(pod)
    if ref.kind == "ephemeralContainers":
        if not is_attached(container):
            return None, "it is not a container `sidecar-debug attach` adds"
        target = container.get("targetContainerName")
        apps = {c.get("name") for c in app_containers(_app_spec(pod))}
        if not isinstance(target, str) or target not in apps:
            return None, f"its targetContainerName {shown(target)} is no app container"
        expected = build_attach_container(
            dict(_mapping(pod)),
            settings,
            profile,
            name=ref.name,
            target=target,
            image=image,
            with_security_context=bool(container.get("securityContext")),
        )
        # attach mounts what the pod has: the pod's shared emptyDirs and the profile's hostPaths
        # it already has (an injected bcc/full pod's), so the built list is the one to match.
        mounts = list(expected.get("volumeMounts") or [])
        host_volumes = tuple(
            str(m["name"]) for m in mounts if _mapping(volumes.get(m["name"])).get("hostPath")
        )
    else:
        mounts, host_volumes, problem = _mounts(container, pod, profile, settings)
        if problem:
            return None, problem
        if not _sidecar_name(ref.name, settings):
            return None, f"its name {quote(ref.name)} is not the injected sidecar's"
        native = ref.kind == "initContainers"
        if native and container.get("restartPolicy") != "Always":
            return None, "it is an init container, not a native sidecar (restartPolicy Always)"
        exit_with: list[str] | None = None
        if env_value(container, constants.ENV_EXIT_WITH_APP) is not None:
            names = env_value(container, constants.ENV_APP_CONTAINERS) or ""
            exit_with = names.split(",") if names else []
            if not all(_DNS_LABEL.match(n) for n in exit_with):
                return None, f"its {constants.ENV_APP_CONTAINERS} is not a list of names"
        plan = InjectionPlan(profile=profile, image=image)
        expected = build_sidecar(
            plan,
            dataclasses.replace(settings, native_sidecar=native),
            ref.name,
            mounts,
            exit_with,
        )
        if any(m["mountPath"] == constants.RESULTS_TOKEN_DIR for m in mounts):
            ca = env_value(container, constants.ENV_RESULTS_CA)
            problem = _results_ca_problem(ca)
            if problem:
                return None, problem
            expected["env"] = [*expected["env"], *results_env(settings, str(ca))]
    problem = _compare(container, expected, mounts, volumes)
    if problem:
        return None, problem
    return Toolset(ref, profile.name, host_volumes), ""


def _app_spec(pod: Any) -> dict[str, Any]:
    spec = _spec(pod)
    return {
        key: [c for c in _list(spec.get(key)) if isinstance(c, Mapping)]
        for key in ("containers", "initContainers")
    }


def _status_claim(pod: Any) -> tuple[bool, str, str, str]:
    """(the annotation is there, why it is not sidecar-debug's status, the container it names,
    its profile); a standby status names no container."""
    reading = read_status(_mapping(pod))
    if not reading.present:
        return False, "", "", ""
    if reading.status is None:
        return True, f"it is not sidecar-debug's status ({reading.problem})", "", ""
    if reading.status.standby:
        return True, "", "", ""
    if not reading.status.profile:
        return True, "it names no profile", "", ""
    return True, "", reading.status.container, reading.status.profile


def verify_toolsets(
    pod: Any, settings: Settings, image_allowed: ImageAllowed | None = None
) -> ToolsetReport:
    """The pod's verified toolsets and the violations: a container running the toolset image
    that is not one, a second injected sidecar, a status annotation no toolset backs.
    `image_allowed` says which images besides the configured one the policy allows for this
    pod's toolset (None: only the configured one). Never raises, whatever the pod's shape."""
    reserved = image_repository(settings.toolset_image)
    toolsets: list[Toolset] = []
    violations: list[Violation] = []
    spec = _spec(pod)
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for index, container in enumerate(_list(spec.get(kind))):
            if not isinstance(container, Mapping):
                continue
            name = container.get("name")
            ref = ContainerRef(kind, name if isinstance(name, str) else shown(name), index)
            runs_toolset = image_repository(container.get("image")) == reserved
            claims = env_value(container, constants.ENV_PROFILE) is not None
            if not (runs_toolset or claims):
                continue
            toolset, why = _verify(pod, ref, container, settings, image_allowed)
            if (
                toolset is not None
                and not toolset.attached
                and any(not t.attached for t in toolsets)
            ):
                toolset, why = None, "the pod already has the injected toolset sidecar"
            if toolset is not None:
                toolsets.append(toolset)
            elif runs_toolset:
                violations.append(
                    Violation(
                        CHECK_IMAGE,
                        REASON_IMAGE,
                        f"{ref.path}.image",
                        f"container {quote(ref.name)} runs the toolset image ({reserved}) but is "
                        f"not the toolset sidecar-debug builds: {why}",
                        shown(container.get("image")),
                        ref,
                    )
                )
    present, problem, claimed, profile = _status_claim(pod)
    if present and not problem and claimed:
        backed = [t for t in toolsets if not t.attached and t.container.name == claimed]
        if not backed:
            problem = f"it claims container {quote(claimed)}, which is no verified toolset"
        elif backed[0].profile != profile:
            problem = (
                f"it claims profile {quote(profile)}, but the toolset runs "
                f"{quote(backed[0].profile)}"
            )
    if problem:
        violations.append(
            Violation(
                CHECK_STATUS,
                REASON_STATUS,
                STATUS_FIELD,
                f"annotation {constants.ANNOTATION_STATUS} does not describe this pod: {problem}",
            )
        )
    return ToolsetReport(tuple(toolsets), tuple(violations))


def hostpath_volumes_of(toolsets: Sequence[Toolset]) -> frozenset[str]:
    return frozenset(v for t in toolsets for v in t.host_volumes)
