"""Offline injection of manifests: Pods, and the pod templates of workloads (Deployments,
StatefulSets, DaemonSets, ReplicaSets, ReplicationControllers, Jobs, CronJobs, Lists of them).

Each pod (template) goes through webhook.inject.pipeline, as the webhook's review would; every
other document passes through. The input document is never modified, and a document in which
nothing was injected is returned as the very same object (so the caller can copy its original
text): the --profile/--runtime/--mode choices are written into a pod only when it is injected.
Each pod template gets an Outcome saying what happened and why, for the caller to report.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.config import Settings
from webhook.inject import pipeline
from webhook.inject.decision import is_injected, wired_standby
from webhook.policy.api import AllowAll
from webhook.wire import constants
from webhook.wire.status import read_status

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
# Kinds that may hold pods: every other document passes through without being looked at.
WORKLOAD_KINDS = frozenset({"Pod", "List", *TEMPLATE_PATHS})

OutcomeStatus = Literal["injected", "skipped", "refused"]


class InjectError(ValueError):
    """A document cannot be injected; the message names the document and the problem."""


@dataclass(frozen=True)
class Outcome:
    """What happened to one pod (template): `what` names it ("Deployment 'web'"), `message`
    says why it was skipped or refused; `warnings` are what the pipeline had to adapt."""

    what: str
    status: OutcomeStatus
    message: str
    warnings: tuple[str, ...] = ()


@dataclass
class DocumentResult:
    """`document` is the input object itself unless something was injected."""

    document: Any
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(o.status == "injected" for o in self.outcomes)

    @property
    def refused(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "refused"]


def _name(document: dict[str, Any]) -> str:
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return str(name) if name is not None else "(no name)"


def describe(document: Any) -> str:
    """`Deployment 'web'`, as messages name a document."""
    if not isinstance(document, dict):
        return "document"
    return f"{document.get('kind') or '(no kind)'} {_name(document)!r}"


def _reinject_conflict(
    template: dict[str, Any],
    settings: Settings,
    profile: str | None,
    runtime: str | None,
    mode: str | None,
) -> str | None:
    """Why an already injected pod cannot take the options asked for, or None. Offline
    `inject` refuses rather than re-injecting: the app containers carry our hints and mounts
    mixed with their own, and taking them out again cannot be told apart from the user's edits."""
    status = read_status(template).status
    if status is None:
        return None
    if not (is_injected(template, settings) or wired_standby(template)):
        return None
    had = {"--profile": status.profile, "--runtime": status.runtime, "--mode": status.mode}
    asked = {"--profile": profile, "--runtime": runtime, "--mode": mode}
    differs = [
        f"{option} {value} (it has {had[option] or 'none'!s})"
        for option, value in asked.items()
        if value and value != had[option]
    ]
    if not differs:
        return None
    return (
        f"already injected with profile {had['--profile']!r} (mode {had['--mode']}), and "
        f"{', '.join(differs)} asks for another: offline inject does not re-inject. Run it on "
        "the manifest without the debug sidecar (e.g. from version control) to inject other "
        "options"
    )


def inject_template(
    template: dict[str, Any],
    namespace: str,
    settings: Settings,
    profile: str | None = None,
    runtime: str | None = None,
    kind: str = "Pod",
    mode: str | None = None,
    what: str = "Pod",
) -> tuple[dict[str, Any], Outcome]:
    """The injected pod (or pod template) and what happened; `template` itself (the same
    object, unchanged) when the decision is not to inject."""
    conflict = _reinject_conflict(template, settings, profile, runtime, mode)
    if conflict is not None:
        return template, Outcome(what, "refused", conflict)
    candidate = template
    if profile or runtime or mode:
        # Record the choice on the pod so the webhook and `describe` see the same thing; it
        # reaches the output only when the pod is injected.
        candidate = dict(template)
        metadata = dict(candidate.get("metadata") or {})
        annotations = dict(metadata.get("annotations") or {})
        if profile:
            annotations[constants.ANNOTATION_PROFILE] = profile
        if runtime:
            annotations[constants.ANNOTATION_RUNTIME] = runtime
        if mode:
            annotations[constants.ANNOTATION_MODE] = mode
        metadata["annotations"] = annotations
        candidate["metadata"] = metadata
    # A Job's pods end whatever its template says: the toolset must exit with the app.
    completes = True if kind in COMPLETING_KINDS else None
    result = pipeline.run(
        candidate, namespace, settings, AllowAll.offline(), completes=completes
    )
    warnings = [_plain(w) for w in result.inject_warnings + result.decision_warnings]
    if result.status != "injected":
        status: OutcomeStatus = "skipped" if result.status == "skipped" else "refused"
        return template, Outcome(what, status, result.message, tuple(warnings))
    policy = (template.get("spec") or {}).get("restartPolicy")
    if completes and policy not in ("Never", "OnFailure"):
        # The apiserver refuses such a Job; say so rather than guess silently.
        warnings.append(
            f"{kind} pod template has restartPolicy {policy or '(unset)'}, but a Job needs Never "
            "or OnFailure (Kubernetes refuses it otherwise); the toolset was set to exit with "
            "the app, as for every Job"
        )
    return result.pod, Outcome(what, "injected", result.message, tuple(warnings))


