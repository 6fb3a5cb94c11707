"""`review(body) -> AdmissionReview`: the whole admission decision for one request.

Order: validate the envelope -> webhook.inject.pipeline (decide, policy gate, inject into a
copy, diff).
Whatever goes wrong, the answer is an AdmissionReview: a body that is no AdmissionReview or has
no request is admitted unchanged with a message; a request or Pod whose fields have the wrong
type (which the apiserver never sends: it decodes them first) is refused with a 400 naming the
field (webhook.wire.shape); unknown profiles and policy denials are refused with a reason; and
an unexpected error admits the pod without a sidecar (failing open for pod creation, never
granting privilege) and is logged with its traceback.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from webhook import metrics
from webhook.admission import review as admission
from webhook.admission.ephemeral import review_ephemeral
from webhook.admission.review import Request, Review
from webhook.certs.tls import BundleFile, results_ca_file
from webhook.config import Settings
from webhook.inject import pipeline
from webhook.inject.decision import decide
from webhook.logs import REVIEW_LOGGER, log_fields
from webhook.policy.api import AllowAll, PolicyEngine
from webhook.wire import constants, jsonio, shape

if TYPE_CHECKING:
    from webhook.kube.access import PodReader

# A misspelt annotation value or an unreadable object: a bad request (400) rather than a policy
# refusal (403).
MALFORMED_REQUEST = "malformed-request"
_BAD_REQUESTS = frozenset(
    {"unknown-profile", "unknown-mode", pipeline.MALFORMED, MALFORMED_REQUEST}
)
log = logging.getLogger(REVIEW_LOGGER)


@dataclass
class Outcome:
    """Everything one review decided, for the response, the log line and the metrics."""

    decision: str  # injected | attached | skipped | denied | ignored | error
    reason: str
    message: str
    patch: list[dict[str, Any]] = field(default_factory=list)
    profile: str = ""
    grant: str = ""
    warnings: list[str] = field(default_factory=list)
    code: int | None = None  # HTTP code of a denial; None: 403 (400 for an unknown profile)


def _ignored(reason: str, message: str) -> Outcome:
    return Outcome("ignored", reason, message)


def _metadata(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod's metadata, {} when it is not an object (the shape check names it)."""
    metadata = pod.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _pod_name(pod: dict[str, Any]) -> str:
    metadata = _metadata(pod)
    name, generate = metadata.get("name"), metadata.get("generateName")
    if isinstance(name, str) and name:
        return name
    return (generate if isinstance(generate, str) else "") + "*"


