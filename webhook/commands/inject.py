"""`sidecar-debug inject -f FILE|-`: offline injection, like `istioctl kube-inject`.

Pods and the pod templates of workloads are injected; every other document passes through.
Running it on its own output changes nothing (the status annotation makes it idempotent).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any, TextIO

import yaml

from webhook.config import Settings, SettingsError, load_settings
from webhook.inject.workloads import InjectError, inject_document


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "inject",
        help="inject the debug sidecar into manifests offline (stdout)",
        description="Inject the debug sidecar into Pods and pod templates of Deployments, "
        "StatefulSets, DaemonSets, ReplicaSets, Jobs and CronJobs in multi-document YAML. "
        "Other documents pass through unchanged. No policy or RBAC check runs offline.",
    )
    parser.add_argument("-f", "--filename", required=True, help="YAML file, or - for stdin")
    parser.add_argument("--profile", help="debug profile (default: annotation, then settings)")
    parser.add_argument(
        "--runtime", help="app runtime for environment hints: dotnet, node, python, java"
    )
    parser.add_argument(
        "--mode",
        choices=["injected", "standby"],
        help="injected (toolset sidecar) or standby (only the wiring; `attach` adds the toolset "
        "later); default: the annotation, then the defaultMode setting",
    )
    parser.add_argument("--config", help="settings file, as for `serve`")
    parser.add_argument("--toolset-image", help="toolset image to inject")
    parser.set_defaults(func=run)


def inject_stream(
    stream: TextIO,
    settings: Settings,
    profile: str | None = None,
    runtime: str | None = None,
    mode: str | None = None,
) -> Iterator[Any]:
    for document in yaml.safe_load_all(stream):
        if document is not None:
            yield inject_document(document, settings, profile, runtime, mode)


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config, overrides={"toolset_image": args.toolset_image})
    except SettingsError as exc:
        print(f"sidecar-debug: invalid settings: {exc}", file=sys.stderr)
        return 2
    try:
        if args.filename == "-":
            documents = list(
                inject_stream(sys.stdin, settings, args.profile, args.runtime, args.mode)
            )
        else:
            with open(args.filename) as handle:
                documents = list(
                    inject_stream(handle, settings, args.profile, args.runtime, args.mode)
                )
    except OSError as exc:
        print(f"sidecar-debug: cannot read {args.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    except yaml.YAMLError as exc:
        print(f"sidecar-debug: {args.filename} is not valid YAML: {exc}", file=sys.stderr)
        return 1
    except InjectError as exc:
        print(f"sidecar-debug: {exc}", file=sys.stderr)
        return 1
    yaml.safe_dump_all(documents, sys.stdout, sort_keys=False, default_flow_style=False)
    return 0
