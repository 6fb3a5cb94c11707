"""A fake Kubernetes API for the controller: Leases with resourceVersions and 409s, a pod list,
Events (409 on a second create), evictions (status chosen by the test) and a namespace list.
No exec: the controller holds no pods/exec right."""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from collections.abc import Callable
from typing import Any

from webhook.kube.api import ApiError
from webhook.wire import constants

NOW = dt.datetime(2026, 12, 3, 12, 0, 0, tzinfo=dt.UTC)


def stamp(value: dt.datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


class Clock:
    """Monotonic and wall time that only move when the test says so."""

    def __init__(self) -> None:
        self.seconds = 1000.0

    def monotonic(self) -> float:
        return self.seconds

    def wall(self) -> dt.datetime:
        return NOW + dt.timedelta(seconds=self.seconds - 1000.0)

    def advance(self, seconds: float) -> None:
        self.seconds += seconds


class FakeApi:
    def __init__(self, minor: int = 20) -> None:
        self.minor = minor
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.resource_version = 100
        self.pods: list[dict[str, Any]] = []
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.evictions: list[dict[str, Any]] = []
        self.eviction_status: int | None = None  # e.g. 429: a PodDisruptionBudget refuses
        self.namespaces: list[dict[str, Any]] = []
        self.calls: list[tuple[str, str]] = []
        self.down = False  # every call fails as if the apiserver were unreachable
        self.before_write: Callable[[], None] | None = None  # runs between a GET and a PUT

    def call(self, method: str, path: str, body: Any = None, *,
             timeout: float | None = None) -> dict[str, Any]:
        self.calls.append((method, path))
        if self.down:
            raise ApiError(0, f"{method} {path}: connection refused")
        lease = re.fullmatch(r"/apis/coordination.k8s.io/v1/namespaces/([^/]+)/leases(?:/([^/]+))?",
                             path)
        if lease:
            return self._lease(method, lease.group(1), lease.group(2), body)
        if method == "GET" and path.split("?")[0] == "/api/v1/pods":
            return {"items": copy.deepcopy(self.pods)}
        if method == "GET" and path.split("?")[0] == "/api/v1/namespaces":
            return {"items": copy.deepcopy(self.namespaces)}
        event = re.fullmatch(r"/api/v1/namespaces/([^/]+)/events", path)
        if event and method == "POST":
            # As the apiserver validates it: the Event's namespace is its object's, or
            # `default` for a cluster-scoped object.
            involved = body["involvedObject"].get("namespace") or "default"
            if involved != event.group(1):
                raise ApiError(422, "involvedObject.namespace: does not match event.namespace")
            key = (event.group(1), body["metadata"]["name"])
            if key in self.events:
                raise ApiError(409, "already exists")
            self.events[key] = json.loads(json.dumps(body))
            created: dict[str, Any] = body  # the apiserver answers the object it created
            return created
        eviction = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction", path)
        if eviction and method == "POST":
            if self.eviction_status:
                raise ApiError(self.eviction_status,
                               "Cannot evict pod as it would violate the pod's disruption budget.")
            self.evictions.append(body)
            for pod in self.pods:
                if pod["metadata"]["name"] == eviction.group(2):
                    pod["metadata"]["deletionTimestamp"] = "2026-12-03T12:00:00Z"
            return {}
        raise ApiError(404, f"no route {method} {path}")

    def _lease(self, method: str, namespace: str, name: str | None,
               body: Any) -> dict[str, Any]:
        if method == "GET":
            assert name
            if (namespace, name) not in self.leases:
                raise ApiError(404, "not found")
            return copy.deepcopy(self.leases[(namespace, name)])
        if method == "POST":
            key = (namespace, body["metadata"]["name"])
            if key in self.leases:
                raise ApiError(409, "already exists")
            return self._store(key, body)
        if method == "PUT":
            assert name
            if self.before_write is not None:
                hook, self.before_write = self.before_write, None
                hook()
            current = self.leases.get((namespace, name))
            if current is None:
                raise ApiError(404, "not found")
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise ApiError(409, "the object has been modified")
            return self._store((namespace, name), body)
        raise ApiError(405, method)

    def _store(self, key: tuple[str, str], body: dict[str, Any]) -> dict[str, Any]:
        self.resource_version += 1
        stored = copy.deepcopy(body)
        stored.setdefault("metadata", {})["resourceVersion"] = str(self.resource_version)
        self.leases[key] = stored
        return copy.deepcopy(stored)

    def server_minor(self) -> int:
        return self.minor

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p in self.calls if m != "GET"]


def pod(name: str, *, namespace: str = "shop", created: dt.datetime = NOW,
        status: dict[str, Any] | None = None, annotations: dict[str, str] | None = None,
        ephemeral: list[dict[str, Any]] | None = None,
        ephemeral_status: list[dict[str, Any]] | None = None,
        service_account: str = "default", containers: tuple[str, ...] = ("app",),
        **extra: Any) -> dict[str, Any]:
    """A pod as the API lists it; `status` is the webhook's status annotation (JSON)."""
    metadata_annotations = dict(annotations or {})
    if status is not None:
        metadata_annotations[constants.ANNOTATION_STATUS] = json.dumps(status)
    document: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                     "creationTimestamp": stamp(created), "annotations": metadata_annotations},
        "spec": {"serviceAccountName": service_account,
                 "containers": [{"name": c, "image": "app:1"} for c in containers],
                 "ephemeralContainers": ephemeral or []},
        "status": {"phase": "Running", "ephemeralContainerStatuses": ephemeral_status or []},
    }
    document["metadata"].update(extra)
    return document


def injected(name: str, profile: str = "lttng", grant: str = "unprivileged",
             deadline: dt.datetime | None = None, **kwargs: Any) -> dict[str, Any]:
    """A pod the webhook injected: the status annotation, and the session's facts in the
    toolset's env (admitted when the pod was created)."""
    document = pod(name, status={"profile": profile, "grant": grant,
                                 "container": "debug-toolset", "version": "0.1.0"},
                   containers=("debug-toolset", "app"), **kwargs)
    document["spec"]["containers"][0]["env"] = toolset_env(
        profile, grant, document["metadata"]["creationTimestamp"], deadline)
    return document


def toolset_env(profile: str, grant: str, started: str,
                deadline: dt.datetime | None = None) -> list[dict[str, str]]:
    env = [{"name": constants.ENV_PROFILE, "value": profile},
           {"name": constants.ENV_GRANT, "value": grant},
           {"name": constants.ENV_SESSION_STARTED, "value": started}]
    if deadline is not None:
        env.append({"name": constants.ENV_SESSION_DEADLINE, "value": stamp(deadline)})
    return env


def attached_container(suffix: str = "a1b2c3", profile: str = "perf",
                       grant: str = "user:alice") -> dict[str, Any]:
    return {"name": f"debug-toolset-{suffix}", "image": "toolset:1", "targetContainerName": "app",
            "env": [{"name": constants.ENV_PROFILE, "value": profile},
                    {"name": constants.ENV_ATTACHED, "value": "true"},
                    {"name": constants.ENV_GRANT, "value": grant}]}


def running(name: str, started: dt.datetime) -> dict[str, Any]:
    return {"name": name, "state": {"running": {"startedAt": stamp(started)}}}
