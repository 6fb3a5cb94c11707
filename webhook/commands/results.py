"""`sidecar-debug results`: the results service (the chart's workload), the page over a local
directory, opening the cluster's page with your own identity, listing and pruning runs."""

from __future__ import annotations

import argparse
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from webhook.commands import output
from webhook.policy.model import parse_duration
from webhook.wire import constants

_DURATION = re.compile(r"^([0-9]+[dhms])+$")
# The results service's connections: each toolset keeps one open between its polls (idle for
# at most the planner's IDLE_POLL_SECONDS, closed AGENT_KEEPALIVE_MARGIN s after that), so the
# service holds one per pod of the fleet: 20,000 file descriptors, and a few KiB each.
AGENT_KEEPALIVE_MARGIN = 15
AGENT_CONNECTIONS = 20_000


def duration(text: str) -> timedelta:
    """argparse type: '30d', '12h', '90m', '1h30m'."""
    if not _DURATION.match(text.strip()):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: use a number with a unit d, h, m or s (e.g. 7d, 12h, "
            "1h30m)")
    return parse_duration(text.strip())


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "results", help="the stored profiling runs: serve the results page, list, prune",
        description="Runs stored by schedules and triggers (DIR/NAMESPACE/POD/TIME-TECHNIQUE/ "
        "with stacks.folded and meta.json).")
    commands = parser.add_subparsers(dest="results_command", metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", type=Path, required=True, help="the results directory")

    serve = commands.add_parser(
        "serve", parents=[common], help="serve the results page (read-only)",
        description="List runs by namespace, pod and time; each run as an interactive flame "
        "graph (search, click to zoom), differential flame graphs between two runs, downloads "
        "as folded stacks, speedscope JSON and pprof. Reads DIR only.")
    serve.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1: this machine only; the "
                       "page has no authentication, so 0.0.0.0 shows every run in DIR to "
                       "anyone who can reach the port)")
    serve.set_defaults(func=_serve)

    service = commands.add_parser(
        "service", parents=[common],
        help="the results service: toolsets pull plans and push runs, readers read (HTTPS)",
        description="The chart's results workload: answers the toolsets' plan requests "
        "(computed from the namespace and pod annotations it watches) and stores the runs they "
        "push with their pod's projected token (TokenReview with --audience); serves the "
        "results page to readers who send their Kubernetes bearer token, showing the "
        "namespaces a SubjectAccessReview lets them read. HTTPS on --port; plain HTTP on "
        "127.0.0.1:--local-port for `kubectl port-forward` (`sidecar-debug results open`).")
    service.add_argument("--audience", required=True,
                         help="the audience the toolsets' tokens are bound to")
    service.add_argument("--config", help="the webhook's settings file (toolset image, "
                         "profiles, policy path, sidecar name)")
    service.add_argument("--policy", metavar="PATH", help="policy file or directory (default: "
                         "the settings' policyPath, else the built-in policy)")
    service.add_argument("--tls-cert-file", required=True, help="serving certificate (PEM)")
    service.add_argument("--tls-key-file", required=True, help="its key (PEM)")
    service.add_argument("--tls-wait", type=float, default=600.0, metavar="SECONDS",
                         help="wait this long for a usable certificate pair (the webhook "
                         "issues it in certificates mode self; default 600)")
    service.add_argument("--host", default="0.0.0.0",  # noqa: S104 - a Service's backend
                         help="address of the HTTPS listener (default 0.0.0.0)")
    service.add_argument("--port", type=int, default=8443, help="HTTPS port (default 8443)")
    service.add_argument("--local-port", type=int, default=8081,
                         help="plain HTTP port on 127.0.0.1, reachable by port-forward only "
                         "(default 8081; 0: none)")
    service.add_argument("--metrics-port", type=int, default=9090,
                         help="port of /metrics and /healthz (plain HTTP; default 9090)")
    service.add_argument("--max-concurrent-runs", type=int, default=2, metavar="N",
                         help="scheduled runs in flight per namespace (default 2)")
    service.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster)")
    service.add_argument("--context", help="kubeconfig context")
    service.add_argument("--log-level", help="DEBUG, INFO (default: the settings'), WARNING")
    service.set_defaults(func=_service)

    opener = commands.add_parser(
        "open", help="open the cluster's results page as yourself (port-forward + a token)",
        description="Port-forward to the results service's pod with your own rights "
        "(pods/portforward in its namespace) and serve the page on 127.0.0.1, adding a bearer "
        "token to each request: you see the namespaces RBAC lets you read (get "
        "debugresults.sidecar-debug.io). Where the kubeconfig's identity is a service account "
        "(or with --service-account), the token is a TokenRequest bound to the service's "
        "readers' audience, useless elsewhere; otherwise the kubeconfig's own token is sent, "
        "with a warning (--require-bound-token refuses instead). See docs/schedules.md.")
    opener.add_argument("-n", "--namespace", default=constants.PRODUCT,
                        help=f"the release's namespace (default {constants.PRODUCT})")
    opener.add_argument("--release", default=constants.PRODUCT,
                        help=f"the Helm release (default {constants.PRODUCT})")
    opener.add_argument("--port", type=int, default=8080,
                        help="local port on 127.0.0.1 (default 8080; 0: any)")
    opener.add_argument("--remote-port", type=int, default=8081,
                        help="the service's port-forward port (default 8081)")
    opener.add_argument("--token", help="bearer token to send, as it is, instead of one "
                        "chosen from the kubeconfig")
    opener.add_argument("--service-account", metavar="NAMESPACE/NAME",
                        help="read as this service account, with tokens bound to the results "
                        "service (needs create on its serviceaccounts/token)")
    opener.add_argument("--require-bound-token", action="store_true",
                        help="refuse rather than send the kubeconfig's own token when no "
                        "audience-bound token can be had")
    opener.add_argument("--kubeconfig", help="kubeconfig file")
    opener.add_argument("--context", help="kubeconfig context")
    opener.set_defaults(func=_open)

    listing = commands.add_parser("list", parents=[common], help="list stored runs")
    listing.add_argument("-n", "--namespace", help="only this namespace")
    listing.add_argument("--pod", help="only this pod")
    listing.add_argument("--technique", help="only this technique (perf, py-spy, ...)")
    listing.add_argument("--since", metavar="TIME",
                         help="only runs started at or after TIME (2026-12-01 or "
                         "2026-12-01T10:00:00Z)")
    listing.add_argument("--until", metavar="TIME", help="only runs started before TIME")
    listing.add_argument("--limit", type=int, default=500, metavar="N",
                         help="runs per page, newest first (default 500, at most 1000)")
    listing.add_argument("--continue", dest="page", metavar="TOKEN",
                         help="the next page: the token the page before printed")
    output.add_output(listing)
    listing.set_defaults(func=_list)

    prune = commands.add_parser(
        "prune", parents=[common],
        help="remove runs beyond a count per pod or older than an age",
        description="Remove runs beyond the newest --keep of each pod and runs older than "
        "--max-age, and print each one removed. 0 means no limit, as in the chart "
        "(results.retention.count and maxAge): `--keep 0` removes nothing by count. "
        "--dry-run prints what would go and removes nothing.")
    prune.add_argument("--keep", type=int,
                       help="runs kept per pod, newest first (0: no limit by count)")
    prune.add_argument("--max-age", type=duration,
                       help="remove runs older than this, e.g. 30d (0d: no limit by age)")
    prune.add_argument("--dry-run", action="store_true",
                       help="print what would be removed; remove nothing")
    prune.set_defaults(func=_prune)
    parser.set_defaults(func=lambda args: _usage(parser))

    schedule = subparsers.add_parser(
        "schedule", help="check a sidecar-debug.io/schedule annotation before setting it",
        description="Parse a schedule annotation's value (JSON or YAML, one schedule or a list) "
        "as the controller will, and print each schedule with its next runs (UTC), or what is "
        "wrong with it.")
    actions = schedule.add_subparsers(dest="schedule_command", metavar="ACTION")
    check = actions.add_parser("check", help="check an annotation value")
    check.add_argument("file", metavar="FILE", help="the annotation's value ('-': stdin)")
    check.add_argument("-n", "--namespace", default="default",
                       help="namespace the annotation is for (default: default)")
    check.add_argument("--pod", help="the pod it is for (default: a namespace annotation)")
    check.add_argument("--runs", type=int, default=3, help="next runs to show (default 3)")
    output.add_output(check)
    check.set_defaults(func=_check_schedule)
    schedule.set_defaults(func=lambda args: _usage(schedule))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _check_schedule(args: argparse.Namespace) -> int:
    from webhook.schedules.spec import ScheduleError, parse

    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    except OSError as error:
        print(f"sidecar-debug schedule check: {args.file}: {error.strerror}", file=sys.stderr)
        return 2
    try:
        schedules = parse(text, namespace=args.namespace, pod=args.pod)
    except ScheduleError as error:
        print(f"sidecar-debug schedule check: {error}", file=sys.stderr)
        if args.output != "text":
            output.emit(output.document("ScheduleCheck", valid=False, error=str(error),
                                        schedules=[]), args.output)
        return 1
    now = datetime.now(UTC)
    found = []
    for schedule in schedules:
        moment, upcoming_runs = now, []
        for _ in range(max(args.runs, 0)):
            upcoming = schedule.cron.next(moment)
            if upcoming is None:
                break
            upcoming_runs.append(upcoming)
            moment = upcoming
        found.append({"key": schedule.key, "description": schedule.describe(),
                      "nextRuns": [f"{t:%Y-%m-%dT%H:%M:%SZ}" for t in upcoming_runs]})
        if args.output == "text":
            print(f"{schedule.key}: {schedule.describe()}")
            for upcoming in upcoming_runs:
                print(f"  next: {upcoming:%Y-%m-%d %H:%M} UTC")
    if args.output != "text":
        output.emit(output.document("ScheduleCheck", valid=True, error="", schedules=found),
                    args.output)
    return 0


