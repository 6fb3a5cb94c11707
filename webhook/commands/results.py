"""`sidecar-debug results`: serve the results page, list and prune stored runs."""

from __future__ import annotations

import argparse
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from webhook.policy.model import parse_duration

_DURATION = re.compile(r"^([0-9]+[dhms])+$")


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
    serve.add_argument("--host", default="0.0.0.0",  # noqa: S104 - a pod's server
                       help="address to listen on (default 0.0.0.0)")
    serve.set_defaults(func=_serve)

    listing = commands.add_parser("list", parents=[common], help="list stored runs")
    listing.add_argument("-n", "--namespace", help="only this namespace")
    listing.set_defaults(func=_list)

    prune = commands.add_parser("prune", parents=[common],
                                help="remove runs beyond a count per pod or older than an age")
    prune.add_argument("--keep", type=int, help="runs kept per pod (newest first)")
    prune.add_argument("--max-age", type=duration, help="remove runs older than this (e.g. 30d)")
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
        return 1
    now = datetime.now(UTC)
    for schedule in schedules:
        print(f"{schedule.key}: {schedule.describe()}")
        moment = now
        for _ in range(max(args.runs, 0)):
            upcoming = schedule.cron.next(moment)
            if upcoming is None:
                break
            print(f"  next: {upcoming:%Y-%m-%d %H:%M} UTC")
            moment = upcoming
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

    print(f"results page on http://{args.host}:{args.port}/ (runs in {args.dir})",
          file=sys.stderr, flush=True)
    serve_wsgi(create_app(args.dir), args.host, args.port)
    return 0


def _list(args: argparse.Namespace) -> int:
    from webhook.results.store import Store

    if _no_directory(args):
        return 2

    for run in Store(args.dir).runs(args.namespace):
        print(f"{run.id}\t{run.samples} samples")
    return 0


def _prune(args: argparse.Namespace) -> int:
    from webhook.results.store import Store

    if args.keep is None and args.max_age is None:
        print("sidecar-debug results prune: say what to remove: --keep N and/or --max-age AGE",
              file=sys.stderr)
        return 2
    if args.keep is not None and args.keep < 0:
        print("sidecar-debug results prune: --keep must be 0 or more", file=sys.stderr)
        return 2
    if _no_directory(args):
        return 2
    removed = Store(args.dir).prune(keep=args.keep, max_age=args.max_age,
                                    now=datetime.now(UTC))
    for run in removed:
        print(f"removed {run.id}")
    return 0
