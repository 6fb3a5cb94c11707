"""`sidecar-debug controller`: end debug sessions that outlive their policy (issue 13).

Runs as the chart's controller Deployment (several replicas, one active through a Lease), or on
a workstation with a kubeconfig. The logic is in webhook.controller.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import sys
from pathlib import Path

from webhook.wire import constants

IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
DEFAULT_LEASE_NAME = f"{constants.PRODUCT}-controller"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "controller",
        help="end debug sessions past the policy's maxSessionDuration (one active replica)",
        description="Find debug sessions (injected sidecars, attached ephemeral toolset "
        "containers) and, for those past the maxSessionDuration of the policy rule covering the "
        "pod, do what the rule's onExpiry says: report (an Event and a metric), evict (the "
        "Eviction API, PodDisruptionBudgets apply) or stop (attached toolset containers end "
        "themselves at their deadline; one still running is reported). Holds no exec right. "
        "Replicas elect one leader through a coordination.k8s.io Lease; only it acts. "
        "Serves /metrics and /healthz.")
    parser.add_argument("--config", help="the webhook's settings file (profiles, policy path, "
                        "sidecar name); default: the built-in settings and $SIDECAR_DEBUG_*")
    parser.add_argument("--policy", metavar="PATH",
                        help="policy file or directory (default: the settings' policyPath, "
                        "else the built-in policy, which sets no maxSessionDuration)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then "
                        "$KUBECONFIG, ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("--identity", help="this replica's name in the Lease (default: "
                        "$POD_NAME or the host name, plus a random suffix)")
    parser.add_argument("--lease-namespace", help="namespace of the Lease (default: "
                        "$POD_NAMESPACE, the pod's namespace, else the kubeconfig context's)")
    parser.add_argument("--lease-name", default=DEFAULT_LEASE_NAME,
                        help=f"name of the Lease (default {DEFAULT_LEASE_NAME})")
    parser.add_argument("--lease-duration", type=float, default=15.0, metavar="SECONDS",
                        help="how long a Lease not renewed keeps the others waiting (default 15)")
    parser.add_argument("--renew-deadline", type=float, default=10.0, metavar="SECONDS",
                        help="the leader stops acting when it could not renew for this long "
                        "(default 10; below the lease duration)")
    parser.add_argument("--retry-period", type=float, default=2.0, metavar="SECONDS",
                        help="how often the Lease is renewed or tried (default 2)")
    parser.add_argument("--interval", "--sync-period", dest="interval", type=float,
                        default=30.0, metavar="SECONDS",
                        help="seconds between passes of the leader (default 30)")
    parser.add_argument("--check-schedules", action="store_true",
                        help="after each expiry pass, report schedules that cannot run (an "
                        "Event on the namespace or pod, once): the results service runs them")
    parser.add_argument("--metrics-address", default="0.0.0.0",  # noqa: S104
                        help="address of /metrics and /healthz (default 0.0.0.0)")
    parser.add_argument("--metrics-port", type=int, default=9090,
                        help="port of /metrics and /healthz (default 9090)")
    parser.add_argument("--log-level", default=None,
                        help="DEBUG, INFO (default: the settings' logLevel), WARNING, ERROR")
    parser.set_defaults(func=run)


def _usage(message: str) -> int:
    print(f"sidecar-debug controller: {message}", file=sys.stderr)
    return 2


def lease_namespace(args: argparse.Namespace) -> str:
    if args.lease_namespace:
        return str(args.lease_namespace)
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    if args.kubeconfig is None and os.path.exists(IN_CLUSTER_NAMESPACE):
        return Path(IN_CLUSTER_NAMESPACE).read_text().strip()
    from webhook.kube.client import current_namespace

    return current_namespace(args.kubeconfig, args.context)


def run(args: argparse.Namespace) -> int:
    from webhook import logs
    from webhook.config import load_settings
    from webhook.controller.lease import Timing
    from webhook.controller.loop import Controller, Options, StartError
    from webhook.kube.access import KubernetesClusterAPI
    from webhook.kube.client import api_client
    from webhook.policy.engine import load_policy_engine

    timing = Timing(args.lease_duration, args.renew_deadline, args.retry_period)
    problems = timing.problems()
    if args.interval <= 0:
        problems.append("--interval must be > 0")
    if not 0 < args.metrics_port < 65536:
        problems.append(f"--metrics-port {args.metrics_port} is not a TCP port")
    if problems:
        return _usage("; ".join(problems))
    # SettingsError/PolicyError (bad file, with its line) and KubeConfigError end the command
    # with one line and exit 2 through webhook.commands.errors.
    settings = load_settings(args.config, overrides={"policy_path": args.policy})
    logs.configure(args.log_level or settings.log_level)
    gate = load_policy_engine(settings, KubernetesClusterAPI(args.kubeconfig, args.context))
    identity = args.identity or (
        f"{os.environ.get('POD_NAME') or socket.gethostname()}_{secrets.token_hex(4)}")
    options = Options(
        identity=identity, lease_namespace=lease_namespace(args), lease_name=args.lease_name,
        timing=timing, interval=args.interval, check_schedules=args.check_schedules,
        metrics_address=args.metrics_address, metrics_port=args.metrics_port,
        sidecar_name=settings.sidecar_name)
    controller = Controller(api_client(args.kubeconfig, args.context),
                            api_client(args.kubeconfig, args.context), gate, options,
                            settings=settings)
    try:
        return controller.run()
    except StartError as error:
        return _usage(str(error))
