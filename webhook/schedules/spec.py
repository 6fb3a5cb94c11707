"""The schedule annotation, `sidecar-debug.io/schedule`, on a namespace or a pod.

Its value is JSON or YAML: one schedule (a mapping) or a list of them.

    cron: "0 * * * *"        # when (UTC), five crontab fields or @hourly/@daily/...; required
    duration: 30s            # how long each recording runs (1s..1h; a number is seconds)
    technique: perf          # perf | bpftrace-profile
    frequency: 99            # samples per second
    selector:                # namespace schedules: which pods (a Kubernetes label selector)
      matchLabels: {app: web}
    maxPods: 2               # namespace schedules: at most this many pods per run
    container: debug-toolset # optional: the toolset container, as --container does

Everything is type-checked; a problem is reported as `WHERE: FIELD: what is wrong` with what
is allowed, never as a traceback. Unknown fields are refused (a typo would otherwise silently
fall back to a default).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from webhook.policy.model import LabelSelector, duration_seconds
from webhook.schedules import cron
from webhook.wire import constants
from webhook.wire.shape import type_name_with_article

DEFAULT_DURATION = 30
MAX_DURATION = 3600
DEFAULT_FREQUENCY = 99
MAX_FREQUENCY = 10_000
DEFAULT_MAX_PODS = 1
MAX_PODS = 50
MAX_ANNOTATION = 16_384  # bytes of UTF-8
MAX_SCHEDULES = 20  # per annotation: a 16 KiB list of YAML aliases holds thousands
MAX_NESTING = 16  # brackets and braces: a schedule needs 4; 8,000 overflow the parsers' stacks
_DURATION = re.compile(r"^([0-9]{1,9}[hms])+$")
# libyaml's safe loader where PyYAML has it: 16 KiB of YAML in 3 ms instead of 120 ms.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
FIELDS = ("cron", "duration", "technique", "frequency", "selector", "maxPods", "container")


class ScheduleError(ValueError):
    """A schedule annotation that cannot be used; the message says where and why."""


@dataclass(frozen=True)
class Schedule:
    """One schedule of a namespace (`pod` None) or of one pod."""

    namespace: str
    pod: str | None
    index: int
    cron: cron.Cron
    duration: int
    technique: str
    frequency: int
    selector: LabelSelector = field(default_factory=LabelSelector)
    max_pods: int = DEFAULT_MAX_PODS
    container: str | None = None

    @property
    def key(self) -> str:
        """Stable identity for the runner's state: where the annotation is and its position."""
        where = f"pod/{self.namespace}/{self.pod}" if self.pod else f"namespace/{self.namespace}"
        return f"{where}#{self.index}"

    def describe(self) -> str:
        target = (f"pod {self.namespace}/{self.pod}" if self.pod
                  else f"pods of namespace {self.namespace} matching {self.selector.describe()} "
                  f"(at most {self.max_pods})")
        return (f"{self.technique} for {self.duration} s at {self.frequency} Hz, cron "
                f"'{self.cron.expression}', {target}")


def _duration(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise ScheduleError(f"{where}: duration: expected seconds or a duration like 30s, "
                            "got a boolean")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str) and _DURATION.match(value.strip()):
        seconds = duration_seconds(value.strip())  # an int: no timedelta to overflow
    else:
        raise ScheduleError(f"{where}: duration: {value!r} is not a duration: use seconds "
                            "(30) or a number with a unit h, m or s (30s, 2m, 1m30s)")
    if not 1 <= seconds <= MAX_DURATION:
        raise ScheduleError(f"{where}: duration: {seconds} s is outside 1 s..{MAX_DURATION} s")
    return seconds