def _no_directory(args: argparse.Namespace) -> bool:
    """Say so when --dir is not a directory (a typo would otherwise list or prune nothing)."""
    if args.dir.is_dir():
        return False
    print(f"sidecar-debug results {args.results_command}: {args.dir} is not a directory (the "
          "results volume, or an empty directory to start with)", file=sys.stderr)
    return True


def _serve(args: argparse.Namespace) -> int:
    if _no_directory(args):
        return 2
    from webhook.results.web import create_app
    from webhook.server.results_server import serve_wsgi

    if not 0 <= args.port < 65536:
        print(f"sidecar-debug results serve: --port {args.port} is not a TCP port (0: any free "
              "one)", file=sys.stderr)
        return 2

    def listening(urls: list[str]) -> None:
        for url in urls:
            print(f"results page on {url}/ (runs in {args.dir}; no authentication)",
                  file=sys.stderr, flush=True)
        if not _loopback(args.host):
            print(f"warning: listening on {args.host}, not only this machine: anyone who can "
                  "reach the port reads every run in the directory (--host 127.0.0.1 keeps it "
                  "local; `sidecar-debug results open` serves the cluster's page with RBAC)",
                  file=sys.stderr, flush=True)

    serve_wsgi(create_app(args.dir), args.host, args.port, on_listening=listening)
    return 0


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _list(args: argparse.Namespace) -> int:
    from webhook.results.index import Query, QueryError, parse_moment
    from webhook.results.store import Store, StoreError, check_namespace, check_pod, check_technique

    if _no_directory(args):
        return 2
    try:
        query = Query(
            namespaces=[check_namespace(args.namespace)] if args.namespace else None,
            pod=check_pod(args.pod) if args.pod else None,
            technique=check_technique(args.technique) if args.technique else None,
            since=parse_moment("--since", args.since) if args.since else None,
            until=parse_moment("--until", args.until) if args.until else None,
            limit=args.limit, cursor=args.page)
        page = Store(args.dir).page(query)
    except (QueryError, StoreError) as error:
        print(f"sidecar-debug results list: {error}", file=sys.stderr)
        return 2
    runs = page.runs
    if args.output != "text":
        # As a Kubernetes list: metadata.continue when there is a next page.
        listed = output.document("RunList", items=[{
            "id": run.id, "namespace": run.namespace, "pod": run.pod, "run": run.name,
            "started": f"{run.started.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}",
            "technique": run.technique, "samples": run.samples,
            "failed": run.failed, "reason": run.reason, "message": run.message,
        } for run in runs])
        if page.next:
            listed["metadata"] = {"continue": page.next,
                                  "remainingItemCount": page.remaining}
        output.emit(listed, args.output)
        return 0
    for run in runs:
        print(f"{run.id}\tfailed ({run.reason}): {run.message}" if run.failed
              else f"{run.id}\t{run.samples} samples")
    if page.next:
        print(f"runs {page.first}-{page.first + len(runs) - 1} of {page.total}; the next "
              f"page: --continue {page.next}", file=sys.stderr)
    return 0


