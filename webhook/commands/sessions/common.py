"""What the session subcommands share: the options every one of them takes (the pod, the
cluster, the toolset container, the output and copy limits), the process options, `--force`,
and `run`, which opens the session and turns a SessionError into its one line and exit code.
The subcommand modules import this one and nothing of each other."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from webhook.sessions import copyback
from webhook.sessions import session as sessions
from webhook.wire import constants


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of bytes: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def session_options() -> argparse.ArgumentParser:
    """The parent parser of every session subcommand: the pod, where to find it, the toolset
    container and image, and the limits on what comes back."""
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
    return common


def output_options() -> argparse.ArgumentParser:
    """The parent parser of the subcommands that write files here: `--force`."""
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument("--force", action="store_true",
                        help="replace output files that exist (never replaced otherwise)")
    return output


def target_options() -> argparse.ArgumentParser:
    """The parent parser of the subcommands that record one process: `--pid` or `--name`."""
    target = argparse.ArgumentParser(add_help=False)
    group = target.add_mutually_exclusive_group()
    group.add_argument("--pid", type=int,
                       help="process in the pod (default: the app's main process)")
    group.add_argument("--name", metavar="PATTERN", help="regex on the process command line")
    return target


def recording_options() -> list[argparse.ArgumentParser]:
    """The parents of flamegraph, trace and trap: the session, the process, `--force`."""
    return [session_options(), target_options(), output_options()]


def session(args: argparse.Namespace) -> sessions.Session:
    api_client = sessions.api_client_from(args.kubeconfig, args.context)
    namespace = args.namespace or sessions.current_namespace(args.kubeconfig, args.context)
    return sessions.Session(api_client=api_client, pod=args.pod, namespace=namespace,
                            container=args.container, sidecar_name=args.sidecar_name,
                            settings_ref=args.settings_configmap, config_file=args.config,
                            image=args.image, max_output_bytes=args.max_output_bytes,
                            max_copy_bytes=args.max_copy_bytes)


def run(args: argparse.Namespace, body: Any) -> int:
    """`body(session)` on the session `args` name; a SessionError is its one line on stderr
    and its exit code, Ctrl-C is 130."""
    try:
        result: int = body(session(args))
        return result
    except sessions.SessionError as error:
        print(f"sidecar-debug {args.command}: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        return 130
