"""The two Kubernetes API calls the policy gate makes, behind a small injectable protocol.

Unit tests pass a fake; the webhook and `policy explain` use KubernetesClusterAPI, which talks
to the real apiserver with plain dicts (no client-model conversion) and a hard timeout per call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

from webhook.wire import constants


class ClusterAPIError(RuntimeError):
    """An API call failed or timed out; the gate treats this as "no" for privilege."""


@dataclass(frozen=True)
class AccessCheck:
    """One SubjectAccessReview: may `user` (with `groups`) `use` debugprofiles/`resource_name`?
    (Or another verb and resource of our API group: the results service asks `get
    debugresults` in a namespace, with no resource name.)"""

    user: str
    groups: tuple[str, ...]
    namespace: str
    resource_name: str
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    uid: str = ""
    verb: str = constants.RBAC_VERB
    resource: str = constants.RBAC_RESOURCE

    def body(self) -> dict[str, Any]:
        attributes = {
            "namespace": self.namespace,
            "verb": self.verb,
            "group": constants.RBAC_GROUP,
            "resource": self.resource,
        }
        if self.resource_name:
            attributes["name"] = self.resource_name
        spec: dict[str, Any] = {
            "user": self.user,
            "groups": list(self.groups),
            "resourceAttributes": attributes,
        }
        if self.extra:
            spec["extra"] = {key: list(values) for key, values in self.extra}
        if self.uid:
            spec["uid"] = self.uid
        return {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }


def service_account_check(namespace: str, service_account: str, resource_name: str) -> AccessCheck:
    """The identity a pod's service account has when the apiserver authenticates its token."""
    return AccessCheck(
        user=f"system:serviceaccount:{namespace}:{service_account}",
        groups=(
            "system:serviceaccounts",
            f"system:serviceaccounts:{namespace}",
            "system:authenticated",
        ),
        namespace=namespace,
        resource_name=resource_name,
    )


def user_check(user: Mapping[str, Any], namespace: str, resource_name: str) -> AccessCheck:
    """The requesting user exactly as the AdmissionReview's userInfo names them."""
    extra = user.get("extra") or {}
    return AccessCheck(
        user=str(user.get("username", "")),
        groups=tuple(str(g) for g in user.get("groups") or ()),
        namespace=namespace,
        resource_name=resource_name,
        extra=tuple(sorted((str(k), tuple(str(v) for v in vs)) for k, vs in extra.items())),
        uid=str(user.get("uid", "")),
    )


class ClusterAPI(Protocol):
    def access_allowed(self, check: AccessCheck, timeout: float) -> bool:
        """The SubjectAccessReview verdict; raises ClusterAPIError when there is none."""
        ...

    def namespace_labels(self, name: str, timeout: float) -> Mapping[str, str]:
        """The namespace's labels; raises ClusterAPIError when it cannot be read."""
        ...


class PodReader(Protocol):
    def read_pod(self, namespace: str, name: str, timeout: float) -> dict[str, Any]:
        """The pod as the API returns it; raises ClusterAPIError when it cannot be read."""
        ...


class KubernetesClusterAPI:
    """ClusterAPI (and PodReader) over webhook.kube.client: in-cluster config, else kubeconfig
    (lazily, on the first call); plain dicts, one attempt per call and `timeout` for all of it."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None) -> None:
        self._kubeconfig = kubeconfig
        self._context = context
        self._client: Any = None
        self._lock = threading.Lock()

    def _api_client(self) -> Any:
        with self._lock:
            if self._client is None:
                from webhook.kube.client import KubeConfigError, api_client

                try:
                    self._client = api_client(self._kubeconfig, self._context, retries=False)
                except KubeConfigError as exc:  # any config problem means "cannot ask"
                    raise ClusterAPIError(str(exc)) from exc
            return self._client

    def _call(self, method: str, path: str, body: Any, timeout: float) -> dict[str, Any]:
        from webhook.kube.client import request

        client = self._api_client()
        try:
            document = request(client, method, path, body, "application/json", timeout=timeout)
        except ValueError as exc:
            raise ClusterAPIError(f"{method} {path}: response is not JSON") from exc
        except Exception as exc:  # timeouts, refused connections, TLS errors: all "no answer"
            status = getattr(exc, "status", None)
            if status:  # an answer (the client's own failures carry status 0)
                text = str(getattr(exc, "body", "") or "")[:300]
                raise ClusterAPIError(f"{method} {path}: HTTP {status}: {text}") from exc
            raise ClusterAPIError(f"{method} {path}: {exc}") from exc
        if not isinstance(document, dict):
            raise ClusterAPIError(f"{method} {path}: response is not a JSON object")
        return document

    def access_allowed(self, check: AccessCheck, timeout: float) -> bool:
        document = self._call(
            "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", check.body(), timeout
        )
        status = document.get("status") or {}
        return bool(status.get("allowed")) and not status.get("denied")

    def namespace_labels(self, name: str, timeout: float) -> Mapping[str, str]:
        document = self._call("GET", f"/api/v1/namespaces/{name}", None, timeout)
        labels = (document.get("metadata") or {}).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()}

    def read_pod(self, namespace: str, name: str, timeout: float) -> dict[str, Any]:
        """Only for ephemeral-container reviews from Kubernetes < 1.22, whose object lacks the
        pod's volumes and service account (webhook.admission.ephemeral)."""
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
        return self._call("GET", path, None, timeout)


@dataclass
class TTLCache:
    """A small thread-safe cache; entries expire `ttl` seconds after they were stored."""

    ttl: float
    clock: Callable[[], float] = time.monotonic
    max_entries: int = 4096
    _entries: dict[Any, tuple[float, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, key: Any) -> tuple[bool, Any]:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return False, None
            if self.clock() >= entry[0]:
                del self._entries[key]
                return False, None
            return True, entry[1]

    def put(self, key: Any, value: Any) -> None:
        if self.ttl <= 0:
            return
        with self._lock:
            if len(self._entries) >= self.max_entries:
                now = self.clock()
                for stale in [k for k, (exp, _) in self._entries.items() if exp <= now]:
                    del self._entries[stale]
                if len(self._entries) >= self.max_entries:
                    self._entries.clear()
            self._entries[key] = (self.clock() + self.ttl, value)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
