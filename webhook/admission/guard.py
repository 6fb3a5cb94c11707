"""The guard: `POST /validate-pods`, a validating review of pods in guarded namespaces.

Guarded namespaces are those the chart sends here (labelled for injection, or carrying
constants.LABEL_GUARD): their Pod Security may be relaxed for our privileged sidecar, so the
guard enforces the Pod Security Standards itself (webhook.guard, the pure core) on every
container except a toolset the core verifies as exactly what the injector or `attach` builds,
for a profile the requester holds now. Validating webhooks run after every mutation, so what is
checked is what will be stored.

Per request:
- pods CREATE: the whole pod. A verified toolset's grant is re-derived by the policy gate
  (PolicyGate.check_grant: the same rules, grantSubject, SubjectAccessReviews and cache as the
  injection) for the requester and the pod's service account; its session facts (the env the
  webhook wrote: grant, start, deadline) must agree with that.
- pods and pods/status UPDATE: the annotations the webhook and the controller write
  (constants.OWNED_ANNOTATIONS) change only by `annotationOwners`; then, as Pod Security
  admission does, only an update that changes what runs (an image, a seccomp or AppArmor
  annotation, also one naming a container the pod does not have yet) is checked, as a whole
  pod. A seccomp or AppArmor annotation naming a container is judged with that container when
  an update adds it (an ephemeral container cannot ride on an annotation planted earlier).
- pods/ephemeralcontainers UPDATE: the whole pod with its new ephemeral containers (read from the
  API on Kubernetes < 1.22, whose review carries only the list); a new toolset needs the
  requester's own grant, as at the ephemeral gate.
Bad input is refused with a 400 naming the field; anything the guard cannot decide (the API
unreachable, a bug) is refused with a 403 saying to retry: fail closed, never a 5xx.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from webhook import metrics
from webhook.admission import review as admission
from webhook.admission.review import Request, Review
from webhook.config import Settings
from webhook.guard.check import GuardResult, evaluate
from webhook.guard.pss import (
    APPARMOR_ANNOTATION_PREFIX,
    LATEST,
    SECCOMP_CONTAINER_ANNOTATION_PREFIX,
    SECCOMP_POD_ANNOTATION,
    Level,
    PolicyVersion,
    Violation,
    quote,
    resolve,
)
from webhook.inject.attach import env_value
from webhook.logs import REVIEW_LOGGER, log_fields
from webhook.policy.api import PolicyRequest
from webhook.wire import constants, shape
from webhook.wire.pod import named, service_account
from webhook.wire.rfc3339 import parse_time

if TYPE_CHECKING:
    from webhook.kube.access import PodReader
    from webhook.policy.guard_questions import GrantVerdict

log = logging.getLogger(REVIEW_LOGGER)

LEVELS = ("baseline", "restricted")
LEGACY_KIND = "EphemeralContainers"
POD_READ_TIMEOUT_SECONDS = 2.0
# How far the session's start written by the mutating webhook may be from the guard's clock.
FACT_SKEW = dt.timedelta(minutes=5)


class GuardPolicy(Protocol):
    """What the guard asks the policy gate (webhook.policy.guard_questions)."""

    settings: Settings

    def check_grant(self, request: PolicyRequest) -> GrantVerdict: ...

    def namespace_labels(self, namespace: str) -> Mapping[str, str]: ...

    def allows_image(self, namespace: str, service_account: str, image: str) -> bool: ...

    def guard_level(self, namespace: str, service_account: str) -> str | None: ...


@dataclass
class Verdict:
    allowed: bool
    reason: str  # machine-readable, for the log, the metrics and the audit annotation
    message: str
    code: int = 403
    warnings: list[str] = field(default_factory=list)
    grant: str = ""


def _allow(reason: str, message: str, **extra: Any) -> Verdict:
    return Verdict(True, reason, message, **extra)


def _deny(reason: str, message: str, code: int = 403) -> Verdict:
    return Verdict(False, reason, message, code)


def stricter(*levels: str | None) -> str:
    """The strictest of the levels named (unknown words count as nothing); baseline at least."""
    named = [level for level in levels if level in LEVELS]
    return "restricted" if "restricted" in named else "baseline"


def _metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _annotations(obj: Mapping[str, Any]) -> dict[str, Any]:
    annotations = _metadata(obj).get("annotations")
    return annotations if isinstance(annotations, dict) else {}


def _named(items: Any) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in named(items)}


def changed_owned_annotations(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The webhook's and the controller's annotation keys that differ between the objects."""
    before, after = _annotations(old), _annotations(new)
    return [key for key in constants.OWNED_ANNOTATIONS if before.get(key) != after.get(key)]


