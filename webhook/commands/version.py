"""`sidecar-debug version`: this client's version and, when a cluster is reachable, the
Kubernetes server's and every installed sidecar-debug release's (chart, app version, images).

The releases are found as `kubectl get deployments -A -l app.kubernetes.io/part-of=sidecar-debug`
finds them, keeping those whose pods are labelled `app.kubernetes.io/component: webhook` (the
chart's labels; nameOverride does not change them); without `list` on deployments
cluster-wide, in -n NAMESPACE (default sidecar-debug) only. No cluster, or no access: one line
saying so, and the client part still exits 0, as `kubectl version` prints its client version
without a server.
"""

from __future__ import annotations

import argparse
import platform
import sys
import urllib.parse
from typing import Any

from webhook import __version__
from webhook.commands import output
from webhook.wire import constants

PART_OF = "app.kubernetes.io/part-of=sidecar-debug"
COMPONENT = "app.kubernetes.io/component"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "version", help="print the client version, and the chart's and webhook's in the cluster",
        description="Print this client's version; with a reachable cluster (kubeconfig as "
        "kubectl reads it), the Kubernetes server's and each installed sidecar-debug webhook's: "
        "its release, namespace, chart version, app version, images and ready replicas (read "
        "from the webhook Deployment's labels and pod template). Without a cluster, one line "
        "says why, and the exit code is 0.")
    parser.add_argument("--client", action="store_true",
                        help="only the client version (no cluster is asked)")
    parser.add_argument("-n", "--namespace",
                        help="look for the webhook in this namespace only (default: every "
                        f"namespace, else {constants.PRODUCT} when listing all is forbidden)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube)")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("--request-timeout", type=float, default=5.0, metavar="SECONDS",
                        help="give up on the cluster after this long per request (default 5)")
    output.add_output(parser)
    parser.set_defaults(func=run)


def client_version() -> dict[str, str]:
    return {"version": __version__, "python": platform.python_version()}


def is_webhook(deployment: Any) -> bool:
    """The chart's webhook Deployment (not its controller or results service): its pods carry
    the component label `webhook`."""
    template = ((deployment.get("spec") or {}).get("template") or {}) if isinstance(
        deployment, dict) else {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(COMPONENT) == "webhook")


def webhook_release(deployment: dict[str, Any]) -> dict[str, Any]:
    """What a webhook Deployment says of its release (the chart's labels, the images)."""
    metadata = deployment.get("metadata") or {}
    labels = metadata.get("labels") or {}
    spec = deployment.get("spec") or {}
    pod_spec = ((spec.get("template") or {}).get("spec")) or {}
    status = deployment.get("status") or {}
    return {
        "namespace": metadata.get("namespace", ""),
        "deployment": metadata.get("name", ""),
        "release": labels.get("app.kubernetes.io/instance", ""),
        "chart": labels.get("helm.sh/chart", ""),
        "appVersion": labels.get("app.kubernetes.io/version", ""),
        "images": [c.get("image", "") for c in pod_spec.get("containers") or []
                   if isinstance(c, dict)],
        "replicas": int(spec.get("replicas") or 0),
        "readyReplicas": int(status.get("readyReplicas") or 0),
    }


def server_versions(args: argparse.Namespace) -> tuple[dict[str, Any] | None, str]:
    """({kubernetes, webhooks}, "") from the cluster, or (None, why not)."""
    from webhook.kube.client import KubeConfigError, api_client, error_message, request

    try:
        client = api_client(args.kubeconfig, args.context, kubeconfig_first=True, retries=False)
    except KubeConfigError as error:
        return None, str(error)
    timeout = args.request_timeout
    try:
        code = request(client, "GET", "/version", None, None, timeout=timeout)
    except Exception as error:  # noqa: BLE001 - any failure to reach it is "unreachable"
        return None, f"cannot reach the cluster's API server: {_reason(error, error_message)}"
    found: dict[str, Any] = {"kubernetes": str(code.get("gitVersion", "")), "webhooks": []}
    query = "?" + urllib.parse.urlencode({"labelSelector": PART_OF})
    paths = [f"/apis/apps/v1/namespaces/{args.namespace}/deployments{query}"] if args.namespace \
        else [f"/apis/apps/v1/deployments{query}",
              f"/apis/apps/v1/namespaces/{constants.PRODUCT}/deployments{query}"]
    problem = ""
    for path in paths:
        try:
            listing = request(client, "GET", path, None, None, timeout=timeout)
        except Exception as error:  # noqa: BLE001 - said, then the next place is tried
            problem = f"cannot list the webhook's Deployments ({path.split('?')[0]}): " \
                      f"{_reason(error, error_message)}"
            continue
        found["webhooks"] = [webhook_release(item) for item in listing.get("items") or []
                             if is_webhook(item)]
        problem = ""
        break
    return found, problem


def _reason(error: BaseException, error_message: Any) -> str:
    status = getattr(error, "status", None)
    if status is not None:
        reason = getattr(error, "reason", "") or ""
        said = str(error_message(getattr(error, "body", None), "no message"))
        return f"HTTP {status} {reason}".strip() + ": " + said
    return " ".join(str(getattr(error, "reason", None) or error).split())[:300]


def run(args: argparse.Namespace) -> int:
    server, problem = (None, "") if args.client else server_versions(args)
    if args.output != "text":
        fields: dict[str, Any] = {"client": client_version()}
        if not args.client:
            fields["server"] = server
            fields["problem"] = problem
        output.emit(output.document("Version", **fields), args.output)
        return 0
    print(f"Client Version: sidecar-debug {__version__} (Python {platform.python_version()})")
    if server is not None:
        print(f"Kubernetes Version: {server['kubernetes']}")
        for hook in server["webhooks"]:
            print(f"Webhook: {hook['namespace']}/{hook['deployment']} (release "
                  f"{hook['release'] or '-'}): chart {hook['chart'] or '-'}, app "
                  f"{hook['appVersion'] or '-'}, image {', '.join(hook['images']) or '-'}, "
                  f"{hook['readyReplicas']}/{hook['replicas']} ready")
        if not server["webhooks"] and not problem:
            where = f"namespace {args.namespace}" if args.namespace else "any namespace"
            print(f"Webhook: none installed in {where} (no Deployment labelled {PART_OF} "
                  f"with {COMPONENT}=webhook pods)")
    if problem:
        print(f"sidecar-debug version: {problem}", file=sys.stderr)
    return 0
