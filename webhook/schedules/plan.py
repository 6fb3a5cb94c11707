"""Which recordings a pod's toolset should run now, and what is wrong with a schedule: pure.

Shared by the results service (webhook.results.service), which answers each toolset's "what do
I record now?" from the pod and namespace objects it watches, and the controller, which turns
the problems found here into Events (once each). Nothing here trusts what the pod says about
itself beyond what the webhook wrote into its toolset container (profile, image, the results
token mount): annotations are parsed as hostile text, each alone.

- `Book` parses each annotation value once (cached by its text), within a size limit
  (webhook.schedules.spec) and a CPU budget: a value that fails, raises anything, or takes
  too long is that annotation's problem, never the caller's.
- `toolset_of(pod, settings)`: the pod's injected toolset as the guard verifies it, whether
  it has the results token, its granted profile and what that profile can record.
- `applicable(...)`: the pod's own schedules and the namespace schedules that pick it (their
  selector matches and it is among the first `maxPods` eligible pods, by name).
- `check(...)`: can this pod run this schedule: its granted profile has the technique, the
  policy rule covering the pod allows the duration and the sampling frequency.
- `due_minute(...)`: the cron minute to run for now, at most STARTING_DEADLINE old.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from webhook.config import Settings
from webhook.guard.toolset import verify_toolsets
from webhook.policy.model import RuleSettings, format_duration
from webhook.schedules.spec import Schedule, ScheduleError, parse
from webhook.wire import constants
from webhook.wire.pod import service_account

STARTING_DEADLINE = timedelta(minutes=5)
# CPU a single annotation value may cost to parse (thread time). The size and nesting limits
# keep real parses far below it (16 KiB of YAML: ~3 ms with libyaml); a value over the budget
# is refused, and, cached by its text, costs that once.
PARSE_BUDGET_SECONDS = 0.25
BOOK_SIZE = 4096

REASON_INVALID = "ScheduleInvalid"
REASON_TECHNIQUE = "ScheduleTechniqueUnavailable"
REASON_POLICY = "ScheduleRefusedByPolicy"
REASON_NO_AGENT = "ScheduleNoResultsAgent"


@dataclass(frozen=True)
class Problem:
    """Something a person must fix, on the object it belongs to (a Namespace or a Pod).
    `detail` tells problems of one object apart (one Event per object, reason and detail)."""

    kind: str  # Namespace | Pod
    namespace: str
    name: str
    uid: str
    reason: str
    message: str
    detail: str = ""


@dataclass(frozen=True)
class Toolset:
    """The injected toolset of a pod as the webhook made it."""

    container: str
    profile: str
    techniques: frozenset[str]
    has_token: bool  # the results token is mounted: its agent can pull and push


class RuleSource(Protocol):
    def rule_for(self, namespace: str, service_account: str) -> tuple[RuleSettings, str]:
        """The rule's settings and where it is written; raises when it cannot be decided."""
        ...


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def name_of(obj: Mapping[str, Any]) -> str:
    return _text(_metadata(obj).get("name"))


def uid_of(obj: Mapping[str, Any]) -> str:
    return _text(_metadata(obj).get("uid"))