def _security_annotations(annotations: Mapping[str, Any]) -> dict[str, Any]:
    """The seccomp and AppArmor annotations (pod-level and per container name, whether or not a
    container of that name exists yet: an ephemeral container may take the name later)."""
    return {key: value for key, value in annotations.items()
            if isinstance(key, str) and (key == SECCOMP_POD_ANNOTATION or key.startswith(
                (SECCOMP_CONTAINER_ANNOTATION_PREFIX, APPARMOR_ANNOTATION_PREFIX)))}


def significant_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """What in an UPDATE changes what runs (Pod Security admission's isSignificantPodUpdate:
    images, containers added, the seccomp annotations; and, stricter, the AppArmor annotations
    and those naming a container the pod does not have yet), or None for e.g. a label
    change."""
    before = _security_annotations(_annotations(old))
    after = _security_annotations(_annotations(new))
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            return f"annotation {key}"
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        old_containers = _named(old_spec.get(kind))
        for name, container in _named(new_spec.get(kind)).items():
            previous = old_containers.get(name)
            if previous is None:
                return f"{kind} {name!r} added"
            if container.get("image") != previous.get("image"):
                return f"the image of {kind} {name!r}"
    return None


def fact_problems(
    container: Mapping[str, Any],
    verdict: GrantVerdict,
    now: dt.datetime,
) -> list[str]:
    """Why the session facts in a new toolset's env are not what the webhook writes for this
    grant now (webhook.inject.sidecar.session_env): the grant re-derived, a start near now, a
    deadline no later than the rule's maxSessionDuration allows."""
    problems: list[str] = []
    grant = env_value(container, constants.ENV_GRANT)
    if grant != verdict.grant:
        problems.append(
            f"{constants.ENV_GRANT} is {grant!r}, but the grant re-derived now is {verdict.grant!r}"
        )
    raw_started = env_value(container, constants.ENV_SESSION_STARTED)
    started = parse_time(raw_started)
    if started is None:
        problems.append(f"{constants.ENV_SESSION_STARTED} is {raw_started!r}, not an RFC 3339 time")
    elif abs(started - now) > FACT_SKEW:
        problems.append(f"{constants.ENV_SESSION_STARTED} {raw_started} is not now")
    raw_deadline = env_value(container, constants.ENV_SESSION_DEADLINE)
    if verdict.max_session is not None and started is not None:
        deadline = parse_time(raw_deadline)
        latest = started + verdict.max_session + dt.timedelta(seconds=1)
        if deadline is None:
            problems.append(
                f"{constants.ENV_SESSION_DEADLINE} is {raw_deadline!r}; the policy limits the "
                "session, so it must name the deadline"
            )
        elif deadline > latest:
            problems.append(
                f"{constants.ENV_SESSION_DEADLINE} {raw_deadline} is later than the policy's "
                f"maxSessionDuration allows"
            )
    return problems


