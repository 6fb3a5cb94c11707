"""`sidecar-debug sessions`: the list of debug sessions (injected sidecars, standby pods,
attached toolsets) with their expiry; webhook.controller.sessions finds them."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from webhook.commands import output as printed
from webhook.sessions import session as sessions
from webhook.wire import exits


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    listing = subparsers.add_parser(
        "sessions",
        help="list debug sessions: injected, standby and attached toolsets, and when they expire",
        description="List the debug sessions of a namespace (or all): injected sidecars, "
        "standby pods and attached ephemeral toolset containers, with profile, who granted it, "
        "age and expiry, read from the toolset's environment (the webhook wrote them at "
        "admission). EXPIRES is the deadline written then (the policy at admission); with "
        "--policy, the earlier of that and the session's start plus "
        "that policy's maxSessionDuration, as `sidecar-debug controller` computes it.")
    scope = listing.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    listing.add_argument("--kubeconfig",
                         help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    listing.add_argument("--context", help="kubeconfig context")
    listing.add_argument("--policy", metavar="PATH",
                         help="policy file or directory to compute expiry with (the chart's "
                         "policies: `kubectl get configmap RELEASE-policies`)")
    printed.add_output(listing, text="table")
    listing.set_defaults(func=_list_sessions)


SESSION_COLUMNS = ("POD", "SESSION", "CONTAINER", "PROFILE", "GRANTED-BY", "AGE", "EXPIRES")


def _list_sessions(args: argparse.Namespace) -> int:
    import datetime as dt

    from kubernetes.client.exceptions import ApiException

    from webhook.kube import client as kube

    rules = None
    if args.policy:
        from webhook.config import load_settings
        from webhook.kube.access import KubernetesClusterAPI
        from webhook.policy.engine import load_policy_engine

        # PolicyError (file:line: problem) ends the command through webhook.commands.errors.
        settings = load_settings(overrides={"policy_path": args.policy})
        rules = load_policy_engine(settings, KubernetesClusterAPI(args.kubeconfig, args.context))
    try:
        api_client = sessions.api_client_from(args.kubeconfig, args.context)
        namespace = None if args.all_namespaces else (
            args.namespace or sessions.current_namespace(args.kubeconfig, args.context))
        try:
            if namespace is None:
                answer = kube.request(api_client, "GET", "/api/v1/pods", None, None)
            else:
                answer = kube.request(api_client, "GET", f"/api/v1/namespaces/{namespace}/pods",
                                      None, None)
        except ApiException as error:
            where = f"namespace {namespace}" if namespace else "all namespaces"
            raise sessions.SessionError(
                f"listing pods in {where}: HTTP {error.status} {error.reason or ''}".strip()
                + (" (you need `list` on pods there)" if error.status == 403 else ""),
                exits.EXIT_API) from error
    except sessions.SessionError as error:
        print(f"sidecar-debug sessions: {error}", file=sys.stderr)
        return error.code
    pods = [p for p in answer.get("items") or [] if isinstance(p, dict)]
    rows = session_rows(pods, dt.datetime.now(dt.UTC), rules)
    if args.output != "table":
        # A list of rows (kept as it was before kinds: scripts read it as a list).
        printed.emit(rows, args.output)
        return 0
    if not rows:
        where = f"namespace {namespace}" if namespace else "any namespace"
        print(f"No debug sessions in {where}.", file=sys.stderr)
        return 0
    columns = (("NAMESPACE",) if namespace is None else ()) + SESSION_COLUMNS
    table = [[row[c.lower()] or "-" for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in table)) for i, c in enumerate(columns)]
    for line in [list(columns), *table]:
        print("   ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    return 0


def session_rows(pods: list[dict[str, Any]], now: Any, rules: Any = None) -> list[dict[str, str]]:
    """One row per session (column name in lower case -> text); `rules` (a PolicyGate) adds
    the policy's maxSessionDuration to the expiry."""
    from webhook.controller.sessions import (
        expiry_of,
        format_age,
        is_active_pod,
        sessions_of,
    )
    from webhook.wire.rfc3339 import format_time

    rows: list[dict[str, str]] = []
    for pod in pods:
        if not is_active_pod(pod):
            continue
        for session in sessions_of(pod):
            limit = None
            if rules is not None and session.can_expire:
                try:
                    limit = rules.rule_for(session.namespace, session.service_account)[0]
                except Exception as error:  # noqa: BLE001 - an undecidable rule: say so
                    print(f"note: no policy rule for {session.namespace}/{session.pod}: {error}",
                          file=sys.stderr)
            expires = expiry_of(session, limit.max_session if limit else None)
            expiry = ""
            if expires is not None:
                left = expires - now
                expiry = format_time(expires) + (
                    f" (in {format_age(left)})" if left.total_seconds() > 0
                    else f" (overdue {format_age(-left)})")
            rows.append({
                "namespace": session.namespace, "pod": session.pod, "session": session.kind,
                "container": session.container, "profile": session.profile,
                "granted-by": session.grant,
                "age": format_age(now - session.started) if session.started else "",
                "expires": expiry,
            })
    return rows