def _prune(args: argparse.Namespace) -> int:
    from webhook.results.store import Store

    if args.keep is None and args.max_age is None:
        print("sidecar-debug results prune: say what to remove: --keep N and/or --max-age AGE",
              file=sys.stderr)
        return 2
    if args.keep is not None and args.keep < 0:
        print("sidecar-debug results prune: --keep must be 0 (no limit) or more",
              file=sys.stderr)
        return 2
    if _no_directory(args):
        return 2
    # 0 is "no limit", as the chart's results.retention.count and maxAge: the same number
    # never means "keep everything" in the chart and "delete everything" here.
    keep = args.keep or None
    max_age = args.max_age or None
    if keep is None and max_age is None:
        print("sidecar-debug results prune: nothing to remove: 0 means no limit (as "
              "results.retention.count: 0 in the chart); to remove runs, give --keep 1 or "
              "more, or --max-age (e.g. 30d)", file=sys.stderr)
        return 0
    removed = Store(args.dir).prune(keep=keep, max_age=max_age, now=datetime.now(UTC),
                                    dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for run in removed:
        print(f"{verb} {run.id}")
    print(f"{verb} {len(removed)} run{'s' if len(removed) != 1 else ''}"
          + (" (dry run: nothing removed)" if args.dry_run else ""), file=sys.stderr)
    return 0


def _service(args: argparse.Namespace) -> int:
    import os

    from webhook import logs
    from webhook.config import load_settings
    from webhook.controller import metrics as controller_metrics
    from webhook.kube.api import ClientApi
    from webhook.kube.client import api_client
    from webhook.policy.engine import load_policy_engine
    from webhook.results import metrics
    from webhook.results.auth import Authenticator, ReviewAPI
    from webhook.results.export import Exporters
    from webhook.results.failures import Notifier
    from webhook.results.mirror import cluster_mirrors
    from webhook.results.planner import Planner
    from webhook.results.service import Retention, Service, create_service_app, quota_bytes
    from webhook.server.results_server import serve_wsgi

    if _no_directory(args):
        return 2
    for name in ("port", "local_port", "metrics_port"):
        value = getattr(args, name)
        if not (0 < value < 65536 or (name == "local_port" and value == 0)):
            print(f"sidecar-debug results service: --{name.replace('_', '-')} {value} is not a "
                  "TCP port", file=sys.stderr)
            return 2
    if args.max_concurrent_runs < 1:
        print("sidecar-debug results service: --max-concurrent-runs must be 1 or more",
              file=sys.stderr)
        return 2
    settings = load_settings(args.config, overrides={"policy_path": args.policy})
    logs.configure(args.log_level or settings.log_level)
    # results.export (ExportSettingsError: one line, exit 2, before any wait or cluster access)
    exporters = Exporters.from_environ(os.environ, registry=metrics.REGISTRY)
    problem = _wait_for_pair(args.tls_cert_file, args.tls_key_file, args.tls_wait)
    if problem:
        print(f"sidecar-debug results service: no usable serving certificate after "
              f"{args.tls_wait:g} s: {problem}", file=sys.stderr)
        return 2
    reviewer = ReviewAPI(args.kubeconfig, args.context)
    gate = load_policy_engine(settings, reviewer)
    cluster = api_client(args.kubeconfig, args.context)
    pods, namespaces = cluster_mirrors(cluster, settings)
    # Failed recordings: Events on their pods (the pod's name says which replica posted).
    notifier = Notifier(ClientApi(cluster), identity=os.environ.get("HOSTNAME", "results"))
    service = Service(args.dir, Authenticator(reviewer, args.audience),
                      Planner(settings, gate, args.dir, max_concurrent=args.max_concurrent_runs),
                      pods, namespaces, Retention.from_environment(os.environ),
                      exporters=exporters, notifier=notifier,
                      quota=quota_bytes(os.environ.get(constants.ENV_RESULTS_NAMESPACE_QUOTA),
                                        Path(args.dir)))
    app = create_service_app(service)

    def start(worker: object) -> None:
        service.start()
        controller_metrics.serve("0.0.0.0", args.metrics_port,  # noqa: S104 - probes, scrapes
                                 lambda: pods.ready.is_set() and namespaces.ready.is_set(),
                                 registry=metrics.REGISTRY)

    # Runs are pushed whole: the webhook's 3 MiB review limit would cut them (the service's
    # own limit, MAX_PUSH_BYTES, applies).
    from webhook.results.service import MAX_PUSH_BYTES

    os.environ.setdefault(f"{constants.ENV_PREFIX}MAX_REQUEST_BYTES", str(MAX_PUSH_BYTES))
    print(f"results service on https://{args.host}:{args.port}/ (runs in {args.dir}"
          + (f"; port-forward: 127.0.0.1:{args.local_port}" if args.local_port else "") + ")",
          file=sys.stderr, flush=True)
    # Agents keep their connection open between polls (one TLS handshake per pod, not per
    # poll): it stays open a little longer than the longest wait a plan asks for, and the
    # worker's event loop holds one per pod of the fleet.
    from webhook.results.planner import IDLE_POLL_SECONDS

    serve_wsgi(app, args.host, args.port, threads=8,
               keepalive=IDLE_POLL_SECONDS + AGENT_KEEPALIVE_MARGIN,
               max_connections=AGENT_CONNECTIONS,
               tls=(args.tls_cert_file, args.tls_key_file),
               plain_bind=f"127.0.0.1:{args.local_port}" if args.local_port else None,
               post_worker_init=start)
    return 0


def _wait_for_pair(cert_file: str, key_file: str, seconds: float) -> str | None:
    """None once the files load as a certificate and its key; else, after `seconds`, why not.
    The mounted Secret is empty until the webhook has issued the pair (kubelet then updates
    the mount within a minute or so): waiting beats a crash loop's growing back-off."""
    import ssl
    import time

    from webhook.certs.tls import server_context

    deadline = time.monotonic() + seconds
    said = 0.0
    while True:
        try:
            server_context(cert_file, key_file)
            return None
        except (OSError, ssl.SSLError, ValueError) as error:
            problem = f"{cert_file}, {key_file}: {getattr(error, 'strerror', None) or error}"
        now = time.monotonic()
        if now >= deadline:
            return problem
        if now - said >= 30:
            print(f"waiting for the serving certificate ({problem})", file=sys.stderr,
                  flush=True)
            said = now
        time.sleep(min(2.0, max(0.0, deadline - now)))


def _open(args: argparse.Namespace) -> int:
    from webhook.results.opener import OpenError, open_page

    try:
        return open_page(args)
    except OpenError as error:
        print(f"sidecar-debug results open: {error}", file=sys.stderr)
        return error.code