class PodGuard:
    """review(body) -> AdmissionReview for /validate-pods; see the module doc."""

    def __init__(
        self,
        settings: Settings,
        policy: GuardPolicy,
        pods: PodReader | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.settings = settings
        self.policy = policy
        cluster = getattr(policy, "cluster", None)
        self.pods = pods if pods is not None or not hasattr(cluster, "read_pod") else cluster
        self._now = clock

    def review(self, body: Any) -> Review:
        started = time.perf_counter()
        envelope = admission.read_envelope(body)
        request = envelope.request
        namespace = name = ""
        if request is None:
            verdict = _deny(envelope.reason, f"sidecar-debug guard: {envelope.message}", 400)
        else:
            namespace = str(request.get("namespace") or "")
            name = str(request.get("name") or "")
            try:
                verdict = self._review(request, namespace)
            except Exception:  # noqa: BLE001 - fail closed, never a 5xx
                log.exception("guard: internal error; the request is refused")
                verdict = _deny(
                    "internal-error",
                    "sidecar-debug guard hit an internal error and refused the request (fail "
                    "closed); try again, and see the webhook's log if it persists",
                )
        elapsed = time.perf_counter() - started
        metrics.GUARD_REVIEWS.labels("allowed" if verdict.allowed else "denied",
                                     verdict.reason).inc()
        metrics.GUARD_LATENCY.observe(elapsed)
        user = ((request or {}).get("userInfo") or {}).get("username", "")
        log_fields(
            log,
            logging.INFO if verdict.allowed else logging.WARNING,
            verdict.message,
            uid=str((request or {}).get("uid", "")),
            namespace=namespace,
            pod=name,
            decision="guard-allowed" if verdict.allowed else "guard-denied",
            reason=verdict.reason,
            user=str(user),
            latency_ms=round(elapsed * 1000, 3),
        )
        audit = {
            constants.AUDIT_DECISION: "allow" if verdict.allowed else "deny",
            constants.AUDIT_REASON: verdict.reason,
        }
        return admission.build_response(
            request if request is not None else admission.echo_uid(body),
            allowed=verdict.allowed,
            message=None if verdict.allowed else verdict.message,
            code=None if verdict.allowed else verdict.code,
            warnings=verdict.warnings,
            audit=audit if request is not None else None,
            api_version=envelope.api_version,
        )

    # -- the decision ----------------------------------------------------------------------

    def _review(self, request: Request, namespace: str) -> Verdict:
        resource = request.get("resource") or {}
        subresource = request.get("subResource") or ""
        operation = request.get("operation")
        if resource.get("resource") != "pods" or resource.get("group", "") != "":
            return _allow("not-a-pod", "not a pod; the guard reviews pods only")
        ephemeral = subresource == "ephemeralcontainers"
        # pods/status writes metadata too (the apiserver keeps only the spec and the owners):
        # the owned annotations and the seccomp/AppArmor ones are judged as on a pods UPDATE.
        if subresource not in ("", "ephemeralcontainers", "status"):
            return _allow("subresource", f"subresource {subresource!r} is not reviewed")
        if operation not in ("CREATE", "UPDATE") or (subresource and operation != "UPDATE"):
            return _allow("operation", f"operation {operation!r} is not reviewed")
        settings = self.settings
        if settings.namespace_excluded(namespace) or namespace in settings.guard_exempt_namespaces:
            return _allow("exempt-namespace", f"namespace {namespace!r} is not guarded")
        user = request.get("userInfo") or {}
        username = str(user.get("username", ""))
        if username in settings.guard_exempt_usernames:
            return _allow("exempt-user", f"requests of {username!r} are exempt from the guard")
        obj, old = request.get("object"), request.get("oldObject")
        legacy = ephemeral and (
            (isinstance(obj, dict) and obj.get("kind") == LEGACY_KIND)
            or (request.get("kind") or {}).get("kind") == LEGACY_KIND
        )
        expected = shape.EPHEMERAL_CONTAINERS if legacy else shape.POD
        problem = shape.problem(obj, expected, "request.object") or (
            shape.problem(old, expected, "request.oldObject") if operation == "UPDATE" else None
        )
        if problem is not None or not isinstance(obj, dict):
            return _deny(
                "malformed",
                f"sidecar-debug guard cannot read the {'EphemeralContainers' if legacy else 'Pod'}"
                f": {problem or 'request.object is missing'}",
                400,
            )
        old = old if isinstance(old, dict) else {}
        if legacy:
            merged = self._legacy_pod(request, obj, old, namespace)
            if isinstance(merged, Verdict):
                return merged
            pod, old = merged
        else:
            pod = obj
        if operation == "UPDATE":
            owned = changed_owned_annotations(old, pod)
            if owned and username not in settings.annotation_owners:
                return self._owned_refusal(owned, username)
        if operation == "UPDATE":
            what = significant_update(old, pod)
            if what is None:
                return _allow("insignificant-update", "the update changes nothing that runs")
        runtime_class = (pod.get("spec") or {}).get("runtimeClassName")
        if runtime_class and runtime_class in settings.guard_exempt_runtime_class_names:
            return _allow("exempt-runtime-class", f"runtimeClassName {runtime_class!r} is exempt")
        try:
            labels = self.policy.namespace_labels(namespace)
        except Exception as exc:  # noqa: BLE001 - cannot choose the level: refuse, say retry
            return _deny(
                "namespace-lookup-failed",
                f"sidecar-debug guard cannot read namespace {namespace!r} to choose its Pod "
                f"Security level ({exc}); nothing was changed, try again",
            )
        level = stricter(settings.guard_level, labels.get(constants.LABEL_GUARD),
                         self.policy.guard_level(namespace, service_account(pod)))
        version = namespace_version(labels)
        if version.problem:
            log.warning("namespace %r: label %s is invalid: %s", namespace,
                        constants.LABEL_POD_SECURITY_ENFORCE_VERSION, version.problem)
        return self._check(request, pod, old, namespace, level, ephemeral, version)

    def _legacy_pod(
        self, request: Request, obj: dict[str, Any], old: dict[str, Any], namespace: str
    ) -> tuple[dict[str, Any], dict[str, Any]] | Verdict:
        """Kubernetes < 1.22: the pod as stored, with the review's ephemeral containers (new
        and old), since the EphemeralContainers object carries nothing else."""
        name = str(request.get("name") or _metadata(obj).get("name") or "")
        if self.pods is None:
            error = "the webhook has no Kubernetes API access configured"
        else:
            try:
                stored = self.pods.read_pod(namespace, name, POD_READ_TIMEOUT_SECONDS)
            except Exception as exc:  # noqa: BLE001 - any failure means "cannot check"
                error = str(exc) or repr(exc)
            else:
                if isinstance(stored, dict) and isinstance(stored.get("spec"), dict):
                    spec = stored["spec"]
                    new_pod = {**stored, "spec": {**spec, "ephemeralContainers": list(
                        obj.get("ephemeralContainers") or [])}}
                    old_pod = {**stored, "spec": {**spec, "ephemeralContainers": list(
                        old.get("ephemeralContainers") or [])}}
                    return new_pod, old_pod
                error = "the API returned no pod spec"
        return _deny(
            "pod-lookup-failed",
            f"sidecar-debug guard cannot read pod {namespace}/{name} to check its new ephemeral "
            f"containers ({error}); nothing was added, try again",
        )

    def _owned_refusal(self, keys: list[str], username: str) -> Verdict:
        owners = ", ".join(sorted(self.settings.annotation_owners)) or "(none configured)"
        return _deny(
            "owned-annotation",
            f"sidecar-debug guard: {', '.join(keys)} "
            f"{'is' if len(keys) == 1 else 'are'} written by sidecar-debug's webhook and "
            f"controller only ({owners}); {username or 'an anonymous requester'} may not add, "
            "change or remove "
            f"{'it' if len(keys) == 1 else 'them'}. Leave "
            f"{'it' if len(keys) == 1 else 'them'} as they are (the session's facts live in the "
            "toolset container's environment, which cannot change); to end a debug session, "
            "delete the pod.",
        )

    def _check(
        self,
        request: Request,
        pod: dict[str, Any],
        old: dict[str, Any],
        namespace: str,
        level: str,
        ephemeral: bool,
        version: PolicyVersion | None = None,
    ) -> Verdict:
        """The pure core's verdict (webhook.guard.check.evaluate) with grants re-derived for
        this request. An UPDATE is refused only for what it adds: a violation the pod already
        had (a toolset granted to someone else, a pod older than the guard) is not the
        requester's doing, and PodSecurity-wise nothing but images and ephemeral containers can
        change."""
        settings = self.settings
        spec = pod.get("spec") or {}
        account = service_account(pod)
        user = request.get("userInfo") or {}
        old_names = {c for c in _named((old.get("spec") or {}).get("ephemeralContainers"))}
        added = {
            name: container
            for name, container in _named(spec.get("ephemeralContainers")).items()
            if name not in old_names
        }
        verdicts: dict[str, GrantVerdict] = {}

        def verdict_for(profile_name: str) -> GrantVerdict:
            """The grant of a profile, for this request: an ephemeral toolset added now needs
            the requester's own grant (as at the ephemeral gate), an injected one the rule's
            grantSubject (requester and the pod's service account)."""
            if profile_name not in verdicts:
                attaching = [name for name, c in added.items()
                             if env_value(c, constants.ENV_PROFILE) == profile_name]
                verdicts[profile_name] = self.policy.check_grant(PolicyRequest(
                    namespace=namespace, service_account=account, user=user,
                    requested_profile=settings.profiles[profile_name], requested_image=None,
                    dry_run=bool(request.get("dryRun")),
                    ephemeral_container=attaching[0] if attaching else None))
            return verdicts[profile_name]

        def image_allowed(image: str) -> bool:
            return self.policy.allows_image(namespace, account, image)

        chosen = cast(Level, level)
        version = version or resolve()
        result = evaluate(pod, settings, chosen, lambda p: verdict_for(p).granted, image_allowed,
                          version)
        violations = result.violations
        if request.get("operation") == "UPDATE":
            violations = self._added_violations(old, pod, violations, lambda: evaluate(
                old, settings, chosen, lambda p: verdict_for(p).granted, image_allowed,
                version))
        problems: list[str] = []
        reason = "pod-security"
        if violations:
            if result.toolset_violations and any(
                    v in result.toolset_violations for v in violations):
                reason = "toolset"
            summary = (result.message() if request.get("operation") == "CREATE" else
                       f'violates PodSecurity "{result.pod_security.policy}" with what the '
                       'update adds: '
                       + "; ".join(v.message for v in violations))
            problems.append(summary)
            for toolset in result.ungranted:
                if any(v.container == toolset.container for v in violations):
                    reason = "toolset-not-granted"
                    problems.append(
                        f"{toolset.container} is sidecar-debug's toolset of profile "
                        f"{toolset.profile!r}, which this request does not hold: "
                        f"{verdict_for(toolset.profile).message}")
        # A toolset admitted now is held by this request (even one Pod Security would let
        # through: a 1.20 ephemeral container has no securityContext) and carries the session's
        # facts the webhook wrote for it.
        now = self._now()
        for toolset in result.toolsets:
            ref = toolset.container
            fresh = request.get("operation") == "CREATE" or ref.name in added
            if not fresh or any(v.container == ref for v in violations):
                continue  # not this request's, or refused above already
            held = verdict_for(toolset.profile)
            container = _named(spec.get(ref.kind)).get(ref.name) or {}
            if not held.granted:
                reason = "toolset-not-granted"
                problems.append(f"{ref} is sidecar-debug's toolset of profile "
                                f"{toolset.profile!r}, which this request does not hold: "
                                f"{held.message}")
                continue
            wrong = fact_problems(container, held, now)
            if wrong:
                reason = "session-facts"
                problems.append(
                    f"{ref} carries session facts sidecar-debug did not write "
                    f"({'; '.join(wrong)}): were they written by hand, or did sidecar-debug's "
                    "mutating webhook not see this request? Create the pod (or attach) again "
                    "without them")
        label = labels_text(settings, level)
        said = version_problem(version)
        if problems:
            return _deny(reason, f"sidecar-debug guard refused this: {'; '.join(problems)}. "
                         f"{label}{' ' + said if said else ''} Fix the fields named, or get the "
                         "debugging you need through sidecar-debug (a grant for a profile: "
                         "`sidecar-debug policy explain`).")
        granted = ",".join(f"{t.container.name}={verdicts[t.profile].grant}"
                           for t in result.exempted if t.profile in verdicts)
        return _allow("allowed", f"meets Pod Security {result.pod_security.policy}" + (
            f"; toolsets granted: {granted}" if granted else ""), grant=granted,
            warnings=[said] if said else [])


    @staticmethod
    def _added_violations(
        old: Mapping[str, Any],
        new: Mapping[str, Any],
        violations: list[Violation],
        before: Callable[[], GuardResult],
    ) -> list[Violation]:
        """The violations an UPDATE adds: those of the containers it adds or changes (the image)
        and of the volumes they mount, and pod-level ones the pod did not have."""
        changed: set[tuple[str, str]] = set()
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        for kind in ("initContainers", "containers", "ephemeralContainers"):
            previous = _named(old_spec.get(kind))
            for name, container in _named(new_spec.get(kind)).items():
                if name not in previous or container.get("image") != previous[name].get("image"):
                    changed.add((kind, name))
        # A seccomp or AppArmor annotation naming a container this update adds is that
        # container's (it may have been written before the container existed).
        claimed = {
            f"metadata.annotations[{quote(prefix + name)}]"
            for _, name in changed
            for prefix in (SECCOMP_CONTAINER_ANNOTATION_PREFIX, APPARMOR_ANNOTATION_PREFIX)
        }
        mounted = {
            str(mount.get("name"))
            for kind, name in changed
            for mount in (_named(new_spec.get(kind))[name].get("volumeMounts") or [])
            if isinstance(mount, dict)
        }
        had: set[tuple[str, str, str]] | None = None
        added: list[Violation] = []
        for violation in violations:
            ref = violation.container
            if ref is not None:
                if (ref.kind, ref.name) in changed:
                    added.append(violation)
            elif violation.volume is not None:
                if violation.volume in mounted:
                    added.append(violation)
            elif violation.field in claimed:
                added.append(violation)
            else:
                if had is None:
                    had = {_key(v) for v in before().violations}
                if _key(violation) not in had:
                    added.append(violation)
        return added


def _key(violation: Violation) -> tuple[str, str, str]:
    return (violation.check, violation.field, violation.message)


def namespace_version(labels: Mapping[str, Any]) -> PolicyVersion:
    """The Pod Security policy version the namespace's enforce-version label names (absent:
    latest). An invalid value is read as latest, as Pod Security admission reads it, and the
    result carries what was wrong, for the requester's message."""
    value = labels.get(constants.LABEL_POD_SECURITY_ENFORCE_VERSION)
    return resolve(LATEST if value is None else value)


def version_problem(version: PolicyVersion) -> str:
    """The sentence that says an invalid enforce-version label was read as latest; empty when
    the label was fine."""
    if not version.problem:
        return ""
    return (f"The namespace label {constants.LABEL_POD_SECURITY_ENFORCE_VERSION} is invalid: "
            f"{version.problem} (set it to latest or v1.N).")


def labels_text(settings: Settings, level: str) -> str:
    return (
        f"(This namespace is guarded by sidecar-debug at Pod Security level {level!r}: labelled "
        f"{settings.label_key}={settings.label_enabled} or {constants.LABEL_GUARD}.)"
    )
