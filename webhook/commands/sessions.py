"""Session subcommands: flamegraph, trace, doctor, attach (the logic is in webhook.sessions), and
`sessions`, the list of debug sessions (webhook.controller.sessions finds them)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from webhook import constants
from webhook.commands import output as printed
from webhook.sessions import copyback
from webhook.sessions import session as sessions


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of bytes: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this module's subcommands; each sets `func(args) -> int` as its default."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("pod", metavar="POD", help="the pod to debug")
    common.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    common.add_argument("--kubeconfig",
                        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    common.add_argument("--context", help="kubeconfig context")
    common.add_argument("-c", "--container",
                        help="toolset container (default: the injected sidecar, else the newest "
                        "container added by `attach`)")
    common.add_argument("--sidecar-name", default=constants.DEFAULT_SIDECAR_NAME,
                        help="name of the injected sidecar (default debug-toolset)")
    common.add_argument("--settings-configmap", metavar="NAMESPACE/NAME",
                        help="the installed chart's settings ConfigMap (toolset image, profiles; "
                        f"default: ${constants.ENV_SETTINGS_CONFIGMAP}, else the one the "
                        "webhook configuration names, else "
                        f"{constants.DEFAULT_SETTINGS_CONFIGMAP})")
    common.add_argument("--config", metavar="FILE",
                        help="a local settings file instead of the cluster's settings")
    common.add_argument("--image",
                        help="the toolset image (default: toolsetImage from the settings); the "
                        "container used must run it")
    common.add_argument("--max-output-bytes", type=_positive_int, metavar="BYTES",
                        default=sessions.DEFAULT_MAX_OUTPUT_BYTES,
                        help="stop a command in the pod that sends more output than this "
                        f"(default {sessions.DEFAULT_MAX_OUTPUT_BYTES})")
    common.add_argument("--max-copy-bytes", type=_positive_int, metavar="BYTES",
                        default=copyback.DEFAULT_MAX_COPY_BYTES,
                        help="refuse results larger than this when copying them back (default "
                        f"{copyback.DEFAULT_MAX_COPY_BYTES})")

    output = argparse.ArgumentParser(add_help=False)
    output.add_argument("--force", action="store_true",
                        help="replace output files that exist (never replaced otherwise)")

    target = argparse.ArgumentParser(add_help=False)
    group = target.add_mutually_exclusive_group()
    group.add_argument("--pid", type=int,
                       help="process in the pod (default: the app's main process)")
    group.add_argument("--name", metavar="PATTERN", help="regex on the process command line")

    flame = subparsers.add_parser(
        "flamegraph", parents=[common, target, output],
        help="profile a pod's app and render its flame graph here",
        description="Record the app from the pod's toolset container (perf, or py-spy for "
        "Python < 3.12), bring its folded stacks and metadata back, and render the flame graph "
        "here.")
    flame.add_argument("--seconds", type=float, default=10.0, help="recording time (default 10)")
    flame.add_argument("--frequency", type=int, default=99, metavar="HZ",
                       help="samples per second (default 99)")
    flame.add_argument("--type", choices=("cpu", "offcpu", "wall"), default="cpu",
                       dest="profile_type",
                       help="cpu (default: where it burns CPU), offcpu (where it waits) or "
                       "wall (both, in time)")
    flame.add_argument("-o", "--output", type=Path,
                       help="HTML file to write (default flamegraph-POD.html; the folded stacks "
                       "go next to it as .folded)")
    flame.add_argument("--keep-remote", action="store_true",
                       help="keep the recording in the pod's /tmp/sidecar-debug")
    flame.set_defaults(func=_flamegraph)

    tracer = subparsers.add_parser(
        "trace", parents=[common, target, output],
        help="record LTTng user-space events (or, with --function, uprobe a function)",
        description="Without --function: record the app's LTTng user-space and logging events "
        "and bring back the text and the CTF trace. With --function/--offset: trace calls of "
        "a function with uprobes (bpftrace), printing arguments and return values live.")
    tracer.add_argument("--seconds", type=float, default=10.0, help="how long (default 10)")
    tracer.add_argument("--events", default="*", metavar="PATTERN",
                        help="LTTng event/logger pattern (default '*')")
    tracer.add_argument("--domain", action="append", default=[],
                        choices=["ust", "python", "jul", "log4j"], help="LTTng domain(s)")
    tracer.add_argument("-o", "--output", type=Path,
                        help="directory for trace.txt and the CTF trace (default trace-POD)")
    where = tracer.add_mutually_exclusive_group()
    where.add_argument("--function", metavar="SYMBOL", help="uprobe this function instead")
    where.add_argument("--offset", metavar="ADDR", help="uprobe this address instead")
    tracer.add_argument("--binary", help="binary/library path as the app sees it (uprobes)")
    tracer.add_argument("--args", metavar="SPEC", help="argument types, e.g. int,str (uprobes)")
    tracer.add_argument("--ret", action="store_true", help="capture return values (uprobes)")
    tracer.add_argument("--bcc", action="store_true", help="use BCC instead of bpftrace (uprobes)")
    tracer.add_argument("--keep-remote", action="store_true",
                        help="keep the trace in the pod's /tmp/sidecar-debug")
    tracer.set_defaults(func=_trace)

    doc = subparsers.add_parser(
        "doctor", parents=[common],
        help="say which debugging techniques work in a pod, and why the others do not")
    printed.add_output(doc, json_alias=True)
    doc.add_argument("--expect", metavar="LIST", help="techniques that must work (exit 1 if not)")
    doc.set_defaults(func=_doctor)

    att = subparsers.add_parser(
        "attach", parents=[common],
        help="add the toolset to a running pod as an ephemeral container",
        description="For pods created before they opted in, and standby pods: adds the "
        "installed webhook's toolset image as an ephemeral container that targets the app "
        "container (its PID namespace), without a restart, mounting the pod's shared /tmp and "
        "/var/run/lttng emptyDirs where it has them. The webhook's gate applies: a profile "
        "that needs privileges needs your RBAC grant. Then use `sidecar-debug flamegraph POD` "
        "(it finds the attached container). Prints the container's name first.")
    att.add_argument("--target", help="app container to target (default: the first one)")
    att.add_argument("--profile",
                     help="debug profile (default: the strongest one that needs no grant); its "
                     "securityContext applies on Kubernetes >= 1.23")
    att.add_argument("--wait", type=float, default=120,
                     help="seconds to wait for it to run (0: do not wait)")
    att.set_defaults(func=_attach)

    from webhook.commands import trap as trap_cli

    trap_cli.register(subparsers, parents=[common, target, output])

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


def _session(args: argparse.Namespace) -> sessions.Session:
    api_client = sessions.api_client_from(args.kubeconfig, args.context)
    namespace = args.namespace or sessions.current_namespace(args.kubeconfig, args.context)
    return sessions.Session(api_client=api_client, pod=args.pod, namespace=namespace,
                            container=args.container, sidecar_name=args.sidecar_name,
                            settings_ref=args.settings_configmap, config_file=args.config,
                            image=args.image, max_output_bytes=args.max_output_bytes,
                            max_copy_bytes=args.max_copy_bytes)


def _run(args: argparse.Namespace, body: Any) -> int:
    try:
        result: int = body(_session(args))
        return result
    except sessions.SessionError as error:
        print(f"sidecar-debug {args.command}: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        return 130


def _flamegraph(args: argparse.Namespace) -> int:
    return _run(args, lambda session: sessions.flamegraph(
        session, seconds=args.seconds, frequency=args.frequency, pid=args.pid, name=args.name,
        output=args.output, keep_remote=args.keep_remote, force=args.force,
        profile_type=args.profile_type))


def _trace(args: argparse.Namespace) -> int:
    if args.function or args.offset:
        arguments = ["--function", args.function] if args.function else ["--offset", args.offset]
        arguments += ["--seconds", f"{args.seconds:g}"]
        if args.pid is not None:
            arguments += ["--pid", str(args.pid)]
        if args.name:
            arguments += ["--name", args.name]
        if args.binary:
            arguments += ["--binary", args.binary]
        if args.args:
            arguments += ["--args", args.args]
        if args.ret:
            arguments.append("--ret")
        if args.bcc:
            arguments.append("--bcc")
        return _run(args, lambda session: sessions.uprobe(session, arguments, args.seconds))
    return _run(args, lambda session: sessions.trace(
        session, seconds=args.seconds, events=args.events, domains=args.domain,
        output=args.output, keep_remote=args.keep_remote, force=args.force))


def _doctor(args: argparse.Namespace) -> int:
    return _run(args, lambda session: sessions.doctor(
        session, as_json=args.output == "json", as_yaml=args.output == "yaml",
        expect=args.expect))


def _attach(args: argparse.Namespace) -> int:
    return _run(args, lambda session: sessions.attach(
        session, profile_name=args.profile, target=args.target, wait_seconds=args.wait))


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
                sessions.EXIT_API) from error
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
        format_time,
        is_active_pod,
        sessions_of,
    )

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
