"""The pod as the checks read it: each field of the shape the API guarantees, and what has
another shape recorded as malformed (fail closed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.guard.pss.messages import quote, shown
from webhook.guard.pss.model import CONTAINER_KINDS, MALFORMED, ContainerRef, Exemption, Violation


@dataclass
class Container:
    ref: ContainerRef
    spec: Mapping[str, Any]
    security: Mapping[str, Any]


@dataclass
class PodView:
    """The fields the checks read, each of the shape the API guarantees; what has another shape
    is recorded in `malformed` and read as empty (so nothing is taken as allowed by mistake:
    the malformed violation denies the pod on its own)."""

    annotations: Mapping[str, Any] = field(default_factory=dict)
    spec: Mapping[str, Any] = field(default_factory=dict)
    security: Mapping[str, Any] = field(default_factory=dict)
    containers: list[Container] = field(default_factory=list)
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
        from webhook.wire.shape import type_name_with_article

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


def name_of(value: Any) -> str:
    return value if isinstance(value, str) else shown(value)


def read_pod(pod: Any, exempt: Exemption) -> PodView:
    view = PodView()
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
                name = name_of(container.get("name"))
                taken[name] = taken.get(name, 0) + 1
    for kind in CONTAINER_KINDS:
        for index, container in enumerate(lists[kind]):
            path = f"spec.{kind}[{index}]"
            if view.item(container, path) is None:
                continue
            ref = ContainerRef(kind, name_of(container.get("name")), index)
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
            view.containers.append(Container(ref, container, security))
    names: dict[str, int] = {}
    volumes = view.sequence(spec.get("volumes"), "spec.volumes")
    for volume in volumes:
        if isinstance(volume, Mapping):
            name = name_of(volume.get("name"))
            names[name] = names.get(name, 0) + 1
    for index, volume in enumerate(volumes):
        path = f"spec.volumes[{index}]"
        if view.item(volume, path) is None:
            continue
        name = name_of(volume.get("name"))
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


def annotation_of(profile: Any) -> str | None:
    """The annotation value Kubernetes writes for a seccompProfile or appArmorProfile field
    (`unconfined`, `runtime/default`, `localhost/NAME`)."""
    if not isinstance(profile, Mapping):
        return None
    kind = profile.get("type")
    if kind == "Localhost":
        name = profile.get("localhostProfile")
        return f"localhost/{name}" if isinstance(name, str) else None
    return {"Unconfined": "unconfined", "RuntimeDefault": "runtime/default"}.get(str(kind))


def written_for_exempted(pod: PodView, key: str, prefix: str, field_name: str, value: Any) -> bool:
    """The container annotation `key` is what Kubernetes wrote from an exempted container's own
    `field_name` (so it says nothing the exempted field does not)."""
    if not key.startswith(prefix):
        return False
    security = pod.exempted.get(key[len(prefix) :])
    return security is not None and value == annotation_of(security.get(field_name))


def annotation_path(key: str) -> str:
    return f"metadata.annotations[{quote(key)}]"