class Mutator:
    def __init__(
        self,
        settings: Settings,
        policy: PolicyEngine | None = None,
        pods: PodReader | None = None,
    ) -> None:
        self.settings = settings
        self.policy: PolicyEngine = policy if policy is not None else AllowAll()
        # Ephemeral-container reviews from Kubernetes < 1.22 read the pod; the policy gate's
        # cluster client can (webhook.kube.access.KubernetesClusterAPI.read_pod).
        cluster = getattr(self.policy, "cluster", None)
        if pods is None and hasattr(cluster, "read_pod"):
            pods = cluster
        self.pods = pods
        self.results_ca = BundleFile(results_ca_file(settings) if settings.results_url else None)

    def review(self, body: Any) -> Review:
        started = time.perf_counter()
        request: Request | None = None
        api_version = admission.API_VERSION
        namespace = pod_name = ""
        try:
            envelope = admission.read_envelope(body)
            api_version = envelope.api_version
            if envelope.malformed:
                # The apiserver never sends such a request; a client talking to the webhook
                # directly can. Refused with the field named, uid echoed if it is readable.
                outcome = Outcome(
                    "denied", MALFORMED_REQUEST, f"sidecar-debug {envelope.message}"
                )
            elif envelope.request is None:
                outcome = _ignored(envelope.reason, envelope.message)
            else:
                request = envelope.request
                pod = request.get("object")
                namespace = str(request.get("namespace") or "")
                if isinstance(pod, dict):
                    namespace = namespace or str(_metadata(pod).get("namespace") or "")
                    pod_name = _pod_name(pod)
                outcome = self._review_request(request)
        except Exception:  # noqa: BLE001 - a bug must never block pod creation or leak a 500
            log.exception("internal error while reviewing; pod admitted without the sidecar")
            outcome = Outcome(
                "error",
                "internal-error",
                "sidecar-debug hit an internal error; the pod was admitted without "
                "the debug sidecar (see the webhook's log)",
            )
        elapsed = time.perf_counter() - started
        metrics.REVIEWS.labels(outcome.decision, outcome.reason).inc()
        metrics.LATENCY.observe(elapsed)
        uid = str((request or {}).get("uid", "")) if isinstance(request, dict) else ""
        if request is None and isinstance(body, dict) and isinstance(body.get("request"), dict):
            echoed = body["request"].get("uid")
            uid = echoed if isinstance(echoed, str) else ""
        log_fields(
            log,
            logging.WARNING if outcome.decision in ("error", "denied") else logging.INFO,
            outcome.message,
            uid=uid,
            namespace=namespace,
            pod=pod_name,
            decision=outcome.decision,
            reason=outcome.reason,
            profile=outcome.profile,
            grant=outcome.grant,
            latency_ms=round(elapsed * 1000, 3),
        )
        audit = {constants.AUDIT_DECISION: outcome.decision, constants.AUDIT_REASON: outcome.reason}
        if outcome.profile:
            audit[constants.AUDIT_PROFILE] = outcome.profile
        if outcome.grant:
            audit[constants.AUDIT_GRANT] = outcome.grant
        denied = outcome.decision == "denied"
        return admission.build_response(
            request if isinstance(request, dict) else admission.echo_uid(body),
            allowed=not denied,
            patch=outcome.patch,
            message=outcome.message if outcome.decision not in ("injected", "attached") else None,
            code=(outcome.code or (400 if outcome.reason in _BAD_REQUESTS else 403))
            if denied
            else None,
            warnings=outcome.warnings,
            audit=audit if request is not None else None,
            api_version=api_version,
        )

    def _review_request(self, request: Request) -> Outcome:
        kind = request.get("kind") or {}
        resource = request.get("resource") or {}
        if (
            request.get("subResource") == "ephemeralcontainers"
            and resource.get("resource") == "pods"
            and resource.get("group", "") == ""
        ):
            ephemeral = review_ephemeral(request, self.settings, self.policy, self.pods)
            return Outcome(
                ephemeral.status,
                ephemeral.reason,
                ephemeral.message,
                patch=ephemeral.patch,
                profile=ephemeral.profile,
                grant=ephemeral.grant,
                warnings=ephemeral.warnings,
                code=ephemeral.code,
            )
        if (
            kind.get("kind") != "Pod"
            or kind.get("group", "") != ""
            or resource.get("resource") not in (None, "pods")
        ):
            return _ignored(
                "not-a-pod", f"{kind.get('kind', 'object')} is not a Pod; nothing to do"
            )
        if request.get("subResource"):
            return _ignored("subresource", f"subresource {request['subResource']!r} is not handled")
        if request.get("operation") != "CREATE":
            return _ignored(
                "operation",
                f"operation {request.get('operation')!r} is not handled; "
                "sidecars are injected at CREATE only",
            )
        pod = request.get("object")
        if not isinstance(pod, dict) or not isinstance(pod.get("spec"), dict):
            return _ignored("no-object", "request carries no Pod object with a spec")
        namespace = str(request.get("namespace") or _metadata(pod).get("namespace") or "")
        too_large = self._too_many_containers(pod, namespace)
        if too_large:
            return too_large
        results_ca = self.results_ca.read()
        result = pipeline.run(
            pod,
            namespace,
            self.settings,
            self.policy,
            user=request.get("userInfo") or {},
            dry_run=bool(request.get("dryRun")),
            results_ca=results_ca,
        )
        warnings = list(result.warnings)
        if self.settings.results_url and not results_ca and result.status == "injected":
            warnings.append(
                "sidecar-debug: the results service's CA is not readable yet "
                f"({self.results_ca.path}): this pod's toolset cannot push scheduled runs; "
                "recreate the pod once the webhook has its certificates")
        if result.status == "injected":
            size = len(jsonio.dumps(result.patch))
            if size > self.settings.max_patch_bytes:
                return _too_large(
                    f"the sidecar's patch would be {size} bytes, more than maxPatchBytes "
                    f"({self.settings.max_patch_bytes})", "maxPatchBytes")
        return Outcome(
            result.status,
            result.reason,
            result.message,
            patch=result.patch,
            profile=result.profile,
            grant=result.grant,
            warnings=warnings,
        )

    def _too_many_containers(self, pod: dict[str, Any], namespace: str) -> Outcome | None:
        """Above maxPodContainers a pod that asks for the sidecar is admitted without it, before
        any injection work: such a pod would cost every other review its time (10,000
        containers: 0.3 s and a 2 MB patch). A mature injector skips with a warning rather than
        block the workload, so the pod is admitted as it is."""
        spec = pod["spec"]
        count = sum(
            len(containers)
            for key in ("containers", "initContainers", "ephemeralContainers")
            if isinstance(containers := spec.get(key), list)
        )
        limit = self.settings.max_pod_containers
        if count <= limit:
            return None
        if shape.problem(pod, shape.POD) is not None:
            return None  # the pipeline names the field that is wrong
        if not decide(pod, namespace, self.settings).inject:
            return None
        return _too_large(
            f"the pod has {count} containers, more than maxPodContainers ({limit})",
            "maxPodContainers",
        )


def _too_large(why: str, setting: str) -> Outcome:
    message = (
        f"sidecar-debug: not injected: {why}; the pod is admitted without the debug sidecar. "
        f"Debug a smaller pod, or raise {setting} in the webhook's settings."
    )
    return Outcome("skipped", "pod-too-large", message, warnings=[message])
