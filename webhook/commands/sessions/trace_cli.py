"""`sidecar-debug trace POD`: LTTng user-space events, or with --function/--offset uprobes on a
function (the logic is in webhook.sessions.session.trace and .uprobe)."""

from __future__ import annotations

import argparse
from pathlib import Path

from webhook.commands.sessions import common
from webhook.sessions import session as sessions


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tracer = subparsers.add_parser(
        "trace", parents=common.recording_options(),
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
        return common.run(args, lambda session: sessions.uprobe(session, arguments, args.seconds))
    return common.run(args, lambda session: sessions.trace(
        session, seconds=args.seconds, events=args.events, domains=args.domain,
        output=args.output, keep_remote=args.keep_remote, force=args.force))
