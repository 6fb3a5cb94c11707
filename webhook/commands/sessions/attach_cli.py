"""`sidecar-debug attach POD`: add the toolset to a running pod as an ephemeral container (the
logic is in webhook.sessions.session.attach)."""

from __future__ import annotations

import argparse

from webhook.commands.sessions import common
from webhook.sessions import session as sessions


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    att = subparsers.add_parser(
        "attach", parents=[common.session_options()],
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


def _attach(args: argparse.Namespace) -> int:
    return common.run(args, lambda session: sessions.attach(
        session, profile_name=args.profile, target=args.target, wait_seconds=args.wait))
