"""`sidecar-debug doctor POD`: which debugging techniques work in the pod, and why the others
do not (the logic is in webhook.sessions.session.doctor and the toolset's doctor script)."""

from __future__ import annotations

import argparse

from webhook.commands import output as printed
from webhook.commands.sessions import common
from webhook.sessions import session as sessions


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    doc = subparsers.add_parser(
        "doctor", parents=[common.session_options()],
        help="say which debugging techniques work in a pod, and why the others do not")
    printed.add_output(doc, json_alias=True)
    doc.add_argument("--expect", metavar="LIST", help="techniques that must work (exit 1 if not)")
    doc.set_defaults(func=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    return common.run(args, lambda session: sessions.doctor(
        session, as_json=args.output == "json", as_yaml=args.output == "yaml",
        expect=args.expect))
