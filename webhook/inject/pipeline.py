"""The one injection pipeline: decide -> ask the policy -> plan -> inject into a copy -> diff.

The webhook's mutation (webhook.admission.mutate) and offline `sidecar-debug inject`
(webhook.inject.workloads) both call `run`, so a manifest injected offline gets exactly what the
webhook would patch into the pod (as Istio's kube-inject applies the webhook's own template).
Pure: no Kubernetes client, no server; the policy is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.config import Settings
from webhook.inject.attach import env_value
from webhook.inject.decision import decide, status_container
from webhook.inject.patch import create_patch
from webhook.inject.sidecar import InjectionPlan, inject_pod, session_env, with_session_env
from webhook.policy.api import PolicyEngine, PolicyRequest
from webhook.wire import constants, shape
from webhook.wire.identity import UserInfo
from webhook.wire.pod import service_account

Status = Literal["injected", "skipped", "denied"]
# Reason of a refusal because the object does not have a Pod's shape (HTTP 400, as for a
# request the webhook cannot read).
MALFORMED = "malformed-object"


@dataclass
class PipelineResult:
    """What `run` decided; `pod` is the injected copy (the input itself when nothing changed)."""

    status: Status
    reason: str
    message: str
    pod: dict[str, Any]
    patch: list[dict[str, Any]] = field(default_factory=list)
    profile: str = ""  # the injected profile, or the requested one when denied
    grant: str = ""
    decision_warnings: list[str] = field(default_factory=list)
    policy_warnings: list[str] = field(default_factory=list)
    inject_warnings: list[str] = field(default_factory=list)  # what inject_pod had to adapt
    downgrade_warning: str = ""  # set when the policy chose another profile than requested

    @property
    def warnings(self) -> list[str]:
        extra = [self.downgrade_warning] if self.downgrade_warning else []
        return self.decision_warnings + self.policy_warnings + self.inject_warnings + extra




def _session_facts(
    pod: dict[str, Any],
    namespace: str,
    settings: Settings,
    policy: PolicyEngine,
    user: UserInfo,
    dry_run: bool,
) -> PipelineResult | None:
    """A pod created already injected (offline `inject`, a workload template): its toolset gets
    the session's facts the webhook writes at admission, when the policy grants the profile it
    claims to this request now. None when there is nothing to write (no toolset carrying a
    profile, facts already there, no grant: the guard then refuses the pod and says why)."""
    spec = pod["spec"]
    name = status_container(pod, settings, []) or settings.sidecar_name
    for key in ("initContainers", "containers"):
        containers = spec.get(key) or []
        for index, container in enumerate(containers):
            if not isinstance(container, dict) or container.get("name") != name:
                continue
            profile = settings.profiles.get(env_value(container, constants.ENV_PROFILE) or "")
            if profile is None or env_value(container, constants.ENV_SESSION_STARTED):
                return None
            image = str(container.get("image") or "")
            result = policy.evaluate(PolicyRequest(
                namespace=namespace, service_account=service_account(pod), user=user,
                requested_profile=profile, dry_run=dry_run,
                requested_image=image if image != settings.toolset_image else None))
            facts = session_env(result.grant, result.started, result.deadline)
            if (not result.allowed or result.profile is None
                    or result.profile.name != profile.name or not facts):
                return None
            mutated = {**pod, "spec": {**spec, key: [
                *containers[:index], with_session_env(container, facts),
                *containers[index + 1:]]}}
            return PipelineResult(
                "skipped", "already-injected",
                f"the session's facts were written into {name!r} (profile {profile.name!r}, "
                f"{result.grant})", mutated, patch=create_patch(pod, mutated),
                profile=profile.name, grant=result.grant)
    return None


def run(
    pod: dict[str, Any],
    namespace: str,
    settings: Settings,
    policy: PolicyEngine,
    *,
    user: UserInfo | None = None,
    dry_run: bool = False,
    completes: bool | None = None,
    results_ca: str = "",
) -> PipelineResult:
    """Inject `pod` (never modified) as the webhook would; the patch turns `pod` into `.pod`.
    `completes`: the pod runs to completion (a Job's template); None = by its restartPolicy."""
    problem = shape.problem(pod, shape.POD)
    if problem is not None:
        # The apiserver never sends such a Pod (it decodes it first); a client calling the
        # webhook directly or a manifest given to offline inject can. Name the field.
        return PipelineResult(
            "denied",
            MALFORMED,
            f"sidecar-debug cannot read the Pod: {problem}. Fix the manifest (the API server "
            "rejects it too).",
            pod,
        )
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    # The namespace's default mode is asked for only when the pod names none (a cached look-up
    # in the webhook, nothing offline).
    namespace_mode = (
        None if constants.ANNOTATION_MODE in annotations else policy.namespace_mode(namespace)
    )
    decision = decide(pod, namespace, settings, namespace_mode=namespace_mode)
    warnings = list(decision.warnings)
    if decision.refuse:
        return PipelineResult(
            "denied", decision.reason, decision.message, pod, decision_warnings=warnings
        )
    if decision.reason == "already-injected":
        facts = _session_facts(pod, namespace, settings, policy, user or {}, dry_run)
        if facts is not None:
            facts.decision_warnings = warnings
            facts.message = f"{decision.message}; {facts.message}"
            return facts
    if not decision.inject or decision.profile is None:
        return PipelineResult(
            "skipped", decision.reason, decision.message, pod, decision_warnings=warnings
        )
    result = policy.evaluate(
        PolicyRequest(
            namespace=namespace,
            service_account=service_account(pod),
            user=user or {},
            requested_profile=decision.profile,
            requested_image=decision.image,
            dry_run=dry_run,
            mode=decision.mode,
        )
    )
    policy_warnings = list(result.warnings)
    if not result.allowed:
        return PipelineResult(
            "denied",
            result.reason,
            result.message,
            pod,
            profile=decision.profile.name,
            decision_warnings=warnings,
            policy_warnings=policy_warnings,
        )
    if result.profile is None:
        return PipelineResult(
            "skipped",
            result.reason,
            result.message,
            pod,
            decision_warnings=warnings,
            policy_warnings=policy_warnings,
        )
    profile = result.profile
    plan = InjectionPlan(
        profile=profile,
        runtime=decision.runtime,
        image=result.image,
        requested_profile=decision.profile.name,
        grant=result.grant,
        reason=result.reason,
        extra_annotations=dict(result.annotations),
        completes=completes,
        mode=decision.mode,
        results_ca=results_ca,
        started=result.started,
        deadline=result.deadline,
    )
    mutated, notes = inject_pod(pod, plan, settings)
    downgraded = profile.name != decision.profile.name
    return PipelineResult(
        "injected",
        result.reason,
        result.message,
        mutated,
        patch=create_patch(pod, mutated),
        profile=profile.name,
        grant=result.grant,
        decision_warnings=warnings,
        policy_warnings=policy_warnings,
        inject_warnings=list(notes.warnings),
        downgrade_warning=f"sidecar-debug: {result.message}" if downgraded else "",
    )
