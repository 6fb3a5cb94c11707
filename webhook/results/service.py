"""The results service: one workload, one writer of the results store (`sidecar-debug results
service`, the chart's `<fullname>-results` Deployment).

- Toolset agents (toolset/bin/results-agent) ask `GET /agent/v1/plan` what to record now and
  push each run to `POST /agent/v1/runs`, with their pod's projected, audience-bound token
  (webhook.results.auth). Plans are computed here from the namespace and pod objects the
  service watches (webhook.results.mirror, webhook.results.planner), never from what the
  toolset says; a run is stored only under the pod its token belongs to, and only for a
  recording this service planned for that pod (its ticket).
- Readers get the results page (webhook.results.web) with their own bearer token: only the
  namespaces a SubjectAccessReview lets them read.

The service's ServiceAccount can get/list/watch pods and namespaces and create TokenReviews
and SubjectAccessReviews; nothing else (tests/chart/test_chart_rbac.py).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from flask import Flask, Response, abort, request

from webhook import constants
from webhook.errors import Refused
from webhook.policy.model import duration_seconds
from webhook.results import folded, metrics
from webhook.results.auth import POD_HEADER, AgentIdentity, Authenticator, AuthError
from webhook.results.bpftrace import collapse_bpftrace
from webhook.results.export import Exporters
from webhook.results.mirror import Mirror
from webhook.results.planner import Planner, Ticket
from webhook.results.store import Store, StoreError
from webhook.results.web import create_app
from webhook.schedules import plan as plans

log = logging.getLogger(__name__)

MAX_PUSH_BYTES = 16 << 20  # a folded profile of a busy app is a few MiB at most
POLL_SECONDS = 20  # how often an agent asks (it is told so in every plan)
RETENTION_SECONDS = 300.0
_REASON = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
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
    """What exports name the app by (OpenTelemetry's service.name and k8s.container.name): the
    pod's `app.kubernetes.io/name` or `app` label, and its one app container (none when the
    pod has several: a run records them all)."""
    found: dict[str, str] = {}
    labels = plans.labels_of(pod)
    service_name = labels.get("app.kubernetes.io/name") or labels.get("app")
    if service_name:
        found["serviceName"] = service_name[:200]
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
                 exporters: Exporters | None = None) -> None:
        self.store = Store(root)
        self.exporters = exporters  # results.export: sent on after storing, never waited for
        self.auth = auth
        self.planner = planner
        self.pods = pods
        self.namespaces = namespaces
        self.retention = retention
        self.clock = clock
        self.write_lock = threading.Lock()
        self.stopped = threading.Event()
        # A deleted pod's cached token reviews go with it (a new pod of that name has its own).
        self.pods.on_deleted.append(lambda pod: self.auth.forget_pod(plans.uid_of(pod)))

    # --- who is asking ------------------------------------------------------------------------

    def agent_pod(self) -> tuple[AgentIdentity, dict[str, Any]]:
        """The caller's pod as the service watches it; AuthError when the token's identity
        and the pod do not fit together."""
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
        if plans.service_account_of(pod) != identity.service_account:
            raise AuthError(403, f"pod {identity.namespace}/{identity.pod} runs as service "
                            f"account {plans.service_account_of(pod)}, not "
                            f"{identity.service_account}")
        return identity, pod

    # --- handlers -------------------------------------------------------------------------

    def plan(self) -> dict[str, Any]:
        identity, pod = self.agent_pod()
        namespace = self.namespaces.get("", identity.namespace)
        tickets = self.planner.plan(pod, namespace, self.pods.in_namespace(identity.namespace),
                                    self.clock())
        return {"pod": f"{identity.namespace}/{identity.pod}", "pollSeconds": POLL_SECONDS,
                "runs": [ticket.to_plan() for ticket in tickets]}

    def push(self, body: Any) -> tuple[dict[str, Any], int]:
        identity, pod = self.agent_pod()
        if not isinstance(body, dict) or not isinstance(body.get("ticket"), str):
            abort(400, description="expected a JSON object with the plan's ticket, and stacks "
                  "(folded or bpftrace) or an error")
        ticket = self.planner.finish(body["ticket"], identity.namespace, identity.pod,
                                     identity.pod_uid or plans.uid_of(pod))
        if "error" in body:
            reason = body.get("reason")
            reason = reason if isinstance(reason, str) and _REASON.fullmatch(reason) \
                else "failed"
            message = _one_line(body.get("error")) or "no message"
            metrics.RUNS.labels(technique=ticket.technique, outcome="failed",
                                reason=reason).inc()
            log.error("schedule %s: %s/%s: recording failed (%s): %s", ticket.schedule,
                      ticket.namespace, ticket.pod, reason, message)
            return {"recorded": "failure", "reason": reason}, 200
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
                run = self.store.save(ticket.namespace, ticket.pod, ticket.technique, stacks,
                                      started=ticket.issued, meta=meta)
        except (StoreError, OSError) as error:
            metrics.RUNS.labels(technique=ticket.technique, outcome="failed",
                                reason="store").inc()
            log.error("schedule %s: cannot store the run of %s/%s: %s", ticket.schedule,
                      ticket.namespace, ticket.pod, error)
            abort(500, description=f"the run could not be stored: {error}")
        size = (run.path / "stacks.folded").stat().st_size
        metrics.RUNS.labels(technique=ticket.technique, outcome="stored", reason="").inc()
        metrics.STORED_BYTES.inc(size)
        log.info("schedule %s: stored %s (%d samples)", ticket.schedule, run.id, run.samples)
        if self.exporters:
            self.exporters.export(run)
        return {"run": run.id, "samples": run.samples}, 201

    def _stacks(self, body: Mapping[str, Any], ticket: Ticket) -> dict[folded.Stack, int]:
        text, kind = body.get("stacks"), body.get("format", "folded")
        if not isinstance(text, str) or kind not in ("folded", "bpftrace"):
            abort(400, description="stacks: expected text in format folded or bpftrace")
        try:
            stacks = folded.parse(text) if kind == "folded" else collapse_bpftrace(text)
        except folded.FoldedError as error:
            metrics.RUNS.labels(technique=ticket.technique, outcome="failed",
                                reason="bad-stacks").inc()
            abort(400, description=f"stacks: not folded stacks: {error}")
        except (ValueError, RecursionError) as error:  # collapse_bpftrace on hostile text
            abort(400, description=f"stacks: not bpftrace output: {type(error).__name__}")
        if not stacks:
            metrics.RUNS.labels(technique=ticket.technique, outcome="failed",
                                reason="no-samples").inc()
            abort(422, description="no samples (was the app on CPU?)")
        return stacks

    # --- retention ------------------------------------------------------------------------

    def apply_retention(self) -> None:
        with self.write_lock:
            removed = self.store.prune(keep=self.retention.keep,
                                       max_age=self.retention.max_age, now=self.clock())
        for run in removed:
            log.info("retention: removed %s", run.id)
        runs = self.store.runs()
        metrics.STORE_RUNS.set(len(runs))
        total = 0
        for run in runs:
            try:
                total += sum(f.stat().st_size for f in run.path.iterdir() if f.is_file())
            except OSError:
                continue
        metrics.STORE_BYTES.set(total)

    def retention_loop(self) -> None:
        while not self.stopped.wait(RETENTION_SECONDS):
            try:
                self.apply_retention()
            except Exception as error:  # noqa: BLE001 - one line, the next round runs
                log.error("retention failed: %s: %s", type(error).__name__, error)

    def start(self) -> None:
        """The watches and the retention loop (in the serving process, after gunicorn forks)."""
        self.pods.start()
        self.namespaces.start()
        threading.Thread(target=self.retention_loop, name="retention", daemon=True).start()


def create_service_app(service: Service) -> Flask:
    """The results page (readers' tokens) and the agents' API (toolsets' tokens) on one app."""
    app = create_app(service.store.root, access=service.auth)
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
        try:
            body = json.loads(request.get_data(cache=False))
        except (ValueError, RecursionError):
            abort(400, description="the body is not JSON")
        return answer(lambda: service.push(body))

    @app.errorhandler(409)
    @app.errorhandler(415)
    @app.errorhandler(422)
    def agent_error(error: Any) -> Response:
        code = getattr(error, "code", 500) or 500
        return Response(json.dumps({"error": getattr(error, "description", "") or "error"}),
                        status=code, mimetype="application/json")

    return app
