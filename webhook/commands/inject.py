"""`sidecar-debug inject -f FILE|-`: offline injection, like `istioctl kube-inject`.

Pods and the pod templates of workloads are injected; every other document passes through.
Running it on its own output changes nothing (the status annotation makes it idempotent).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any, TextIO

import yaml

from webhook import constants
from webhook.config import Settings, SettingsError, load_settings
from webhook.inject.decision import decide
from webhook.inject.sidecar import InjectionPlan, inject_pod

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


class InjectError(ValueError):
    """A document cannot be injected; the message names the document and the problem."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "inject",
        help="inject the debug sidecar into manifests offline (stdout)",
        description="Inject the debug sidecar into Pods and pod templates of Deployments, "
        "StatefulSets, DaemonSets, ReplicaSets, Jobs and CronJobs in multi-document YAML. "
        "Other documents pass through unchanged. No policy or RBAC check runs offline.",
    )
    parser.add_argument("-f", "--filename", required=True, help="YAML file, or - for stdin")
    parser.add_argument("--profile", help="debug profile (default: annotation, then settings)")
    parser.add_argument(
        "--runtime", help="app runtime for environment hints: dotnet, node, python, java"
    )
    parser.add_argument("--config", help="settings file, as for `serve`")
    parser.add_argument("--toolset-image", help="toolset image to inject")
    parser.set_defaults(func=run)


def inject_template(
    template: dict[str, Any],
    namespace: str,
    settings: Settings,
    profile: str | None = None,
    runtime: str | None = None,
) -> dict[str, Any]:
    """The injected pod (or pod template); unchanged when the decision is not to inject."""
    if profile or runtime:
        # Record the choice on the pod so the webhook and `describe` see the same thing.
        template = dict(template)
        metadata = dict(template.get("metadata") or {})
        annotations = dict(metadata.get("annotations") or {})
        if profile:
            annotations[constants.ANNOTATION_PROFILE] = profile
        if runtime:
            annotations[constants.ANNOTATION_RUNTIME] = runtime
        metadata["annotations"] = annotations
        template["metadata"] = metadata
    decision = decide(template, namespace, settings)
    if decision.refuse:
        raise InjectError(decision.message)
    if not decision.inject or decision.profile is None:
        return template
    plan = InjectionPlan(
        profile=decision.profile, runtime=decision.runtime, grant="offline", reason="offline-inject"
    )
    mutated, notes = inject_pod(template, plan, settings)
    for warning in notes.warnings + list(decision.warnings):
        print(warning, file=sys.stderr)
    return mutated


def inject_document(
    document: Any, settings: Settings, profile: str | None = None, runtime: str | None = None
) -> Any:
    if not isinstance(document, dict):
        return document
    kind = document.get("kind")
    namespace = str((document.get("metadata") or {}).get("namespace") or "default")
    if kind == "List":
        return {
            **document,
            "items": [
                inject_document(item, settings, profile, runtime)
                for item in document.get("items") or []
            ],
        }
    if kind == "Pod":
        if not isinstance(document.get("spec"), dict):
            raise InjectError(f"Pod {document.get('metadata', {}).get('name')!r} has no spec")
        return inject_template(document, namespace, settings, profile, runtime)
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
    target[path[-1]] = inject_template(template, namespace, settings, profile, runtime)
    return result


def _copy_path(document: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """Shallow-copy the dicts along `path` so the input document is never modified."""
    result = dict(document)
    node = result
    for key in path:
        node[key] = dict(node[key])
        node = node[key]
    return result


def inject_stream(
    stream: TextIO, settings: Settings, profile: str | None = None, runtime: str | None = None
) -> Iterator[Any]:
    for document in yaml.safe_load_all(stream):
        if document is not None:
            yield inject_document(document, settings, profile, runtime)


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config, overrides={"toolset_image": args.toolset_image})
    except SettingsError as exc:
        print(f"sidecar-debug: invalid settings: {exc}", file=sys.stderr)
        return 2
    try:
        if args.filename == "-":
            documents = list(inject_stream(sys.stdin, settings, args.profile, args.runtime))
        else:
            with open(args.filename) as handle:
                documents = list(inject_stream(handle, settings, args.profile, args.runtime))
    except OSError as exc:
        print(f"sidecar-debug: cannot read {args.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    except yaml.YAMLError as exc:
        print(f"sidecar-debug: {args.filename} is not valid YAML: {exc}", file=sys.stderr)
        return 1
    except InjectError as exc:
        print(f"sidecar-debug: {exc}", file=sys.stderr)
        return 1
    yaml.safe_dump_all(documents, sys.stdout, sort_keys=False, default_flow_style=False)
    return 0
