"""The pod's facts as every layer reads them: one rule each, read without trusting the object
(a field of another type reads as absent; webhook.wire.shape is what names such a field).

The service account is the one fact computed with two rules before: `spec.serviceAccountName`,
else the deprecated `spec.serviceAccount` (the API still accepts it and copies it over, but a
manifest given to offline `inject` or a test may carry only it), else "default", as the
ServiceAccount admission plugin assigns it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

DEFAULT_SERVICE_ACCOUNT: Final = "default"
# Every kind of container a pod spec holds, in the order the kubelet starts them.
CONTAINER_KINDS: Final = ("initContainers", "containers", "ephemeralContainers")


def mapping(value: Any) -> dict[str, Any]:
    """`value` when it is an object, else {}."""
    return value if isinstance(value, dict) else {}


def named(items: Any) -> list[dict[str, Any]]:
    """The items of a list that are objects with a string `name` (containers, volumes)."""
    return [c for c in (items if isinstance(items, list) else [])
            if isinstance(c, dict) and isinstance(c.get("name"), str)]


def service_account(pod: Mapping[str, Any]) -> str:
    """The pod's service account: `serviceAccountName`, else the legacy `serviceAccount`,
    else "default" (a field that is not a non-empty string counts as absent)."""
    spec = mapping(pod.get("spec"))
    for key in ("serviceAccountName", "serviceAccount"):
        account = spec.get(key)
        if isinstance(account, str) and account:
            return account
    return DEFAULT_SERVICE_ACCOUNT


@dataclass(frozen=True)
class PodView:
    """One pod (or pod template) read once: its metadata and spec as objects, whatever it
    holds."""

    metadata: dict[str, Any]
    spec: dict[str, Any]

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodView:
        return cls(mapping(pod.get("metadata")), mapping(pod.get("spec")))

    @property
    def name(self) -> str:
        return _text(self.metadata.get("name"))

    @property
    def namespace(self) -> str:
        return _text(self.metadata.get("namespace"))

    @property
    def labels(self) -> dict[str, Any]:
        return mapping(self.metadata.get("labels"))

    @property
    def annotations(self) -> dict[str, Any]:
        return mapping(self.metadata.get("annotations"))

    @property
    def service_account(self) -> str:
        return service_account({"spec": self.spec})

    def containers(self, kinds: tuple[str, ...] = CONTAINER_KINDS) -> list[dict[str, Any]]:
        """The named containers of `kinds` (every kind by default), kind by kind."""
        return [c for kind in kinds for c in named(self.spec.get(kind))]

    @property
    def volumes(self) -> dict[str, dict[str, Any]]:
        """The pod's volumes by name."""
        return {v["name"]: v for v in named(self.spec.get("volumes"))}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
