"""The Pod Security Standards, `baseline` and `restricted`, as Kubernetes' Pod Security admission
checks them: pure functions on a Pod's plain data.

The checks, their IDs, field semantics and messages follow kubernetes/pod-security-admission's
`policy/check_*.go` at Kubernetes 1.36, the version its `latest` stands for (policy v1.35):
host probes (1.34), the `hostUsers: false` relaxations (1.35), `container_engine_t` (1.31), the
sysctls safe through 1.32, AppArmor fields and annotations, image volumes in restricted. Every
container kind is checked (initContainers, containers, ephemeralContainers, in that order, as
PSA visits them), and the pod-level fields.

Where the API would refuse a value PSA never sees (a string for a boolean, a list for an
object, duplicate volume names), the check fails closed: the value is reported, never taken for
"unset". Two deliberate additions to PSA, both stricter: the old seccomp annotations are checked
at every level (Kubernetes 1.20's kubelet still honours them), and a Windows pod (`spec.os`) is
spared only restricted's own additions, never the baseline checks restricted replaces.

`check_pod` returns the violations, each with its check ID, the field path, the container and a
one-line message; `evaluate` also gives Pod Security's own summary (`violates PodSecurity
"baseline:latest": privileged (container "x" must not set securityContext.privileged=true)`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

Level = Literal["baseline", "restricted"]
LEVELS: Final[tuple[Level, ...]] = ("baseline", "restricted")
VERSION: Final = "latest"

# Pod Security admission visits containers in this order; messages list them so.
CONTAINER_KINDS: Final = ("initContainers", "containers", "ephemeralContainers")

# check_capabilities_baseline.go: the only capabilities baseline lets a container add. Names are
# compared exactly, as PSA does: `CAP_CHOWN` or `chown` is not `CHOWN`.
BASELINE_CAPABILITIES: Final = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
RESTRICTED_CAPABILITIES: Final = frozenset({"NET_BIND_SERVICE"})
CAPABILITY_ALL: Final = "ALL"
# check_seLinuxOptions.go (1.31): types a container may run as; user and role must stay empty.
SELINUX_TYPES: Final = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
# check_sysctls.go (1.32): namespaced and isolated from other pods.
SAFE_SYSCTLS: Final = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    }
)
SECCOMP_TYPES: Final = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_TYPES: Final = frozenset({"RuntimeDefault", "Localhost"})
# check_restrictedVolumes.go: the volume sources restricted allows (image since 1.33).
RESTRICTED_VOLUME_SOURCES: Final = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "image",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
# Every other volume source of the core API, for naming what a volume uses.
OTHER_VOLUME_SOURCES: Final = frozenset(
    {
        "awsElasticBlockStore",
        "azureDisk",
        "azureFile",
        "cephfs",
        "cinder",
        "fc",
        "flexVolume",
        "flocker",
        "gcePersistentDisk",
        "gitRepo",
        "glusterfs",
        "hostPath",
        "iscsi",
        "nfs",
        "photonPersistentDisk",
        "portworxVolume",
        "quobyte",
        "rbd",
        "scaleIO",
        "storageos",
        "vsphereVolume",
    }
)
APPARMOR_ANNOTATION_PREFIX: Final = "container.apparmor.security.beta.kubernetes.io/"
SECCOMP_POD_ANNOTATION: Final = "seccomp.security.alpha.kubernetes.io/pod"
SECCOMP_CONTAINER_ANNOTATION_PREFIX: Final = "container.seccomp.security.alpha.kubernetes.io/"

MALFORMED: Final = "malformed"  # not a PSA check: a shape the API refuses, reported fail-closed


@dataclass(frozen=True)
class ContainerRef:
    """One container of the pod: its list (`containers`, `initContainers`,
    `ephemeralContainers`), name and index in that list."""

    kind: str
    name: str
    index: int

    @property
    def path(self) -> str:
        return f"spec.{self.kind}[{self.index}]"

    def __str__(self) -> str:
        kind = {"initContainers": "init container", "ephemeralContainers": "ephemeral container"}
        return f"{kind.get(self.kind, 'container')} {quote(self.name)}"


@dataclass(frozen=True)
class Violation:
    """One field that breaks a check: the check's ID and Pod Security's reason, the field's
    path in the pod, a one-line message, the offending value as shown, and the container or
    volume it belongs to (None for pod-level fields and annotations)."""

    check: str
    reason: str
    field: str
    message: str
    value: str = ""
    container: ContainerRef | None = None
    volume: str | None = None


@dataclass(frozen=True)
class Finding:
    """A failed check, as Pod Security admission words it (`reason (detail)`), and its fields."""

    check: str
    reason: str
    detail: str
    violations: tuple[Violation, ...]

    def __str__(self) -> str:
        return f"{self.reason} ({self.detail})"


@dataclass(frozen=True)
class Exemption:
    """What the caller exempts: containers by (kind, name) and volumes by name. An exempted
    container is not checked at all, nor are the seccomp and AppArmor annotations Kubernetes
    writes from its own fields (1.19+ copies a container's seccompProfile into
    `container.seccomp.security.alpha.kubernetes.io/NAME`): an annotation that says anything
    else about it is still checked. An exempted volume passes the volume checks. Pod-level
    fields and the pod's annotations are always checked."""

    containers: frozenset[tuple[str, str]] = frozenset()
    volumes: frozenset[str] = frozenset()