def namespace_of(obj: Mapping[str, Any]) -> str:
    return _text(_metadata(obj).get("namespace"))


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    labels = _metadata(obj).get("labels")
    return ({str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {})


def annotation_of(obj: Mapping[str, Any]) -> str | None:
    annotations = _metadata(obj).get("annotations")
    value = annotations.get(constants.ANNOTATION_SCHEDULE) if isinstance(annotations, dict) \
        else None
    return value if isinstance(value, str) else None


def is_running(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status")
    return (isinstance(status, dict) and status.get("phase") == "Running"
            and not _metadata(pod).get("deletionTimestamp"))


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


# --- parsing, each annotation alone -----------------------------------------------------------

@dataclass(frozen=True)
class Parsed:
    schedules: tuple[Schedule, ...] = ()
    error: str | None = None
    seconds: float = 0.0  # CPU the parse took


class Book:
    """Parsed annotation values, by where they are and their text (an LRU of BOOK_SIZE)."""

    def __init__(self, budget: float = PARSE_BUDGET_SECONDS, size: int = BOOK_SIZE) -> None:
        self.budget = budget
        self.size = size
        self._cache: OrderedDict[tuple[str, str | None, str], Parsed] = OrderedDict()

    def read(self, namespace: str, pod: str | None, text: str) -> Parsed:
        key = (namespace, pod, text)
        found = self._cache.get(key)
        if found is not None:
            self._cache.move_to_end(key)
            return found
        started = time.thread_time()
        try:
            result = Parsed(tuple(parse(text, namespace=namespace, pod=pod)))
        except ScheduleError as error:
            result = Parsed(error=str(error))
        except Exception as error:  # noqa: BLE001 - whatever it is, it is this annotation's
            where = f"pod {namespace}/{pod}" if pod else f"namespace {namespace}"
            result = Parsed(error=f"{constants.ANNOTATION_SCHEDULE} on {where}: cannot be read "
                            f"({type(error).__name__})")
        spent = time.thread_time() - started
        if result.error is None and spent > self.budget:
            where = f"pod {namespace}/{pod}" if pod else f"namespace {namespace}"
            result = Parsed(error=f"{constants.ANNOTATION_SCHEDULE} on {where}: took "
                            f"{spent * 1000:.0f} ms of CPU to read (at most "
                            f"{self.budget * 1000:.0f} ms); simplify it", seconds=spent)
        else:
            result = Parsed(result.schedules, result.error, spent)
        self._cache[key] = result
        if len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return result


def invalid(obj: Mapping[str, Any], kind: str, parsed: Parsed, text: str) -> Problem:
    return Problem(kind, namespace_of(obj) if kind == "Pod" else name_of(obj), name_of(obj),
                   uid_of(obj), REASON_INVALID,
                   f"schedule ignored: {parsed.error}", detail=digest(text))


# --- the pod's toolset ------------------------------------------------------------------------

# Where webhook.results.mirror keeps a pod's toolset as verified when the pod was mirrored
# (its spec is then dropped): a key no API object has (the apiserver keeps only a Pod's own
# fields), holding a 1-tuple (JSON has no tuples).
VERIFIED_TOOLSET = "verifiedToolset"


def with_verified_toolset(pod: Mapping[str, Any], settings: Settings,
                          into: dict[str, Any]) -> dict[str, Any]:
    """`into` (a slim copy of `pod`) with `pod`'s toolset verified now, for toolset_of."""
    into[VERIFIED_TOOLSET] = (toolset_of(pod, settings),)
    return into


def toolset_of(pod: Mapping[str, Any], settings: Settings) -> Toolset | None:
    """The pod's injected toolset, as the guard verifies it (webhook.guard.toolset: rebuilt from
    the profile its env claims and compared with what the pod has; the status annotation and
    the container's name count for nothing), or None. Its profile is the one the webhook
    granted and wrote into the container's env (immutable); what that profile can record comes
    from the installed profiles. Attached (ephemeral) toolsets are not planned for: they have
    no results token and end at their deadline. Only the configured toolset image verifies
    here (not other images a policy's allowedImages admits). A mirrored pod carries the
    answer, verified once per pod version (with_verified_toolset)."""
    known = pod.get(VERIFIED_TOOLSET)
    if isinstance(known, tuple) and len(known) == 1 and (
            known[0] is None or isinstance(known[0], Toolset)):
        return known[0]
    report = verify_toolsets(pod, settings)
    verified = next((t for t in report.toolsets if not t.attached), None)
    if verified is None:
        return None
    spec = pod.get("spec")
    containers = spec.get(verified.container.kind) if isinstance(spec, dict) else None
    container = containers[verified.container.index] if isinstance(containers, list) else {}
    mounts = container.get("volumeMounts") if isinstance(container, dict) else None
    has_token = any(isinstance(m, dict) and m.get("mountPath") == constants.RESULTS_TOKEN_DIR
                    for m in (mounts if isinstance(mounts, list) else []))
    profile = settings.profiles.get(verified.profile)
    return Toolset(verified.container.name, verified.profile,
                   profile.techniques if profile is not None else frozenset(), has_token)


# --- which schedules apply to a pod -----------------------------------------------------------

def eligible(pods: Iterable[Mapping[str, Any]], schedule: Schedule, settings: Settings
             ) -> list[str]:
    """The pods a namespace schedule records: running, matching its selector, with a toolset
    whose agent can push, by name, at most maxPods."""
    chosen: list[str] = []
    for pod in sorted(pods, key=name_of):
        if namespace_of(pod) != schedule.namespace or not is_running(pod):
            continue
        if not schedule.selector.matches(labels_of(pod)):
            continue
        toolset = toolset_of(pod, settings)
        if toolset is None or not toolset.has_token:
            continue
        chosen.append(name_of(pod))
        if len(chosen) >= schedule.max_pods:
            break
    return chosen


def applicable(pod: Mapping[str, Any], namespace: Mapping[str, Any] | None,
               namespace_pods: Iterable[Mapping[str, Any]], book: Book, settings: Settings
               ) -> tuple[list[Schedule], list[Problem]]:
    """The schedules that record `pod`, and the annotation problems met on the way."""
    found: list[Schedule] = []
    problems: list[Problem] = []
    ns_name, pod_name = namespace_of(pod), name_of(pod)
    text = annotation_of(pod)
    if text is not None:
        parsed = book.read(ns_name, pod_name, text)
        if parsed.error is not None:
            problems.append(invalid(pod, "Pod", parsed, text))
        found += parsed.schedules
    text = annotation_of(namespace) if namespace is not None else None
    if namespace is not None and text is not None:
        parsed = book.read(ns_name, None, text)
        if parsed.error is not None:
            problems.append(invalid(namespace, "Namespace", parsed, text))
        pods = list(namespace_pods)
        for schedule in parsed.schedules:
            if schedule.selector.matches(labels_of(pod)) and \
                    pod_name in eligible(pods, schedule, settings):
                found.append(schedule)
    return found, problems


def check(schedule: Schedule, pod: Mapping[str, Any], toolset: Toolset | None,
          rules: RuleSource) -> Problem | None:
    """Why this pod cannot run this schedule (an Event on the pod), or None."""
    namespace, name, uid = namespace_of(pod), name_of(pod), uid_of(pod)
    detail = f"{schedule.key}/{schedule.technique}"

    def problem(reason: str, message: str) -> Problem:
        return Problem("Pod", namespace, name, uid, reason,
                       f"schedule {schedule.key}: {message}", detail)

    if toolset is None:
        return problem(REASON_NO_AGENT, "the pod has no injected toolset running the installed "
                       "toolset image: label the pod or its namespace debug=enabled and "
                       "recreate it")
    if not toolset.has_token:
        return problem(REASON_NO_AGENT, f"the toolset container {toolset.container} has no "
                       "results token (it was injected before the results service was "
                       "enabled): recreate the pod")
    needed = constants.SCHEDULE_TECHNIQUE_NEEDS.get(schedule.technique, schedule.technique)
    if needed not in toolset.techniques:
        techniques = ", ".join(sorted(toolset.techniques)) or "none"
        return problem(REASON_TECHNIQUE, (
            f"{schedule.technique} needs a profile with {needed}; the pod's toolset runs "
            f"profile {toolset.profile or 'unknown'} ({techniques}), granted when the pod was "
            f"created. Ask for a profile with {needed} (annotation "
            f"{constants.ANNOTATION_PROFILE}) with the RBAC grant it needs, and recreate the "
            "pod; or change the schedule's technique"))
    try:
        rule, where = rules.rule_for(namespace, service_account(pod))
    except Exception as error:  # noqa: BLE001 - undecidable now: the pod's problem, retried
        return problem(REASON_POLICY, f"the policy rule for this pod cannot be decided now "
                       f"({type(error).__name__}: {error})")
    if schedule.duration > rule.max_schedule_seconds:
        return problem(REASON_POLICY, (
            f"duration {schedule.duration} s is longer than the policy allows here "
            f"(maxScheduleDuration {format_duration(timedelta(seconds=rule.max_schedule_seconds))}"
            f", {where})"))
    if schedule.frequency > rule.max_schedule_frequency:
        return problem(REASON_POLICY, (
            f"frequency {schedule.frequency} Hz is higher than the policy allows here "
            f"(maxScheduleFrequency {rule.max_schedule_frequency}, {where})"))
    return None


def due_minute(schedule: Schedule, now: datetime, last: datetime | None) -> datetime | None:
    """The cron minute to record for now: after `last` (the minute this pod last ran it for)
    and at most STARTING_DEADLINE ago, as a CronJob's startingDeadlineSeconds. A schedule
    this pod never ran (`last` None) is due only in a matching minute: nothing is made up
    for minutes before the pod or the annotation existed."""
    if last is None:
        return schedule.cron.due(now, now - timedelta(minutes=1), STARTING_DEADLINE)
    return schedule.cron.due(now, last, STARTING_DEADLINE)


def problems(namespaces: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
             book: Book, settings: Settings, rules: RuleSource) -> list[Problem]:
    """Every problem of every schedule in the cluster (the controller's pass): bad annotations
    on their object; for each pod a schedule picks, what keeps it from running there."""
    by_name = {name_of(ns): ns for ns in namespaces}
    pods = [p for p in pods if is_running(p)]
    by_namespace: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        by_namespace.setdefault(namespace_of(pod), []).append(pod)
    found: dict[tuple[str, str, str], Problem] = {}
    for namespace, members in by_namespace.items():
        namespace_obj = by_name.get(namespace)
        for pod in members:
            schedules, bad = applicable(pod, namespace_obj, members, book, settings)
            for item in bad:
                found.setdefault((item.uid, item.reason, item.detail), item)
            toolset = toolset_of(pod, settings) if schedules else None
            for schedule in schedules:
                item2 = check(schedule, pod, toolset, rules)
                if item2 is not None:
                    found.setdefault((item2.uid, item2.reason, item2.detail), item2)
    for namespace_obj in by_name.values():  # a namespace without running pods still hears it
        text = annotation_of(namespace_obj)
        if text is not None:
            parsed = book.read(name_of(namespace_obj), None, text)
            if parsed.error is not None:
                item = invalid(namespace_obj, "Namespace", parsed, text)
                found.setdefault((item.uid, item.reason, item.detail), item)
    return list(found.values())
