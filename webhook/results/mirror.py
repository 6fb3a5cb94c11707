"""Pods and namespaces as the API has them, kept by list + watch (an informer without the
framework): the results service plans from these, so a toolset's plan request costs no API
call, and every answer comes from one consistent view.

Each object is kept slim (what planning reads: names, labels, our annotations, the service
account, containers' names and images, the phase; a wired pod's toolset verified once when it
is mirrored, instead of its whole spec; other pods' containers' env and mounts). A watch that
ends is resumed from the last resourceVersion; one that is too old (410 Gone) or fails starts
again from a full list. `ready` is set after the first list of both.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from webhook.config import Settings
from webhook.results import metrics
from webhook.schedules import plan as plans
from webhook.wire import constants

log = logging.getLogger(__name__)

WATCH_SECONDS = 300  # the apiserver ends a watch after this; it is resumed at once
RETRY_SECONDS = 5.0
_KEPT_ANNOTATIONS = (constants.ANNOTATION_SCHEDULE, constants.ANNOTATION_STATUS)


def _slim_container(container: Any) -> dict[str, Any] | None:
    if not isinstance(container, dict):
        return None
    return {key: container[key] for key in ("name", "image", "env", "volumeMounts")
            if key in container}


def slim(obj: Mapping[str, Any], settings: Settings | None = None) -> dict[str, Any]:
    """What planning needs of a pod or namespace. A pod the webhook wired for results (its
    label) is verified here, once per version (webhook.schedules.plan.with_verified_toolset:
    the guard's rebuild-and-compare needs its whole spec), and keeps the answer, its service
    account and its containers' names and images: about 1 KiB instead of the 20 KiB of its
    spec. Without `settings` (tests) it keeps its whole spec instead. Other pods cannot push
    and keep names, labels, their containers' names, images, env and mounts, and phase."""
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(metadata, dict)  # noqa: S101 - for the type checker
    annotations = metadata.get("annotations")
    kept: dict[str, Any] = {
        key: metadata[key] for key in ("name", "namespace", "uid", "labels",
                                       "deletionTimestamp", "resourceVersion") if key in metadata}
    if isinstance(annotations, dict):
        kept["annotations"] = {k: v for k, v in annotations.items() if k in _KEPT_ANNOTATIONS}
    result: dict[str, Any] = {"metadata": kept}
    spec = obj.get("spec")
    labels = metadata.get("labels")
    wired = isinstance(labels, dict) and labels.get(constants.LABEL_RESULTS_AGENT) == \
        constants.LABEL_RESULTS_AGENT_VALUE
    if wired and isinstance(spec, dict) and settings is not None:
        plans.with_verified_toolset(obj, settings, result)
        result["spec"] = {
            "serviceAccountName": spec.get("serviceAccountName"),
            "serviceAccount": spec.get("serviceAccount"),
            **{kind: [{k: c[k] for k in ("name", "image") if k in c}
                      for c in spec.get(kind) or [] if isinstance(c, dict)]
               for kind in ("containers", "initContainers") if isinstance(spec.get(kind), list)},
        }
    elif wired and isinstance(spec, dict):
        result["spec"] = dict(spec)
    elif isinstance(spec, dict) and "containers" in spec:
        result["spec"] = {
            "serviceAccountName": spec.get("serviceAccountName"),
            "serviceAccount": spec.get("serviceAccount"),
            **{kind: [c for c in map(_slim_container, spec.get(kind) or []) if c]
               for kind in ("containers", "initContainers") if isinstance(spec.get(kind), list)},
        }
    status = obj.get("status")
    if isinstance(status, dict) and "phase" in status:
        result["status"] = {"phase": status.get("phase")}
    return result


def _uid(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("uid") or "") if isinstance(metadata, dict) else ""


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


class Mirror:
    """One resource kind (pods or namespaces), cluster-wide."""

    def __init__(self, resource: str, lister: Callable[..., Any],
                 settings: Settings | None = None) -> None:
        """`lister(**kwargs)` is the client's list call (list_pod_for_all_namespaces or
        list_namespace), used both to list and, with watch=True, to watch; `settings` verify
        each wired pod's toolset as it is mirrored (slim)."""
        self.resource = resource
        self.settings = settings
        self.lister = lister
        self.lock = threading.Lock()
        self.items: dict[tuple[str, str], dict[str, Any]] = {}
        # The same objects by namespace: a plan reads its namespace's pods, and scanning every
        # pod of the cluster per plan would make the fleet's cost grow as N squared.
        self.by_namespace: dict[str, dict[str, dict[str, Any]]] = {}
        self.ready = threading.Event()
        self.stopped = threading.Event()
        self.version = ""
        # Called with each object the watch saw deleted, or a list found gone (outside the lock):
        # the service drops what it cached about that pod.
        self.on_deleted: list[Callable[[dict[str, Any]], object]] = []

    # --- reading ----------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self.items.get((namespace, name))

    def in_namespace(self, namespace: str) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.by_namespace.get(namespace, {}).values())

    def all(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.items.values())

    # --- keeping it ---------------------------------------------------------------------------

    def _list(self) -> None:
        answer = self.lister(_preload_content=False)
        data = answer.data if hasattr(answer, "data") else answer.read()
        document = json.loads(data)
        items = {}
        for obj in document.get("items") or []:
            if isinstance(obj, dict):
                items[_key(obj)] = slim(obj, self.settings)
        with self.lock:
            gone = [obj for key, obj in self.items.items() if key not in items
                    or _uid(items[key]) != _uid(obj)]
            self.items = items
            self.by_namespace = {}
            for (namespace, name), obj in items.items():
                self.by_namespace.setdefault(namespace, {})[name] = obj
            self.version = str((document.get("metadata") or {}).get("resourceVersion") or "")
        metrics.MIRROR_SYNCS.labels(resource=self.resource).inc()
        self._deleted(gone)
        self.ready.set()

    def _deleted(self, objects: list[dict[str, Any]]) -> None:
        for obj in objects:
            for listener in self.on_deleted:
                try:
                    listener(obj)
                except Exception as error:  # noqa: BLE001 - one listener never stops the watch
                    log.error("a listener on deleted %s failed: %s: %s", self.resource,
                              type(error).__name__, error)

    def _apply(self, event: Mapping[str, Any]) -> bool:
        """One watch event; False when the watch must start again from a list."""
        kind = event.get("type")
        obj = event.get("raw_object") or event.get("object")
        if not isinstance(obj, dict):
            return True
        if kind == "ERROR":
            log.info("watch of %s ended: %s", self.resource, obj.get("message") or obj)
            return False
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        gone: list[dict[str, Any]] = []
        with self.lock:
            if kind in ("ADDED", "MODIFIED"):
                kept = slim(obj, self.settings)
                replaced = self.items.get(_key(obj))
                if replaced is not None and _uid(replaced) != _uid(kept):
                    gone.append(replaced)  # a DELETED this watch did not see
                self.items[_key(obj)] = kept
                self.by_namespace.setdefault(_key(obj)[0], {})[_key(obj)[1]] = kept
            elif kind == "DELETED":
                removed = self.items.pop(_key(obj), None)
                namespace, name = _key(obj)
                in_namespace = self.by_namespace.get(namespace)
                if in_namespace is not None:
                    in_namespace.pop(name, None)
                    if not in_namespace:
                        del self.by_namespace[namespace]
                gone.append(removed if removed is not None else slim(obj))
            if version:
                self.version = version
        self._deleted(gone)
        return True

    def _watch(self) -> bool:
        from kubernetes import watch

        # A wrapper without a return type: the watch hands back plain dicts (no models).
        def stream(**kwargs: Any) -> Any:
            return self.lister(**kwargs)

        watcher: Any = watch.Watch()  # type: ignore[no-untyped-call]  # the client is untyped
        for event in watcher.stream(stream, resource_version=self.version,
                                    timeout_seconds=WATCH_SECONDS,
                                    allow_watch_bookmarks=True):
            if self.stopped.is_set():
                watcher.stop()
                return True
            if isinstance(event, dict) and not self._apply(event):
                watcher.stop()
                return False
        return True

    def run(self) -> None:
        relist = True
        while not self.stopped.is_set():
            try:
                if relist:
                    self._list()
                relist = not self._watch()
            except Exception as error:  # noqa: BLE001 - API down, 410, TLS: list again later
                log.warning("watching %s failed (%s: %s); listing again in %g s", self.resource,
                            type(error).__name__, str(error)[:300], RETRY_SECONDS)
                relist = True
                self.stopped.wait(RETRY_SECONDS)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name=f"watch-{self.resource}", daemon=True)
        thread.start()
        return thread

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return self.ready.wait(max(0.0, deadline - time.monotonic()))


def cluster_mirrors(api_client: Any, settings: Settings | None = None
                    ) -> tuple[Mirror, Mirror]:
    """(pods, namespaces) over a kubernetes.client.ApiClient; `settings`: see Mirror."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    return (Mirror("pods", core.list_pod_for_all_namespaces, settings),
            Mirror("namespaces", core.list_namespace))
