"""`sidecar-debug flamegraph POD`: record the app from the pod's toolset container and render
its flame graph here (the logic is in webhook.sessions.session.flamegraph)."""

from __future__ import annotations

import argparse
from pathlib import Path

from webhook.commands.sessions import common
from webhook.sessions import session as sessions


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    flame = subparsers.add_parser(
        "flamegraph", parents=common.recording_options(),
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


def _flamegraph(args: argparse.Namespace) -> int:
    return common.run(args, lambda session: sessions.flamegraph(
        session, seconds=args.seconds, frequency=args.frequency, pid=args.pid, name=args.name,
        output=args.output, keep_remote=args.keep_remote, force=args.force,
        profile_type=args.profile_type))
