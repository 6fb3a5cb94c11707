"""The results service: one workload, one writer of the results store (`sidecar-debug results
service`, the chart's `<fullname>-results` Deployment).

- Toolset agents (toolset/bin/results-agent) ask `GET /agent/v1/plan` what to record now and
  push each run to `POST /agent/v1/runs`, with their pod's projected, audience-bound token
  (webhook.results.auth). Plans are computed here from the namespace and pod objects the
  service watches (webhook.results.mirror, webhook.results.planner), never from what the
  toolset says; a run is stored only under the pod its token belongs to, and only for a
  recording this service planned for that pod (its ticket). A recording that failed is
  reported to `POST /agent/v1/failures` (webhook.results.failures): stored as a failed run,
  an Event on the pod, and after repeated failures the recording is suspended for that pod.
- Readers get the results page (webhook.results.web) with their own bearer token: only the
  namespaces a SubjectAccessReview lets them read.

The service's ServiceAccount can get/list/watch pods and namespaces and create TokenReviews,
SubjectAccessReviews and Events; nothing else (tests/chart/test_chart_rbac.py).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

from flask import Flask, Response, abort, g, request
from werkzeug.exceptions import HTTPException

from webhook.errors import Refused
from webhook.policy.model import duration_seconds
from webhook.results import failures, metrics
from webhook.results.auth import POD_HEADER, AgentIdentity, Authenticator, AuthError
from webhook.results.export import Exporters
from webhook.results.mirror import Mirror
from webhook.results.planner import Planner, Ticket
from webhook.results.reader import Read, Readers
from webhook.results.store import Run, Store, StoreError
from webhook.results.web import create_app
from webhook.schedules import plan as plans
from webhook.schedules.spec import Schedule
from webhook.stacks import MAX_DEPTH, folded
from webhook.wire import constants, jsonio
from webhook.wire.pod import service_account

log = logging.getLogger(__name__)

MAX_PUSH_BYTES = 16 << 20  # a folded profile of a busy app is a few MiB at most
# Bounds of one push (issue 24): its stacks are read in linear time within these caps, and a
# push over one is refused with 413 and the cap it passed.
MAX_FRAME_CHARS = 16 << 10  # one frame name (perf's and bpftrace's are far shorter)
MAX_STACKS = 100_000  # distinct stacks of one run
MAX_JSON_VALUES = 10_000  # strings, lists, objects, separators of a push's JSON body
PARSE_SECONDS = 5.0  # the time budget of reading one push's stacks (16 MiB: well below 1 s)
# Samples a recording of D s at F Hz may hold: F x (D + SLACK) per CPU the app runs on, for at
# most CPU_MARGIN CPUs (perf -p and bpftrace's profile probe sample each CPU).
SAMPLE_SLACK_SECONDS = 10
CPU_MARGIN = 64
# Pushes in flight: one per namespace, at most PUSHES_IN_FLIGHT in all, so that pushes never
# hold more than 3 of the service's 8 threads and plans and pages always have the others.
PUSHES_PER_NAMESPACE = 1
PUSHES_IN_FLIGHT = 2
RETRY_AFTER_SECONDS = 5
# A namespace whose pushes were refused this often within a minute (no ticket, too large,
# wrong format...) waits for the minute to pass: its next pushes are answered 429 before their
# body is read. An agent makes one push per ticket: this is far above what it needs.
REFUSED_PUSHES_PER_MINUTE = 10
# The storage quota of a namespace (chart: results.quotaPerNamespace): "25%" of the volume,
# a size ("500Mi", "1G", bytes), or "0"/"" for none.
DEFAULT_QUOTA = "25%"
_QUOTA = re.compile(r"([0-9]{1,15})(%|[KMGT]i?)?")
_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
RETENTION_SECONDS = 300.0
# What of an agent's metadata is kept (the toolset's meta.json: types checked, sizes capped;
# all of it is data the app's text may have reached).
_META_TEXT = {"runtime": 64, "type": 16, "unit": 16, "technique": 32, "summary": 4096}
_META_NUMBERS = ("named_share", "mean_depth", "max_depth", "stopped_share", "samples",
                 "frames", "weight", "seconds", "frequency")
_META_LISTS = ("warnings", "notes")
DEFAULT_KEEP = 100
DEFAULT_MAX_AGE = timedelta(days=30)
_AGE = re.compile(r"([0-9]{1,6}[dhms]){1,4}")


@dataclass
class Retention:
    keep: int | None
    max_age: timedelta | None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Retention:
        """Runs kept per pod and maximum age (chart: results.retention): unset gives the
        defaults; "0" and "" (the chart's way to say so) mean no limit; a malformed value is
        logged and the default kept."""
        keep: int | None = DEFAULT_KEEP
        max_age: timedelta | None = DEFAULT_MAX_AGE
        keep_text = environ.get(constants.ENV_RESULTS_KEEP)
        if keep_text is not None:
            if re.fullmatch(r"[0-9]{1,9}", keep_text.strip()):
                keep = int(keep_text) or None
            elif keep_text.strip():
                log.warning("%s=%r is not a number; keeping %d runs per pod",
                            constants.ENV_RESULTS_KEEP, keep_text, DEFAULT_KEEP)
            else:
                keep = None
        age_text = environ.get(constants.ENV_RESULTS_MAX_AGE)
        if age_text is not None:
            if _AGE.fullmatch(age_text.strip()):
                max_age = timedelta(seconds=duration_seconds(age_text.strip())) or None
            elif age_text.strip():
                log.warning("%s=%r is not a duration like 30d; keeping runs for %s",
                            constants.ENV_RESULTS_MAX_AGE, age_text, DEFAULT_MAX_AGE)
            else:
                max_age = None
        return cls(keep, max_age)


def quota_bytes(text: str | None, root: Path) -> int | None:
    """The per-namespace quota in bytes: a share of the volume `root` is on ("25%"), a size
    ("500Mi", "2G", "1048576"), None for no quota ("0", ""). A malformed value is logged and
    the default taken."""
    text = DEFAULT_QUOTA if text is None else text.strip()
    if not text:
        return None
    match = _QUOTA.fullmatch(text)
    if not match or (match.group(2) == "%" and not 0 <= int(match.group(1)) <= 100):
        log.warning("%s=%r is neither a share of the volume like 25%% nor a size like 500Mi; "
                    "the quota is %s", constants.ENV_RESULTS_NAMESPACE_QUOTA, text, DEFAULT_QUOTA)
        return quota_bytes(DEFAULT_QUOTA, root)
    number, unit = int(match.group(1)), match.group(2) or ""
    if unit == "%":
        try:
            volume = os.statvfs(root)
        except OSError as error:
            log.warning("cannot size the results volume (%s): no quota per namespace", error)
            return None
        return volume.f_blocks * volume.f_frsize * number // 100 or None
    return number * _UNITS[unit] or None


class PushSlots:
    """Pushes in flight, per namespace and in all; a push that finds no slot is answered 429
    at once (the agent tries again after Retry-After), never queued on a thread."""

    def __init__(self, per_namespace: int = PUSHES_PER_NAMESPACE,
                 total: int = PUSHES_IN_FLIGHT,
                 refused_per_minute: int = REFUSED_PUSHES_PER_MINUTE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_namespace = per_namespace
        self.total = total
        self.refused_per_minute = refused_per_minute
        self.clock = clock
        self.lock = threading.Lock()
        self.held: dict[str, int] = {}
        self.refused: dict[str, list[float]] = {}

    def refuse(self, namespace: str) -> None:
        """Count a refused push of `namespace` (see REFUSED_PUSHES_PER_MINUTE)."""
        with self.lock:
            self.refused.setdefault(namespace, []).append(self.clock())

    def _recently_refused(self, namespace: str) -> int:
        since = self.clock() - 60
        times = [t for t in self.refused.get(namespace, ()) if t > since]
        if times:
            self.refused[namespace] = times
        else:
            self.refused.pop(namespace, None)
        return len(times)

    @contextmanager
    def hold(self, namespace: str) -> Iterator[None]:
        with self.lock:
            if self._recently_refused(namespace) >= self.refused_per_minute:
                metrics.PUSHES_REFUSED.labels(reason="refused-often").inc()
                raise Refused(429, f"{self.refused_per_minute} pushes of namespace {namespace} "
                              "were refused within the last minute (see their answers); push "
                              "again in a minute")
            mine = self.held.get(namespace, 0)
            if mine >= self.per_namespace or sum(self.held.values()) >= self.total:
                busy = f"namespace {namespace}" if mine >= self.per_namespace else \
                    "the results service"
                metrics.PUSHES_REFUSED.labels(reason="busy").inc()
                raise Refused(429, f"{busy} has as many pushes in flight as it may "
                              f"({self.per_namespace} per namespace, {self.total} in all); "
                              f"push again in {RETRY_AFTER_SECONDS} s")
            self.held[namespace] = mine + 1
        try:
            yield
        finally:
            with self.lock:
                left = self.held[namespace] - 1
                if left:
                    self.held[namespace] = left
                else:
                    del self.held[namespace]


def _route() -> str:
    path = request.path
    if path.startswith("/agent/v1/plan"):
        return "plan"
    if path.startswith("/agent/v1/runs"):
        return "push"
    if path == "/":
        return "index"
    if path.split("/")[1:2] == ["api"]:
        return "api"
    if path.startswith("/diff"):
        return "diff"
    if path.startswith("/static/"):
        return "static"
    if path.startswith("/runs/"):
        return "run" if path.endswith("/") else "download"
    return "other"


def clean_meta(raw: Any) -> dict[str, Any]:
    """The recording's metadata as the toolset wrote it (meta.json), as data: known keys of
    the right types, capped; `unwinding` (binary -> method) at most 50 entries."""
    if not isinstance(raw, dict):
        return {}
    kept: dict[str, Any] = {}
    for key, limit in _META_TEXT.items():
        value = raw.get(key)
        if isinstance(value, str):
            kept[key] = value[:limit]
    for key in _META_NUMBERS:
        value = raw.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and \
                abs(value) < 1e12 and value == value:  # noqa: PLR0124 - NaN check
            kept[key] = value
    for key in _META_LISTS:
        items = raw.get(key)
        if isinstance(items, list):
            kept[key] = [n[:300] for n in items[:20] if isinstance(n, str)]
    unwinding = raw.get("unwinding")
    if isinstance(unwinding, dict):
        kept["unwinding"] = {str(k)[:200]: v[:32] for k, v in list(unwinding.items())[:50]
                             if isinstance(v, str)}
    return kept


def app_identity(pod: Mapping[str, Any], toolset: str) -> dict[str, str]:
    """What exports name the app by, as OpenTelemetry's semantic conventions derive service
    attributes in Kubernetes: `service.name` from the pod's
    `resource.opentelemetry.io/service.name` annotation, else its `app.kubernetes.io/instance`,
    `app.kubernetes.io/name` or (last, not in the conventions) `app` label; `service.version`
    from the annotation `resource.opentelemetry.io/service.version`, else the
    `app.kubernetes.io/version` label; `k8s.pod.uid`; `k8s.container.name` when the pod has
    one app container (a run records them all). Values are the pod creator's text: strings
    only, one line, capped."""
    found: dict[str, str] = {}
    labels = plans.labels_of(pod)
    metadata = pod.get("metadata")
    raw = metadata.get("annotations") if isinstance(metadata, dict) else None
    annotations = raw if isinstance(raw, dict) else {}

    def first(*values: Any) -> str:
        return next((_one_line(v, 200) for v in values if _one_line(v, 200)), "")

    service_name = first(annotations.get(constants.ANNOTATION_OTEL_SERVICE_NAME),
                         labels.get(constants.LABEL_APP_INSTANCE),
                         labels.get(constants.LABEL_APP_NAME), labels.get(constants.LABEL_APP))
    version = first(annotations.get(constants.ANNOTATION_OTEL_SERVICE_VERSION),
                    labels.get(constants.LABEL_APP_VERSION))
    uid = first(metadata.get("uid") if isinstance(metadata, dict) else None)
    for key, value in (("serviceName", service_name), ("serviceVersion", version),
                       ("podUid", uid)):
        if value:
            found[key] = value
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, dict) else None
    names = [c.get("name") for c in containers or [] if isinstance(c, dict)] \
        if isinstance(containers, list) else []
    apps = [n for n in names if isinstance(n, str) and n != toolset]
    if len(apps) == 1:
        found["appContainer"] = apps[0][:200]
    return found


def _one_line(text: Any, limit: int = 300) -> str:
    return " ".join(str(text).split())[:limit] if isinstance(text, str) else ""


class Service:
    """The service's state and its API handlers (Flask routes are thin wrappers)."""

    def __init__(self, root: Path, auth: Authenticator, planner: Planner, pods: Mirror,
                 namespaces: Mirror, retention: Retention,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 exporters: Exporters | None = None, quota: int | None = None,
                 notifier: failures.Notifier | None = None) -> None:
        self.store = Store(root)
        self.quota = quota  # bytes per namespace (quota_bytes()); None: no quota
        self.slots = PushSlots()
        self.readers = Readers(self.slots.total)
        self.namespace_bytes: dict[str, int] = {}
        self.exporters = exporters  # results.export: sent on after storing, never waited for
        self.auth = auth
        self.planner = planner
        self.pods = pods
        self.namespaces = namespaces
        self.retention = retention
        self.clock = clock
        self.notifier = notifier or failures.Notifier(None, identity="")
        self.write_lock = threading.Lock()
        self.stopped = threading.Event()
        # A deleted pod's cached token reviews go with it (a new pod of that name has its own).
        self.pods.on_deleted.append(lambda pod: self.auth.forget_pod(plans.uid_of(pod)))

    # --- who is asking ------------------------------------------------------------------------

    def agent_pod(self) -> tuple[AgentIdentity, dict[str, Any]]:
        """The caller's pod as the service watches it; AuthError when the token's identity
        and the pod do not fit together. Asked once per request."""
        known = g.get("agent")
        if known is not None:
            return known  # type: ignore[no-any-return]
        g.agent = self._agent_pod()
        return g.agent  # type: ignore[no-any-return]

    def _agent_pod(self) -> tuple[AgentIdentity, dict[str, Any]]:
        identity = self.auth.agent(request.headers.get("Authorization"),
                                   request.headers.get(POD_HEADER))
        if not self.pods.ready.is_set():
            raise AuthError(503, "the results service is still reading the cluster's pods; try "
                            "again in a few seconds")
        pod = self.pods.get(identity.namespace, identity.pod)
        if pod is None:
            raise AuthError(403, f"no pod {identity.namespace}/{identity.pod} (yet): a token "
                            "speaks only for a pod that exists")
        if identity.pod_uid is not None and plans.uid_of(pod) != identity.pod_uid:
            raise AuthError(403, f"the token is bound to another pod named "
                            f"{identity.namespace}/{identity.pod} (uid {identity.pod_uid})")
        if service_account(pod) != identity.service_account:
            raise AuthError(403, f"pod {identity.namespace}/{identity.pod} runs as service "
                            f"account {service_account(pod)}, not "
                            f"{identity.service_account}")
        return identity, pod

    # --- handlers -------------------------------------------------------------------------

    def plan(self) -> dict[str, Any]:
        identity, pod = self.agent_pod()
        namespace = self.namespaces.get("", identity.namespace)
        now = self.clock()
        applied: list[Schedule] = []
        tickets = self.planner.plan(pod, namespace, self.pods.in_namespace(identity.namespace),
                                    now, applied)
        # When to ask again (webhook.results.planner.poll_seconds): once a minute with nothing
        # to record, just after the next due minute otherwise.
        return {"pod": f"{identity.namespace}/{identity.pod}",
                "pollSeconds": self.planner.poll_seconds(pod, applied, tickets, now),
                "runs": [ticket.to_plan() for ticket in tickets]}

    def push(self, body: Any) -> tuple[dict[str, Any], int]:
        identity, pod = self.agent_pod()
        if not isinstance(body, dict) or not isinstance(body.get("ticket"), str):
            abort(400, description="expected a JSON object with the plan's ticket, and stacks "
                  "(folded or bpftrace) or an error")
        ticket = self.planner.finish(body["ticket"], identity.namespace, identity.pod,
                                     identity.pod_uid or plans.uid_of(pod))
        if "error" in body:  # a toolset older than /agent/v1/failures
            return self.failed(ticket, pod, failures.legacy_report(body))
        stacks = self._stacks(body, ticket)
        recording = clean_meta(body.get("meta"))
        toolset = plans.toolset_of(pod, self.planner.settings) or plans.Toolset(
            "", "", frozenset(), False)
        meta = {**{k: v for k, v in recording.items() if k not in ("seconds", "frequency")},
                "duration": ticket.duration, "frequency": ticket.frequency,
                "schedule": ticket.schedule, "cron": ticket.cron, "due": ticket.due.isoformat(),
                "container": toolset.container,
                "trigger": "schedule", "summary": _one_line(body.get("summary"), 4096),
                **app_identity(pod, toolset.container)}
        try:
            with self.write_lock:
                run = self.store.save_text(ticket.namespace, ticket.pod, ticket.technique,
                                           stacks.text, samples=stacks.samples,
                                           hottest=stacks.hottest, started=ticket.issued,
                                           meta=meta)
                self._keep_quota(run)
        except (StoreError, OSError) as error:
            metrics.RUNS.labels(technique=ticket.technique, outcome="failed",
                                reason="store").inc()
            log.error("schedule %s: cannot store the run of %s/%s: %s", ticket.schedule,
                      ticket.namespace, ticket.pod, error)
            abort(500, description=f"the run could not be stored: {error}")
        size = (run.path / "stacks.folded").stat().st_size
        metrics.RUNS.labels(technique=ticket.technique, outcome="stored", reason="").inc()
        metrics.STORED_BYTES.inc(size)
        self.planner.succeeded(ticket)
        log.info("schedule %s: stored %s (%d samples)", ticket.schedule, run.id, run.samples)
        if self.exporters:
            self.exporters.export(run)
        return {"run": run.id, "samples": run.samples}, 201

    # --- failed recordings (webhook.results.failures) --------------------------------------

    def failure(self, body: Any) -> tuple[dict[str, Any], int]:
        """`POST /agent/v1/failures`: the report is checked before the ticket is taken back (a
        malformed report leaves the ticket to a correct one)."""
        identity, pod = self.agent_pod()
        report = failures.parse_report(body)
        ticket = self.planner.finish(body["ticket"], identity.namespace, identity.pod,
                                     identity.pod_uid or plans.uid_of(pod))
        return self.failed(ticket, pod, report)

    def failed(self, ticket: Ticket, pod: Mapping[str, Any],
               report: failures.FailureReport) -> tuple[dict[str, Any], int]:
        """Count, store as a failed run, tell the pod's owner (an Event, rate-limited), and
        suspend the recording for this pod after repeated failures with one reason."""
        metrics.RUNS.labels(technique=ticket.technique, outcome="failed",
                            reason=report.reason).inc()
        log.error("schedule %s: %s/%s: recording failed (%s): %s", ticket.schedule,
                  ticket.namespace, ticket.pod, report.reason, report.message)
        meta = {"duration": ticket.duration, "frequency": ticket.frequency,
                "schedule": ticket.schedule, "cron": ticket.cron,
                "due": ticket.due.isoformat(), "trigger": "schedule"}
        run_id = ""
        try:
            with self.write_lock:
                run_id = self.store.save_failure(
                    ticket.namespace, ticket.pod, ticket.technique, started=ticket.issued,
                    reason=report.reason, message=report.message, meta=meta).id
        except (StoreError, OSError) as error:  # the Event still goes out
            log.error("schedule %s: cannot store the failed run of %s/%s: %s",
                      ticket.schedule, ticket.namespace, ticket.pod, error)
        count, suspended = self.planner.failed(ticket, report.reason)
        target = {"namespace": ticket.namespace, "name": ticket.pod, "uid": ticket.uid}
        self.notifier.post(target, ticket.schedule, report.reason, failures.REASON_FAILED,
                           failures.failed_message(ticket.technique, ticket.schedule,
                                                   ticket.due, report, count))
        if suspended:
            self.notifier.post(target, ticket.schedule, report.reason,
                               failures.REASON_SUSPENDED,
                               failures.suspended_message(ticket.technique, ticket.schedule,
                                                          report))
        return {"recorded": "failure", "reason": report.reason, "run": run_id,
                "failures": count, "suspended": suspended}, 200

    def _stacks(self, body: Mapping[str, Any], ticket: Ticket) -> Read:
        """The push's stacks, read as its ticket's technique writes them (never as the body
        says), within the caps of one push; 400, 413 or 422 with the reason otherwise."""
        kind = "bpftrace" if ticket.technique == "bpftrace-profile" else "folded"
        text, claimed = body.get("stacks"), body.get("format", kind)
        if claimed != kind:
            self._refuse(ticket, 422, "wrong-format", f"stacks: format {str(claimed)[:40]!r} "
                         f"is not what a {ticket.technique} recording pushes ({kind})")
        if not isinstance(text, str):
            abort(400, description=f"stacks: expected text in format {kind}")
        most = ticket.frequency * (ticket.duration + SAMPLE_SLACK_SECONDS) * CPU_MARGIN
        limits = folded.Limits(max_frame=MAX_FRAME_CHARS, max_stacks=MAX_STACKS,
                               max_samples=most, deadline=time.monotonic() + PARSE_SECONDS)
        try:
            stacks = self.readers.read(kind, text, limits, PARSE_SECONDS)
        except folded.TooLarge as error:
            self._refuse(ticket, 413, "too-large", f"stacks refused: {error} (a push of "
                         f"{ticket.duration} s at {ticket.frequency} Hz may hold {most} "
                         f"samples, {MAX_STACKS} distinct stacks of {MAX_DEPTH} frames, "
                         f"{MAX_FRAME_CHARS} characters a frame)")
        except folded.FoldedError as error:
            metrics.RUNS.labels(technique=ticket.technique, outcome="failed",
                                reason="bad-stacks").inc()
            abort(400, description=f"stacks: not {kind} stacks: {error}")
        except (ValueError, RecursionError) as error:  # nothing foreseen: still the pod's text
            self._refuse(ticket, 400, "bad-stacks", f"stacks: not {kind} stacks: "
                         f"{type(error).__name__}")
        if not stacks.samples:
            metrics.RUNS.labels(technique=ticket.technique, outcome="failed",
                                reason="no-samples").inc()
            abort(422, description="no samples (was the app on CPU?)")
        size = len(stacks.text.encode("utf-8"))
        if self.quota is not None and size > self.quota:
            self._refuse(ticket, 413, "over-quota", f"a run of {size} bytes is larger "
                         f"than the quota of namespace {ticket.namespace} ({self.quota} bytes)")
        return stacks

    @staticmethod
    def _refuse(ticket: Ticket, status: int, reason: str, message: str) -> NoReturn:
        metrics.RUNS.labels(technique=ticket.technique, outcome="failed", reason=reason).inc()
        log.warning("schedule %s: %s/%s: push refused (%s): %s", ticket.schedule,
                    ticket.namespace, ticket.pod, reason, message)
        abort(status, description=message)

    # --- quota --------------------------------------------------------------------------------

    def _keep_quota(self, stored: Run) -> None:
        """Under the write lock: the namespace's runs within its quota, the oldest removed
        first (never the run just stored); its disk use in the metrics. Reads the index's
        rows of the namespace, no run."""
        namespace = stored.namespace
        rows = self.store.index.namespace_runs(namespace)
        used = sum(size for _, _, size in rows)
        for run_id, started, size in rows:
            if self.quota is None or used <= self.quota:
                break
            if run_id == stored.id:
                continue
            run = self.store.row_run(run_id, started)
            self.store.remove(run)
            used -= size
            metrics.RUNS.labels(technique=run.technique, outcome="removed", reason="quota").inc()
            log.info("quota: removed %s (namespace %s holds %d bytes, its quota is %d)",
                     run.id, namespace, used + size, self.quota)
        self._set_namespace_usage(namespace, used, len(rows))

    def _set_namespace_usage(self, namespace: str, used: int, runs: int | None = None) -> None:
        self.namespace_bytes[namespace] = used
        metrics.NAMESPACE_BYTES.labels(namespace=namespace).set(used)
        if runs is not None:
            metrics.NAMESPACE_RUNS.labels(namespace=namespace).set(runs)

    # --- retention ------------------------------------------------------------------------

    def apply_retention(self) -> None:
        """Runs past the retention removed, then the disk use per namespace in the metrics:
        all from the index (after it looked for pods changed by hand), reading no run."""
        began = time.monotonic()
        with self.write_lock:
            removed = self.store.prune(keep=self.retention.keep,
                                       max_age=self.retention.max_age, now=self.clock())
        for run in removed:
            metrics.RUNS.labels(technique=run.technique, outcome="removed",
                                reason="retention").inc()
            log.info("retention: removed %s", run.id)
        self.report_usage()
        metrics.RETENTION_SECONDS.observe(time.monotonic() - began)

    def report_usage(self) -> None:
        """Runs and bytes per namespace and in all (the index's sums) into the metrics."""
        usage = self.store.index.usage()
        metrics.STORE_RUNS.set(sum(runs for runs, _ in usage.values()))
        metrics.STORE_BYTES.set(sum(size for _, size in usage.values()))
        metrics.INDEX_REBUILDS.set(len(self.store.index.rebuilds))
        with self.write_lock:
            for namespace in set(self.namespace_bytes) - set(usage):
                del self.namespace_bytes[namespace]
                metrics.NAMESPACE_BYTES.remove(namespace)
                metrics.NAMESPACE_RUNS.remove(namespace)
            for namespace, (runs, used) in usage.items():
                self._set_namespace_usage(namespace, used, runs)

    def retention_loop(self) -> None:
        while not self.stopped.wait(RETENTION_SECONDS):
            try:
                self.apply_retention()
            except Exception as error:  # noqa: BLE001 - one line, the next round runs
                log.error("retention failed: %s: %s", type(error).__name__, error)

    def start(self) -> None:
        """The watches and the retention loop (in the serving process, after gunicorn forks);
        the index opened (rebuilt when lost) and the disk use reported at once."""
        try:
            self.report_usage()
        except Exception as error:  # noqa: BLE001 - the retention loop tries again
            log.error("results index: %s: %s", type(error).__name__, error)
        self.pods.start()
        self.namespaces.start()
        threading.Thread(target=self.retention_loop, name="retention", daemon=True).start()


def read_push_body() -> Any:
    """The push's JSON body: 400 when it is not JSON, 413 when its shape is larger than a run's
    (MAX_JSON_VALUES: a run is a handful of strings, the stacks one of them)."""
    try:
        text = request.get_data(cache=False).decode("utf-8")
        jsonio.check_shape(text, MAX_JSON_VALUES)
        return jsonio.loads(text)
    except jsonio.ShapeError as error:
        metrics.PUSHES_REFUSED.labels(reason="json-shape").inc()
        abort(413, description=f"the body has {error}: a run is a JSON object of a few "
              "strings (ticket, format, stacks, summary) and its meta")
    except (ValueError, RecursionError):
        abort(400, description="the body is not JSON")


def create_service_app(service: Service) -> Flask:
    """The results page (readers' tokens) and the agents' API (toolsets' tokens) on one app."""
    app = create_app(service.store.root, access=service.auth, store=service.store)
    app.config["MAX_CONTENT_LENGTH"] = MAX_PUSH_BYTES

    @app.before_request
    def started() -> None:
        request.environ["sidecar_debug.started"] = time.monotonic()

    @app.after_request
    def count(response: Response) -> Response:
        route = _route()
        metrics.REQUESTS.labels(route=route, code=str(response.status_code)).inc()
        began = request.environ.get("sidecar_debug.started")
        if isinstance(began, float):
            metrics.REQUEST_SECONDS.labels(route=route).observe(time.monotonic() - began)
        return response

    def answer(handler: Callable[[], tuple[dict[str, Any], int]]) -> Response:
        try:
            data, status = handler()
        except Refused as refused:  # AuthError, PlanError: the status and why
            abort(refused.status, description=refused.message)
        return Response(json.dumps(data), status=status, mimetype="application/json")

    @app.get("/agent/v1/plan")
    def agent_plan() -> Response:
        return answer(lambda: (service.plan(), 200))

    @app.post("/agent/v1/runs")
    def agent_push() -> Response:
        if request.mimetype != "application/json":
            abort(415, description="send the run as application/json")

        def push() -> tuple[dict[str, Any], int]:
            # Who pushes is known from the headers: the namespace's slot is taken before the
            # body is read, and the body's JSON shape is bounded before it is decoded.
            identity, _ = service.agent_pod()
            with service.slots.hold(identity.namespace):
                try:
                    return service.push(read_push_body())
                except (HTTPException, Refused):
                    service.slots.refuse(identity.namespace)
                    raise

        return answer(push)

    @app.post("/agent/v1/failures")
    def agent_failure() -> Response:
        if request.mimetype != "application/json":
            abort(415, description="send the report as application/json")
        if (request.content_length or 0) > failures.MAX_REPORT_BYTES:
            abort(413, description=f"a failure report is at most {failures.MAX_REPORT_BYTES} "
                  "bytes: the reason is a short code, the message one line")
        data = request.stream.read(failures.MAX_REPORT_BYTES + 1)
        if len(data) > failures.MAX_REPORT_BYTES:
            abort(413, description=f"a failure report is at most {failures.MAX_REPORT_BYTES} "
                  "bytes: the reason is a short code, the message one line")
        try:
            body = json.loads(data)
        except (ValueError, RecursionError):
            abort(400, description="the body is not JSON")
        return answer(lambda: service.failure(body))

    @app.errorhandler(409)
    @app.errorhandler(415)
    @app.errorhandler(422)
    @app.errorhandler(429)
    def agent_error(error: Any) -> Response:
        code = getattr(error, "code", 500) or 500
        response = Response(json.dumps({"error": getattr(error, "description", "") or
                                         "error"}), status=code, mimetype="application/json")
        if code == 429:
            response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response

    return app