NO_EXEMPTION: Final = Exemption()


@dataclass(frozen=True)
class PodSecurityResult:
    level: Level
    findings: tuple[Finding, ...]

    @property
    def allowed(self) -> bool:
        return not self.findings

    @property
    def violations(self) -> list[Violation]:
        return [v for f in self.findings for v in f.violations]

    def message(self) -> str:
        """Pod Security admission's wording, e.g. `violates PodSecurity "baseline:latest":
        host namespaces (hostNetwork=true), privileged (container "x" must not set ...)`."""
        found = ", ".join(str(f) for f in self.findings)
        return f'violates PodSecurity "{self.level}:{VERSION}": {found}'


# -- shown values ------------------------------------------------------------------------------

_SHOWN_MAX = 80


def quote(text: str) -> str:
    """`text` in double quotes, escaped to one printable ASCII line, cut when long: names and
    values come from whoever wrote the pod."""
    shown = json.dumps(text)
    return shown if len(shown) <= _SHOWN_MAX else shown[: _SHOWN_MAX - 4] + '..."'


def shown(value: Any) -> str:
    """A field's value as a message shows it: strings quoted, the rest as JSON."""
    if isinstance(value, str):
        return quote(value)
    try:
        text = json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= _SHOWN_MAX else text[: _SHOWN_MAX - 3] + "..."


def _text(value: Any) -> str:
    """A value as a plain string (for sets of offending values, listed as PSA does)."""
    return value if isinstance(value, str) else shown(value)


def join_quote(items: Iterable[str]) -> str:
    return ", ".join(quote(i) for i in items)


