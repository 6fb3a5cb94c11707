"""Offline injection of manifests: Pods, and the pod templates of workloads (Deployments,
StatefulSets, DaemonSets, ReplicaSets, ReplicationControllers, Jobs, CronJobs, Lists of them).

Each pod (template) goes through webhook.inject.pipeline, as the webhook's review would; every
other document passes through. The input document is never modified.
"""

from __future__ import annotations

import sys
from typing import Any

from webhook import constants
from webhook.config import Settings
from webhook.inject import pipeline

# Where the pod template lives, by kind (apps/v1, batch/v1).
TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
# Kinds whose pods run to completion: the toolset must exit with the app (no native sidecars).
COMPLETING_KINDS = frozenset({"Job", "CronJob"})


class InjectError(ValueError):
    """A document cannot be injected; the message names the document and the problem."""


def inject_template(
    template: dict[str, Any],
    namespace: str,
    settings: Settings,
    profile: str | None = None,
    runtime: str | None = None,
    kind: str = "Pod",
    mode: str | None = None,
) -> dict[str, Any]:
    """The injected pod (or pod template); unchanged when the decision is not to inject."""
    if profile or runtime or mode:
        # Record the choice on the pod so the webhook and `describe` see the same thing.
        template = dict(template)
        metadata = dict(template.get("metadata") or {})
        annotations = dict(metadata.get("annotations") or {})
        if profile:
            annotations[constants.ANNOTATION_PROFILE] = profile
        if runtime:
            annotations[constants.ANNOTATION_RUNTIME] = runtime
        if mode:
            annotations[constants.ANNOTATION_MODE] = mode
        metadata["annotations"] = annotations
        template["metadata"] = metadata
    # A Job's pods end whatever its template says: the toolset must exit with the app.
    completes = True if kind in COMPLETING_KINDS else None
    result = pipeline.run(
        template, namespace, settings, pipeline.OfflinePolicy(), completes=completes
    )
    if result.status == "denied":
        raise InjectError(result.message)
    for warning in result.inject_warnings + result.decision_warnings:
        print(warning, file=sys.stderr)
    policy = (template.get("spec") or {}).get("restartPolicy")
    if completes and result.status == "injected" and policy not in ("Never", "OnFailure"):
        # The apiserver refuses such a Job; say so rather than guess silently.
        print(
            f"sidecar-debug: {kind} pod template has restartPolicy {policy or '(unset)'}, but a "
            "Job needs Never or OnFailure (Kubernetes refuses it otherwise); the toolset was set "
            "to exit with the app, as for every Job",
            file=sys.stderr,
        )
    return result.pod


def inject_document(
    document: Any,
    settings: Settings,
    profile: str | None = None,
    runtime: str | None = None,
    mode: str | None = None,
) -> Any:
    if not isinstance(document, dict):
        return document
    kind = document.get("kind")
    namespace = str((document.get("metadata") or {}).get("namespace") or "default")
    if kind == "List":
        return {
            **document,
            "items": [
                inject_document(item, settings, profile, runtime, mode)
                for item in document.get("items") or []
            ],
        }
    if kind == "Pod":
        if not isinstance(document.get("spec"), dict):
            raise InjectError(f"Pod {document.get('metadata', {}).get('name')!r} has no spec")
        return inject_template(document, namespace, settings, profile, runtime, mode=mode)
    path = TEMPLATE_PATHS.get(str(kind))
    if path is None:
        return document
    parent: Any = document
    for key in path[:-1]:
        parent = parent.get(key) if isinstance(parent, dict) else None
    template = parent.get(path[-1]) if isinstance(parent, dict) else None
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        name = (document.get("metadata") or {}).get("name")
        raise InjectError(f"{kind} {name!r} has no pod template at {'.'.join(path)}.spec")
    assert isinstance(parent, dict)  # noqa: S101 - narrowed by the loop above
    result = _copy_path(document, path[:-1])
    target: Any = result
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = inject_template(
        template, namespace, settings, profile, runtime, kind=str(kind), mode=mode
    )
    return result


def _copy_path(document: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """Shallow-copy the dicts along `path` so the input document is never modified."""
    result = dict(document)
    node = result
    for key in path:
        node[key] = dict(node[key])
        node = node[key]
    return result