def _plain(warning: str) -> str:
    """A pipeline warning without its `sidecar-debug: ` prefix (the caller adds where)."""
    prefix = "sidecar-debug: "
    return warning[len(prefix) :] if warning.startswith(prefix) else warning


def is_workload(document: Any) -> bool:
    """A document that may hold pods to inject (a Pod, a workload, a List)."""
    return isinstance(document, dict) and document.get("kind") in WORKLOAD_KINDS


def inject_workload(
    document: Any,
    settings: Settings,
    profile: str | None = None,
    runtime: str | None = None,
    mode: str | None = None,
    where: str = "",
) -> DocumentResult:
    """Inject every pod (template) in `document`; one Outcome per pod template found."""
    if not is_workload(document):
        return DocumentResult(document)
    kind = str(document.get("kind"))
    what = f"{where}{describe(document)}"
    metadata = document.get("metadata")
    namespace = str((metadata if isinstance(metadata, dict) else {}).get("namespace") or "default")
    if kind == "List":
        items = document.get("items")
        if items is None:
            return DocumentResult(document)
        if not isinstance(items, list):
            return DocumentResult(document, [Outcome(what, "refused", "items is not a list")])
        results = [
            inject_workload(item, settings, profile, runtime, mode, where=f"{what} items[{i}]: ")
            for i, item in enumerate(items)
        ]
        outcomes = [o for r in results for o in r.outcomes]
        if not any(r.changed for r in results):
            return DocumentResult(document, outcomes)
        return DocumentResult({**document, "items": [r.document for r in results]}, outcomes)
    if kind == "Pod":
        if not isinstance(document.get("spec"), dict):
            return DocumentResult(document, [Outcome(what, "refused", "has no spec (a mapping)")])
        pod, outcome = inject_template(
            document, namespace, settings, profile, runtime, mode=mode, what=what
        )
        return DocumentResult(pod, [outcome])
    path = TEMPLATE_PATHS[kind]
    template = _template(document, kind)
    if template is None:
        problem = f"has no pod template at {'.'.join(path)}.spec"
        return DocumentResult(document, [Outcome(what, "refused", problem)])
    injected, outcome = inject_template(
        template, namespace, settings, profile, runtime, kind=kind, mode=mode, what=what
    )
    if injected is template:
        return DocumentResult(document, [outcome])
    result = _copy_path(document, path[:-1])
    target: Any = result
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = injected
    return DocumentResult(result, [outcome])


@dataclass(frozen=True)
class PodTemplate:
    """A pod (template) in a document: `what` names it ("Deployment 'web'"), `path` is its
    field path prefix in the document ("" for a Pod, "spec.template." for a Deployment,
    "items[0]." in a List); `pod` is None when there is none where the kind has it (`problem`
    says why)."""

    what: str
    path: str
    pod: dict[str, Any] | None
    problem: str = ""


def _template(document: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The pod template of a workload of `kind`, if it has one with a spec."""
    parent: Any = document
    for key in TEMPLATE_PATHS[kind]:
        parent = parent.get(key) if isinstance(parent, dict) else None
    return parent if isinstance(parent, dict) and isinstance(parent.get("spec"), dict) else None


def pod_templates(document: Any, where: str = "", path: str = "") -> list[PodTemplate]:
    """Every Pod and pod template in `document` (none unless it is a workload), as
    inject_workload finds them."""
    if not is_workload(document):
        return []
    kind = str(document.get("kind"))
    what = f"{where}{describe(document)}"
    if kind == "List":
        items = document.get("items")
        if items is None:
            return []
        if not isinstance(items, list):
            return [PodTemplate(what, f"{path}items.", None, "items is not a list")]
        return [
            found
            for i, item in enumerate(items)
            for found in pod_templates(item, f"{what} items[{i}]: ", f"{path}items[{i}].")
        ]
    if kind == "Pod":
        if not isinstance(document.get("spec"), dict):
            return [PodTemplate(what, path, None, "has no spec (a mapping)")]
        return [PodTemplate(what, path, document)]
    keys = ".".join(TEMPLATE_PATHS[kind])
    template = _template(document, kind)
    if template is None:
        return [PodTemplate(what, path, None, f"has no pod template at {keys}.spec")]
    return [PodTemplate(what, f"{path}{keys}.", template)]


def inject_document(
    document: Any,
    settings: Settings,
    profile: str | None = None,
    runtime: str | None = None,
    mode: str | None = None,
) -> Any:
    """`inject_workload` for one plain document: warnings to stderr, the first refusal raised
    as InjectError; the document itself when nothing was injected."""
    result = inject_workload(document, settings, profile, runtime, mode)
    for outcome in result.outcomes:
        for warning in outcome.warnings:
            print(f"sidecar-debug: {outcome.what}: {warning}", file=sys.stderr)
    if result.refused:
        first = result.refused[0]
        raise InjectError(f"{first.what}: {first.message}")
    return result.document


def _copy_path(document: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """Shallow-copy the dicts along `path` so the input document is never modified."""
    result = dict(document)
    node = result
    for key in path:
        node[key] = dict(node[key])
        node = node[key]
    return result