def _plural(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def _containers(refs: Sequence[ContainerRef]) -> str:
    """`container "a"` / `containers "a", "b"`, as PSA names them (every kind is a container)."""
    return f"{_plural('container', 'containers', len(refs))} {join_quote(r.name for r in refs)}"


def _setters(pod: bool, refs: Sequence[ContainerRef], more: Sequence[str] = ()) -> str:
    """`pod and containers "a", "b"`: who set a forbidden value."""
    parts = (["pod"] if pod else []) + ([_containers(refs)] if refs else []) + list(more)
    return " and ".join(parts)


def _unique(refs: Iterable[ContainerRef]) -> list[ContainerRef]:
    seen: dict[tuple[str, int], ContainerRef] = {}
    for ref in refs:
        seen.setdefault((ref.kind, ref.index), ref)
    return list(seen.values())


def _set_to(value: Any) -> str:
    """`true` for True (PSA's `=true`), else the value shown."""
    return "true" if value is True else shown(value)


def _unset_or_false(value: Any) -> bool:
    return value is None or value is False


# -- the pod as the checks read it -------------------------------------------------------------


@dataclass
class _Container:
    ref: ContainerRef
    spec: Mapping[str, Any]
    security: Mapping[str, Any]


@dataclass
class _Pod:
    """The fields the checks read, each of the shape the API guarantees; what has another shape
    is recorded in `malformed` and read as empty (so nothing is taken as allowed by mistake:
    the malformed violation denies the pod on its own)."""

    annotations: Mapping[str, Any] = field(default_factory=dict)
    spec: Mapping[str, Any] = field(default_factory=dict)
    security: Mapping[str, Any] = field(default_factory=dict)
    containers: list[_Container] = field(default_factory=list)
    volumes: list[tuple[int, str, Mapping[str, Any]]] = field(default_factory=list)
    windows: bool = False
    user_namespace: bool = False
    malformed: list[Violation] = field(default_factory=list)
    # The securityContext of each exempted container, by name: the annotations it implies.
    exempted: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    def mapping(self, value: Any, path: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if isinstance(value, Mapping):
            return value
        self._bad(path, value, "an object")
        return {}

    def item(self, value: Any, path: str) -> Mapping[str, Any] | None:
        """A list item that must be an object (null included: the API refuses it)."""
        if isinstance(value, Mapping):
            return value
        self._bad(path, value, "an object")
        return None

    def sequence(self, value: Any, path: str) -> Sequence[Any]:
        if value is None:
            return ()
        if isinstance(value, list | tuple):
            return value
        self._bad(path, value, "a list")
        return ()

    def _bad(self, path: str, value: Any, expected: str) -> None:
        from webhook.inject.shape import type_name_with_article

        self.malformed.append(
            Violation(
                MALFORMED,
                "invalid pod",
                path,
                f"{path} is {type_name_with_article(value)}, not {expected}: Kubernetes "
                "refuses such a pod",
                shown(value),
            )
        )


def _name(value: Any) -> str:
    return value if isinstance(value, str) else shown(value)


def _read(pod: Any, exempt: Exemption) -> _Pod:
    view = _Pod()
    root = view.item(pod, "the pod") or {}
    metadata = view.mapping(root.get("metadata"), "metadata")
    view.annotations = view.mapping(metadata.get("annotations"), "metadata.annotations")
    view.spec = spec = view.mapping(root.get("spec"), "spec")
    view.security = view.mapping(spec.get("securityContext"), "spec.securityContext")
    lists = {kind: view.sequence(spec.get(kind), f"spec.{kind}") for kind in CONTAINER_KINDS}
    taken: dict[str, int] = {}
    for kind in CONTAINER_KINDS:
        for container in lists[kind]:
            if isinstance(container, Mapping):
                name = _name(container.get("name"))
                taken[name] = taken.get(name, 0) + 1
    for kind in CONTAINER_KINDS:
        for index, container in enumerate(lists[kind]):
            path = f"spec.{kind}[{index}]"
            if view.item(container, path) is None:
                continue
            ref = ContainerRef(kind, _name(container.get("name")), index)
            if taken[ref.name] > 1:
                # Names are unique across all of a pod's containers in the API; an exemption
                # by name must not cover a second container that borrows an exempted name.
                view.malformed.append(
                    Violation(
                        MALFORMED,
                        "invalid pod",
                        f"{path}.name",
                        f"container name {quote(ref.name)} is used by {taken[ref.name]} "
                        "containers: Kubernetes refuses such a pod",
                        quote(ref.name),
                        ref,
                    )
                )
            elif (kind, ref.name) in exempt.containers:
                security = container.get("securityContext")
                view.exempted[ref.name] = security if isinstance(security, Mapping) else {}
                continue
            security = view.mapping(container.get("securityContext"), f"{path}.securityContext")
            view.containers.append(_Container(ref, container, security))
    names: dict[str, int] = {}
    volumes = view.sequence(spec.get("volumes"), "spec.volumes")
    for volume in volumes:
        if isinstance(volume, Mapping):
            name = _name(volume.get("name"))
            names[name] = names.get(name, 0) + 1
    for index, volume in enumerate(volumes):
        path = f"spec.volumes[{index}]"
        if view.item(volume, path) is None:
            continue
        name = _name(volume.get("name"))
        if names[name] > 1:
            # The API refuses duplicate names; an exemption by name must not cover a second
            # volume that borrows an exempted one's name.
            view.malformed.append(
                Violation(
                    MALFORMED,
                    "invalid pod",
                    f"{path}.name",
                    f"volume name {quote(name)} is used by {names[name]} volumes: Kubernetes "
                    "refuses such a pod",
                    quote(name),
                    volume=name,
                )
            )
        elif name in exempt.volumes:
            continue
        view.volumes.append((index, name, volume))
    view.windows = view.mapping(spec.get("os"), "spec.os").get("name") == "windows"
    view.user_namespace = spec.get("hostUsers") is False
    return view


# -- the checks --------------------------------------------------------------------------------

CheckFn = Callable[[_Pod], "Finding | None"]


def _finding(check: str, reason: str, detail: str, found: list[Violation]) -> Finding | None:
    return Finding(check, reason, detail, tuple(found)) if found else None


def _violation(
    check: str, reason: str, path: str, message: str, value: Any, owner: ContainerRef | None
) -> Violation:
    return Violation(check, reason, path, message, shown(value), owner)


def check_host_process(pod: _Pod) -> Finding | None:
    check, reason = "windowsHostProcess", "hostProcess"
    found: list[Violation] = []
    options = pod.mapping(pod.security.get("windowsOptions"), "spec.securityContext.windowsOptions")
    value = options.get("hostProcess")
    if not _unset_or_false(value):
        path = "spec.securityContext.windowsOptions.hostProcess"
        text = f"pod must not set securityContext.windowsOptions.hostProcess={_set_to(value)}"
        found.append(_violation(check, reason, path, text, value, None))
    for c in pod.containers:
        where = f"{c.ref.path}.securityContext.windowsOptions"
        value = pod.mapping(c.security.get("windowsOptions"), where).get("hostProcess")
        if not _unset_or_false(value):
            text = (
                f"container {quote(c.ref.name)} must not set "
                f"securityContext.windowsOptions.hostProcess={_set_to(value)}"
            )
            found.append(_violation(check, reason, f"{where}.hostProcess", text, value, c.ref))
    refs = _unique(v.container for v in found if v.container)
    pod_set = any(v.container is None for v in found)
    detail = (
        f"{_setters(pod_set, refs)} must not set securityContext.windowsOptions.hostProcess=true"
    )
    return _finding(check, reason, detail, found)


def check_host_namespaces(pod: _Pod) -> Finding | None:
    check, reason = "hostNamespaces", "host namespaces"
    found: list[Violation] = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        value = pod.spec.get(key)
        if not _unset_or_false(value):
            text = f"pod must not set spec.{key}={_set_to(value)}"
            found.append(_violation(check, reason, f"spec.{key}", text, value, None))
    detail = ", ".join(f"{v.field.removeprefix('spec.')}={_set_to(True)}" for v in found)
    return _finding(check, reason, detail, found)


def check_privileged(pod: _Pod) -> Finding | None:
    check, reason = "privileged", "privileged"
    found: list[Violation] = []
    for c in pod.containers:
        value = c.security.get("privileged")
        if not _unset_or_false(value):
            text = (
                f"container {quote(c.ref.name)} must not set "
                f"securityContext.privileged={_set_to(value)}"
            )
            path = f"{c.ref.path}.securityContext.privileged"
            found.append(_violation(check, reason, path, text, value, c.ref))
    refs = [v.container for v in found if v.container]
    detail = f"{_containers(refs)} must not set securityContext.privileged=true"
    return _finding(check, reason, detail, found)


def _added_capabilities(pod: _Pod, c: _Container) -> list[tuple[int, Any]]:
    where = f"{c.ref.path}.securityContext.capabilities"
    capabilities = pod.mapping(c.security.get("capabilities"), where)
    return list(enumerate(pod.sequence(capabilities.get("add"), f"{where}.add")))


def _capabilities_added(
    pod: _Pod, check: str, reason: str, allowed: frozenset[str]
) -> tuple[list[Violation], list[str]]:
    found: list[Violation] = []
    values: set[str] = set()
    for c in pod.containers:
        for index, capability in _added_capabilities(pod, c):
            if isinstance(capability, str) and capability in allowed:
                continue
            values.add(_text(capability))
            text = (
                f"container {quote(c.ref.name)} must not include {shown(capability)} in "
                "securityContext.capabilities.add"
            )
            path = f"{c.ref.path}.securityContext.capabilities.add[{index}]"
            found.append(_violation(check, reason, path, text, capability, c.ref))
    return found, sorted(values)


def check_capabilities_baseline(pod: _Pod) -> Finding | None:
    check, reason = "capabilities_baseline", "non-default capabilities"
    found, values = _capabilities_added(pod, check, reason, BASELINE_CAPABILITIES)
    refs = _unique(v.container for v in found if v.container)
    detail = (
        f"{_containers(refs)} must not include {join_quote(values)} in "
        "securityContext.capabilities.add"
    )
    return _finding(check, reason, detail, found)


def check_host_path_volumes(pod: _Pod) -> Finding | None:
    check, reason = "hostPathVolumes", "hostPath volumes"
    found: list[Violation] = []
    for index, name, volume in pod.volumes:
        source = volume.get("hostPath")
        if source is None:
            continue
        path = source.get("path") if isinstance(source, Mapping) else source
        text = f"volume {quote(name)} must not be a hostPath volume (path {shown(path)})"
        found.append(
            Violation(
                check, reason, f"spec.volumes[{index}].hostPath", text, shown(path), volume=name
            )
        )
    names = [str(v.volume) for v in found]
    detail = f"{_plural('volume', 'volumes', len(names))} {join_quote(names)}"
    return _finding(check, reason, detail, found)


def check_host_ports(pod: _Pod) -> Finding | None:
    check, reason = "hostPorts", "hostPort"
    found: list[Violation] = []
    ports: set[str] = set()
    for c in pod.containers:
        for index, port in enumerate(pod.sequence(c.spec.get("ports"), f"{c.ref.path}.ports")):
            path = f"{c.ref.path}.ports[{index}]"
            value = (pod.item(port, path) or {}).get("hostPort")
            if value is None or (type(value) is int and value == 0):
                continue
            ports.add(_text(value) if not isinstance(value, int) else str(value))
            text = f"container {quote(c.ref.name)} must not use hostPort {shown(value)}"
            found.append(_violation(check, reason, f"{path}.hostPort", text, value, c.ref))
    refs = _unique(v.container for v in found if v.container)
    detail = (
        f"{_containers(refs)} {_plural('uses', 'use', len(refs))} "
        f"{_plural('hostPort', 'hostPorts', len(ports))} {', '.join(sorted(ports))}"
    )
    return _finding(check, reason, detail, found)


def _annotation_of(profile: Any) -> str | None:
    """The annotation value Kubernetes writes for a seccompProfile or appArmorProfile field
    (`unconfined`, `runtime/default`, `localhost/NAME`)."""
    if not isinstance(profile, Mapping):
        return None
    kind = profile.get("type")
    if kind == "Localhost":
        name = profile.get("localhostProfile")
        return f"localhost/{name}" if isinstance(name, str) else None
    return {"Unconfined": "unconfined", "RuntimeDefault": "runtime/default"}.get(str(kind))


def _written_for_exempted(pod: _Pod, key: str, prefix: str, field_name: str, value: Any) -> bool:
    """The container annotation `key` is what Kubernetes wrote from an exempted container's own
    `field_name` (so it says nothing the exempted field does not)."""
    if not key.startswith(prefix):
        return False
    security = pod.exempted.get(key[len(prefix) :])
    return security is not None and value == _annotation_of(security.get(field_name))


def _annotation_path(key: str) -> str:
    return f"metadata.annotations[{quote(key)}]"


def check_app_armor(pod: _Pod) -> Finding | None:
    check = "appArmorProfile"
    found: list[Violation] = []
    types: set[str] = set()
    pod_set = False

    def bad_type(profile: Mapping[str, Any]) -> Any:
        value = profile.get("type")
        return None if isinstance(value, str) and value in APPARMOR_TYPES else value

    where = "spec.securityContext.appArmorProfile"
    if pod.security.get("appArmorProfile") is not None:
        profile = pod.mapping(pod.security.get("appArmorProfile"), where)
        value = bad_type(profile)
        if value is not None or "type" not in profile:
            pod_set = True
            types.add(_text(value if value is not None else ""))
            text = f"pod must not set AppArmor profile type to {shown(value or '')}"
            found.append(_violation(check, "", f"{where}.type", text, value or "", None))
    for c in pod.containers:
        where = f"{c.ref.path}.securityContext.appArmorProfile"
        if c.security.get("appArmorProfile") is None:
            continue
        profile = pod.mapping(c.security.get("appArmorProfile"), where)
        value = bad_type(profile)
        if value is not None or "type" not in profile:
            types.add(_text(value if value is not None else ""))
            text = (
                f"container {quote(c.ref.name)} must not set AppArmor profile type to "
                f"{shown(value or '')}"
            )
            found.append(_violation(check, "", f"{where}.type", text, value or "", c.ref))
    annotations: list[str] = []
    for key, value in pod.annotations.items():
        if not (isinstance(key, str) and key.startswith(APPARMOR_ANNOTATION_PREFIX)):
            continue
        if isinstance(value, str) and (
            value in ("", "runtime/default") or value.startswith("localhost/")
        ):
            continue
        if _written_for_exempted(pod, key, APPARMOR_ANNOTATION_PREFIX, "appArmorProfile", value):
            continue
        annotations.append(f"{key}={shown(value)}")
        text = f"annotation {quote(key)} must not set AppArmor profile {shown(value)}"
        found.append(_violation(check, "", _annotation_path(key), text, value, None))
    refs = _unique(v.container for v in found if v.container)
    more = [_plural("annotation", "annotations", len(annotations))] if annotations else []
    values = sorted(types) + sorted(annotations)
    reason = _plural("forbidden AppArmor profile", "forbidden AppArmor profiles", len(values))
    found = [Violation(v.check, reason, v.field, v.message, v.value, v.container) for v in found]
    detail = (
        f"{_setters(pod_set, refs, more)} must not set AppArmor profile type to "
        f"{join_quote(values)}"
    )
    return _finding(check, reason, detail, found)


def check_selinux(pod: _Pod) -> Finding | None:
    check, reason = "seLinuxOptions", "seLinuxOptions"
    found: list[Violation] = []
    types: set[str] = set()
    user = role = pod_set = False

    def inspect(options: Mapping[str, Any], where: str, owner: ContainerRef | None) -> bool:
        nonlocal user, role
        who = "pod" if owner is None else f"container {quote(owner.name)}"
        bad = False
        kind = options.get("type")
        kind = "" if kind is None else kind  # null is absent, as in the API
        if not (isinstance(kind, str) and kind in SELINUX_TYPES):
            types.add(_text(kind))
            text = f"{who} must not set securityContext.seLinuxOptions.type to {shown(kind)}"
            found.append(_violation(check, reason, f"{where}.type", text, kind, owner))
            bad = True
        for key in ("user", "role"):
            value = options.get(key)
            if value is None or value == "":
                continue
            user, role = user or key == "user", role or key == "role"
            text = f"{who} must not set securityContext.seLinuxOptions.{key} ({shown(value)})"
            found.append(_violation(check, reason, f"{where}.{key}", text, value, owner))
            bad = True
        return bad

    where = "spec.securityContext.seLinuxOptions"
    pod_set = inspect(pod.mapping(pod.security.get("seLinuxOptions"), where), where, None)
    for c in pod.containers:
        where = f"{c.ref.path}.securityContext.seLinuxOptions"
        inspect(pod.mapping(c.security.get("seLinuxOptions"), where), where, c.ref)
    refs = _unique(v.container for v in found if v.container)
    data = [f"{_plural('type', 'types', len(types))} {join_quote(sorted(types))}"] if types else []
    data += ["user may not be set"] if user else []
    data += ["role may not be set"] if role else []
    detail = (
        f"{_setters(pod_set, refs)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}"
    )
    return _finding(check, reason, detail, found)


def _proc_mount(pod: _Pod, check: str) -> Finding | None:
    reason = "procMount"
    found: list[Violation] = []
    values: set[str] = set()
    for c in pod.containers:
        value = c.security.get("procMount")
        if value is None or value == "Default":
            continue
        values.add(_text(value))
        text = (
            f"container {quote(c.ref.name)} must not set securityContext.procMount to "
            f"{shown(value)}"
        )
        path = f"{c.ref.path}.securityContext.procMount"
        found.append(_violation(check, reason, path, text, value, c.ref))
    refs = [v.container for v in found if v.container]
    detail = (
        f"{_containers(refs)} must not set securityContext.procMount to "
        f"{join_quote(sorted(values))}"
    )
    return _finding(check, reason, detail, found)


def check_proc_mount_baseline(pod: _Pod) -> Finding | None:
    # 1.35: a pod in a user namespace (hostUsers: false) may unmask /proc.
    return None if pod.user_namespace else _proc_mount(pod, "procMount")


def check_proc_mount_restricted(pod: _Pod) -> Finding | None:
    return _proc_mount(pod, "procMount_restricted")


def _seccomp_annotations(pod: _Pod, check: str) -> tuple[list[Violation], list[str]]:
    """The seccomp annotations of Kubernetes < 1.19 (which 1.20's kubelet still honours):
    anything but runtime/default, docker/default or localhost/... (`unconfined`) is refused."""
    found: list[Violation] = []
    shown_values: list[str] = []
    for key, value in pod.annotations.items():
        if not isinstance(key, str) or not (
            key == SECCOMP_POD_ANNOTATION or key.startswith(SECCOMP_CONTAINER_ANNOTATION_PREFIX)
        ):
            continue
        if isinstance(value, str) and (
            value in ("runtime/default", "docker/default") or value.startswith("localhost/")
        ):
            continue
        if _written_for_exempted(
            pod, key, SECCOMP_CONTAINER_ANNOTATION_PREFIX, "seccompProfile", value
        ):
            continue
        shown_values.append(f"{key}={shown(value)}")
        text = f"annotation {quote(key)} must not set seccomp profile {shown(value)}"
        found.append(_violation(check, "seccompProfile", _annotation_path(key), text, value, None))
    return found, sorted(shown_values)


def _explicit_seccomp(
    pod: _Pod, check: str
) -> tuple[list[Violation], set[str], bool, list[_Container]]:
    """Fields that set a forbidden seccomp type; whether the pod level sets a good one; the
    containers that set none."""
    reason = "seccompProfile"
    found: list[Violation] = []
    values: set[str] = set()
    pod_good = False
    unset: list[_Container] = []

    def bad(profile: Mapping[str, Any]) -> Any:
        value = profile.get("type")
        return None if isinstance(value, str) and value in SECCOMP_TYPES else (value or "")

    where = "spec.securityContext.seccompProfile"
    if pod.security.get("seccompProfile") is not None:
        value = bad(pod.mapping(pod.security.get("seccompProfile"), where))
        if value is None:
            pod_good = True
        else:
            values.add(_text(value))
            text = f"pod must not set securityContext.seccompProfile.type to {shown(value)}"
            found.append(_violation(check, reason, f"{where}.type", text, value, None))
    for c in pod.containers:
        where = f"{c.ref.path}.securityContext.seccompProfile"
        if c.security.get("seccompProfile") is None:
            unset.append(c)
            continue
        value = bad(pod.mapping(c.security.get("seccompProfile"), where))
        if value is not None:
            values.add(_text(value))
            text = (
                f"container {quote(c.ref.name)} must not set securityContext.seccompProfile.type "
                f"to {shown(value)}"
            )
            found.append(_violation(check, reason, f"{where}.type", text, value, c.ref))
    return found, values, pod_good, unset


def _seccomp_detail(found: list[Violation], values: set[str], annotations: list[str]) -> str:
    parts: list[str] = []
    fields = [v for v in found if not v.field.startswith("metadata.")]
    if fields:
        pod_set = any(v.container is None for v in fields)
        refs = _unique(v.container for v in fields if v.container)
        parts.append(
            f"{_setters(pod_set, refs)} must not set securityContext.seccompProfile.type to "
            f"{join_quote(sorted(values))}"
        )
    if annotations:
        parts.append(
            f"forbidden {_plural('annotation', 'annotations', len(annotations))} "
            f"{', '.join(annotations)}"
        )
    return "; ".join(parts)


def check_seccomp_baseline(pod: _Pod) -> Finding | None:
    check = "seccompProfile_baseline"
    found, values, _, _ = _explicit_seccomp(pod, check)
    from_annotations, annotations = _seccomp_annotations(pod, check)
    found += from_annotations
    return _finding(check, "seccompProfile", _seccomp_detail(found, values, annotations), found)


def check_sysctls(pod: _Pod) -> Finding | None:
    check, reason = "sysctls", "forbidden sysctls"
    found: list[Violation] = []
    names: list[str] = []
    where = "spec.securityContext.sysctls"
    for index, sysctl in enumerate(pod.sequence(pod.security.get("sysctls"), where)):
        name = (pod.item(sysctl, f"{where}[{index}]") or {}).get("name")
        if isinstance(name, str) and name in SAFE_SYSCTLS:
            continue
        names.append(_text(name))
        text = f"pod must not set sysctl {shown(name)}"
        found.append(_violation(check, reason, f"{where}[{index}].name", text, name, None))
    return _finding(check, reason, ", ".join(names), found)


def check_host_probes(pod: _Pod) -> Finding | None:
    check, reason = "hostProbesAndHostLifecycle", "probe or lifecycle host"
    found: list[Violation] = []
    hosts: set[str] = set()

    def inspect(handler_owner: Mapping[str, Any], where: str, c: _Container) -> None:
        for action in ("httpGet", "tcpSocket"):
            path = f"{where}.{action}"
            host = pod.mapping(handler_owner.get(action), path).get("host")
            if host is None or host == "":
                continue
            hosts.add(_text(host))
            text = (
                f"container {quote(c.ref.name)} must not use probe or lifecycle host {shown(host)}"
            )
            found.append(_violation(check, reason, f"{path}.host", text, host, c.ref))

    for c in pod.containers:
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            where = f"{c.ref.path}.{probe}"
            inspect(pod.mapping(c.spec.get(probe), where), where, c)
        lifecycle = pod.mapping(c.spec.get("lifecycle"), f"{c.ref.path}.lifecycle")
        for hook in ("postStart", "preStop"):
            where = f"{c.ref.path}.lifecycle.{hook}"
            inspect(pod.mapping(lifecycle.get(hook), where), where, c)
    refs = _unique(v.container for v in found if v.container)
    detail = (
        f"{_containers(refs)} {_plural('uses', 'use', len(refs))} "
        f"{_plural('probe or lifecycle host', 'probe or lifecycle hosts', len(hosts))} "
        f"{join_quote(sorted(hosts))}"
    )
    return _finding(check, reason, detail, found)


def check_restricted_volumes(pod: _Pod) -> Finding | None:
    check, reason = "restrictedVolumes", "restricted volume types"
    found: list[Violation] = []
    kinds: set[str] = set()
    for index, name, volume in pod.volumes:
        sources = [k for k, v in volume.items() if k != "name" and v is not None]
        bad = [k for k in sources if k not in RESTRICTED_VOLUME_SOURCES]
        if sources and not bad:
            continue
        # A volume with no source, or one the API does not know, is "unknown" (as in PSA).
        named = [k if k in OTHER_VOLUME_SOURCES else "unknown" for k in bad] or ["unknown"]
        kinds.update(named)
        text = f"volume {quote(name)} must not use restricted volume type {join_quote(named)}"
        field_name = bad[0] if bad and isinstance(bad[0], str) else "name"
        found.append(
            Violation(
                check,
                reason,
                f"spec.volumes[{index}].{field_name}",
                text,
                join_quote(named),
                volume=name,
            )
        )
    names = [str(v.volume) for v in found]
    detail = (
        f"{_plural('volume', 'volumes', len(names))} {join_quote(names)} "
        f"{_plural('uses', 'use', len(names))} "
        f"{_plural('restricted volume type', 'restricted volume types', len(kinds))} "
        f"{join_quote(sorted(kinds))}"
    )
    return _finding(check, reason, detail, found)


def check_allow_privilege_escalation(pod: _Pod) -> Finding | None:
    check, reason = "allowPrivilegeEscalation", "allowPrivilegeEscalation != false"
    if pod.windows:  # 1.25: no such thing on Windows
        return None
    found: list[Violation] = []
    for c in pod.containers:
        value = c.security.get("allowPrivilegeEscalation")
        if value is False:
            continue
        text = (
            f"container {quote(c.ref.name)} must set securityContext.allowPrivilegeEscalation="
            f"false (it is {'unset' if value is None else shown(value)})"
        )
        path = f"{c.ref.path}.securityContext.allowPrivilegeEscalation"
        found.append(_violation(check, reason, path, text, value, c.ref))
    refs = [v.container for v in found if v.container]
    detail = f"{_containers(refs)} must set securityContext.allowPrivilegeEscalation=false"
    return _finding(check, reason, detail, found)


def check_run_as_non_root(pod: _Pod) -> Finding | None:
    check, reason = "runAsNonRoot", "runAsNonRoot != true"
    if pod.user_namespace:  # 1.35: root in a user namespace is not root on the node
        return None
    explicit: list[Violation] = []
    implicit: list[Violation] = []
    pod_value = pod.security.get("runAsNonRoot")
    pod_true = pod_value is True
    if pod_value is not None and not pod_true:
        text = f"pod must not set securityContext.runAsNonRoot={shown(pod_value)}"
        path = "spec.securityContext.runAsNonRoot"
        explicit.append(_violation(check, reason, path, text, pod_value, None))
    for c in pod.containers:
        value = c.security.get("runAsNonRoot")
        path = f"{c.ref.path}.securityContext.runAsNonRoot"
        if value is None:
            if not pod_true:
                text = (
                    f"pod or container {quote(c.ref.name)} must set "
                    "securityContext.runAsNonRoot=true"
                )
                implicit.append(_violation(check, reason, path, text, None, c.ref))
        elif value is not True:
            text = (
                f"container {quote(c.ref.name)} must not set "
                f"securityContext.runAsNonRoot={shown(value)}"
            )
            explicit.append(_violation(check, reason, path, text, value, c.ref))
    if explicit:
        pod_set = any(v.container is None for v in explicit)
        refs = [v.container for v in explicit if v.container]
        detail = f"{_setters(pod_set, refs)} must not set securityContext.runAsNonRoot=false"
        return _finding(check, reason, detail, explicit + implicit)
    refs = [v.container for v in implicit if v.container]
    detail = f"pod or {_containers(refs)} must set securityContext.runAsNonRoot=true"
    return _finding(check, reason, detail, implicit)


def check_run_as_user(pod: _Pod) -> Finding | None:
    check, reason = "runAsUser", "runAsUser=0"
    if pod.user_namespace:
        return None
    found: list[Violation] = []

    def root(value: Any) -> bool:
        # 0, or anything the API would not take as a user ID (fail closed)
        return value is not None and not (type(value) is int and value != 0)

    value = pod.security.get("runAsUser")
    if root(value):
        text = f"pod must not set runAsUser={shown(value)}"
        found.append(_violation(check, reason, "spec.securityContext.runAsUser", text, value, None))
    for c in pod.containers:
        value = c.security.get("runAsUser")
        if root(value):
            text = f"container {quote(c.ref.name)} must not set runAsUser={shown(value)}"
            path = f"{c.ref.path}.securityContext.runAsUser"
            found.append(_violation(check, reason, path, text, value, c.ref))
    pod_set = any(v.container is None for v in found)
    refs = [v.container for v in found if v.container]
    detail = f"{_setters(pod_set, refs)} must not set runAsUser=0"
    return _finding(check, reason, detail, found)


def check_seccomp_restricted(pod: _Pod) -> Finding | None:
    check = "seccompProfile_restricted"
    if pod.windows:  # 1.25: Windows has no seccomp; baseline's check still applies
        return check_seccomp_baseline(pod)
    found, values, pod_good, unset = _explicit_seccomp(pod, check)
    from_annotations, annotations = _seccomp_annotations(pod, check)
    found += from_annotations
    if found:
        return _finding(check, "seccompProfile", _seccomp_detail(found, values, annotations), found)
    if pod_good or not unset:
        return None
    implicit = [
        _violation(
            check,
            "seccompProfile",
            f"{c.ref.path}.securityContext.seccompProfile.type",
            f"pod or container {quote(c.ref.name)} must set securityContext.seccompProfile.type "
            'to "RuntimeDefault" or "Localhost"',
            None,
            c.ref,
        )
        for c in unset
    ]
    refs = [c.ref for c in unset]
    detail = (
        f"pod or {_containers(refs)} must set securityContext.seccompProfile.type to "
        '"RuntimeDefault" or "Localhost"'
    )
    return _finding(check, "seccompProfile", detail, implicit)


def check_capabilities_restricted(pod: _Pod) -> Finding | None:
    check, reason = "capabilities_restricted", "unrestricted capabilities"
    if pod.windows:  # 1.25: Windows has no capabilities; baseline's check still applies
        return check_capabilities_baseline(pod)
    missing: list[Violation] = []
    for c in pod.containers:
        where = f"{c.ref.path}.securityContext.capabilities"
        capabilities = pod.mapping(c.security.get("capabilities"), where)
        drop = pod.sequence(capabilities.get("drop"), f"{where}.drop")
        if CAPABILITY_ALL not in [d for d in drop if isinstance(d, str)]:
            text = (
                f'container {quote(c.ref.name)} must set securityContext.capabilities.drop=["ALL"]'
            )
            missing.append(_violation(check, reason, f"{where}.drop", text, drop or None, c.ref))
    added, values = _capabilities_added(pod, check, reason, RESTRICTED_CAPABILITIES)
    parts: list[str] = []
    if missing:
        refs = [v.container for v in missing if v.container]
        parts.append(f'{_containers(refs)} must set securityContext.capabilities.drop=["ALL"]')
    if added:
        refs = _unique(v.container for v in added if v.container)
        parts.append(
            f"{_containers(refs)} must not include {join_quote(values)} in "
            "securityContext.capabilities.add"
        )
    return _finding(check, reason, "; ".join(parts), missing + added)


@dataclass(frozen=True)
class Check:
    id: str
    level: Level
    run: CheckFn
    overrides: tuple[str, ...] = ()


# Sorted by ID, the order in which Pod Security admission reports them.
CHECKS: Final[tuple[Check, ...]] = tuple(
    sorted(
        (
            Check("allowPrivilegeEscalation", "restricted", check_allow_privilege_escalation),
            Check("appArmorProfile", "baseline", check_app_armor),
            Check("capabilities_baseline", "baseline", check_capabilities_baseline),
            Check(
                "capabilities_restricted",
                "restricted",
                check_capabilities_restricted,
                ("capabilities_baseline",),
            ),
            Check("hostNamespaces", "baseline", check_host_namespaces),
            Check("hostPathVolumes", "baseline", check_host_path_volumes),
            Check("hostPorts", "baseline", check_host_ports),
            Check("hostProbesAndHostLifecycle", "baseline", check_host_probes),
            Check("privileged", "baseline", check_privileged),
            Check("procMount", "baseline", check_proc_mount_baseline),
            Check(
                "procMount_restricted", "restricted", check_proc_mount_restricted, ("procMount",)
            ),
            Check(
                "restrictedVolumes", "restricted", check_restricted_volumes, ("hostPathVolumes",)
            ),
            Check("runAsNonRoot", "restricted", check_run_as_non_root),
            Check("runAsUser", "restricted", check_run_as_user),
            Check("seLinuxOptions", "baseline", check_selinux),
            Check("seccompProfile_baseline", "baseline", check_seccomp_baseline),
            Check(
                "seccompProfile_restricted",
                "restricted",
                check_seccomp_restricted,
                ("seccompProfile_baseline",),
            ),
            Check("sysctls", "baseline", check_sysctls),
            Check("windowsHostProcess", "baseline", check_host_process),
        ),
        key=lambda c: c.id,
    )
)


def checks_for(level: Level) -> tuple[Check, ...]:
    """The checks of `level`: baseline's, or restricted's with those it replaces left out."""
    chosen = [c for c in CHECKS if c.level == "baseline" or level == "restricted"]
    replaced = {o for c in chosen for o in c.overrides}
    return tuple(c for c in chosen if c.id not in replaced)


def evaluate(pod: Any, level: Level, exempt: Exemption = NO_EXEMPTION) -> PodSecurityResult:
    """Every check of `level` on `pod` (a Pod's plain data, any shape: never raises)."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    view = _read(pod, exempt)
    findings = [f for f in (c.run(view) for c in checks_for(level)) if f is not None]
    if view.malformed:
        # Recorded as the checks read the fields (two checks may read the same one).
        malformed = tuple({v.field: v for v in view.malformed}.values())
        detail = "; ".join(v.message for v in malformed[:3])
        detail += f"; and {len(malformed) - 3} more" if len(malformed) > 3 else ""
        findings.insert(0, Finding(MALFORMED, "invalid pod", detail, malformed))
    return PodSecurityResult(level, tuple(findings))


def check_pod(pod: Any, level: Level, exempt: Exemption = NO_EXEMPTION) -> list[Violation]:
    """The violations of `pod` at `level`: empty when Pod Security admission would admit it."""
    return evaluate(pod, level, exempt).violations