def _int(value: Any, name: str, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScheduleError(
            f"{where}: {name}: expected a whole number, got {type_name_with_article(value)}"
        )
    if not low <= value <= high:
        raise ScheduleError(f"{where}: {name}: {value} is outside {low}..{high}")
    return value


def _string_map(value: Any, name: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ScheduleError(f"{name}: expected a mapping of label names to string values "
                            "(quote numbers and booleans: \"1\", \"true\")")
    return dict(value)


def _selector(value: Any, where: str) -> LabelSelector:
    name = f"{where}: selector"
    if not isinstance(value, dict):
        raise ScheduleError(f"{name}: expected a label selector mapping (matchLabels, "
                            f"matchExpressions), got {type_name_with_article(value)}")
    unknown = sorted(set(value) - {"matchLabels", "matchExpressions"}, key=str)
    if unknown:
        raise ScheduleError(f"{name}: unknown field {unknown[0]!r} (a label selector has "
                            "matchLabels and matchExpressions; put labels under matchLabels)")
    labels = _string_map(value.get("matchLabels") or {}, f"{name}.matchLabels")
    expressions = []
    raw = value.get("matchExpressions") or []
    if not isinstance(raw, list):
        raise ScheduleError(f"{name}.matchExpressions: expected a list")
    for position, item in enumerate(raw):
        here = f"{name}.matchExpressions[{position}]"
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise ScheduleError(f"{here}: expected a mapping with key, operator, values")
        operator = item.get("operator")
        if operator not in _OPERATORS:
            raise ScheduleError(f"{here}: operator {operator!r} is not one of "
                                f"{', '.join(_OPERATORS)}")
        values = item.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ScheduleError(f"{here}: values: expected a list of strings")
        if operator in ("In", "NotIn") and not values:
            raise ScheduleError(f"{here}: operator {operator} needs values")
        if operator in ("Exists", "DoesNotExist") and values:
            raise ScheduleError(f"{here}: operator {operator} takes no values")
        expressions.append((item["key"], str(operator), frozenset(values)))
    return LabelSelector(match_labels=labels, match_expressions=tuple(expressions))


def parse_one(raw: Any, *, namespace: str, pod: str | None, index: int, where: str) -> Schedule:
    if not isinstance(raw, dict):
        raise ScheduleError(f"{where}: expected a mapping with cron, duration, technique..., "
                            f"got {type_name_with_article(raw)}")
    unknown = sorted(set(raw) - set(FIELDS), key=str)
    if unknown:
        raise ScheduleError(f"{where}: unknown field {unknown[0]!r} (fields: "
                            f"{', '.join(FIELDS)})")
    if "cron" not in raw:
        raise ScheduleError(f"{where}: cron: required (e.g. cron: \"0 * * * *\" for hourly)")
    try:
        expression = cron.parse(raw["cron"])
    except cron.CronError as error:
        raise ScheduleError(f"{where}: cron: {error}") from error
    technique = raw.get("technique", constants.TECHNIQUE_PERF)
    if technique not in constants.SCHEDULE_TECHNIQUES:
        raise ScheduleError(f"{where}: technique: {technique!r} is not one of "
                            f"{', '.join(constants.SCHEDULE_TECHNIQUES)}")
    container = raw.get("container")
    if container is not None and (not isinstance(container, str) or not container):
        raise ScheduleError(f"{where}: container: expected a container name")
    if pod is not None and ("selector" in raw or "maxPods" in raw):
        raise ScheduleError(f"{where}: selector and maxPods belong to namespace schedules; a "
                            "pod's schedule profiles that pod")
    return Schedule(
        namespace=namespace, pod=pod, index=index, cron=expression,
        duration=_duration(raw.get("duration", DEFAULT_DURATION), where),
        technique=str(technique),
        frequency=_int(raw.get("frequency", DEFAULT_FREQUENCY), "frequency", where, 1,
                       MAX_FREQUENCY),
        selector=_selector(raw["selector"], where) if "selector" in raw else LabelSelector(),
        max_pods=_int(raw.get("maxPods", DEFAULT_MAX_PODS), "maxPods", where, 1, MAX_PODS),
        container=container,
    )


def nesting(text: str) -> int:
    """The deepest bracket nesting of `text`, counted without parsing (quotes included: no
    field a schedule has, label values included, contains brackets)."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(depth - 1, 0)
    return deepest


def parse(text: str, *, namespace: str, pod: str | None = None) -> list[Schedule]:
    """The schedules of one annotation value (JSON or YAML, a mapping or a list)."""
    where = (f"{constants.ANNOTATION_SCHEDULE} on pod {namespace}/{pod}" if pod
             else f"{constants.ANNOTATION_SCHEDULE} on namespace {namespace}")
    if not isinstance(text, str) or not text.strip():
        raise ScheduleError(f"{where}: empty; give a mapping like "
                            "{\"cron\": \"0 * * * *\", \"duration\": \"30s\"}")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_ANNOTATION:
        raise ScheduleError(f"{where}: longer than {MAX_ANNOTATION} bytes")
    depth = nesting(text)
    if depth > MAX_NESTING:
        raise ScheduleError(f"{where}: brackets nested {depth} deep (at most {MAX_NESTING}); a "
                            "schedule is a flat mapping with a selector inside")
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        try:
            document = yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 - a safe loader
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            line = f" (line {mark.line + 1})" if mark is not None else ""
            raise ScheduleError(f"{where}: neither JSON nor YAML{line}: "
                                f"{getattr(error, 'problem', None) or error}") from error
        except (RecursionError, ValueError, TypeError) as error:  # the YAML library's own
            raise ScheduleError(f"{where}: not readable as YAML: {type(error).__name__}") from error
    items = document if isinstance(document, list) else [document]
    if not items:
        raise ScheduleError(f"{where}: an empty list schedules nothing; remove the annotation")
    if len(items) > MAX_SCHEDULES:
        raise ScheduleError(f"{where}: {len(items)} schedules; at most {MAX_SCHEDULES} per "
                            "annotation")
    return [parse_one(item, namespace=namespace, pod=pod, index=index,
                      where=where if len(items) == 1 else f"{where}: [{index}]")
            for index, item in enumerate(items)]
