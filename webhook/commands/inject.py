"""`sidecar-debug inject -f FILE|-`: offline injection, like `istioctl kube-inject`.

Pods and the pod templates of workloads are injected; every other document, and every workload
that is not injected, is copied byte for byte. Injected documents keep their comments, key
order and styles (webhook.manifest_yaml). Running it on its own output changes nothing (the
status annotation makes it idempotent); running it again with other options is refused for the
pods already injected. A document that cannot be read or injected is reported with its line
and copied unchanged, the others go on; the exit code is then 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import BinaryIO, TextIO

from webhook import manifest_yaml
from webhook.commands.errors import EXIT_FAILED, EXIT_USAGE
from webhook.config import Settings, load_settings
from webhook.errors import SettingsError
from webhook.inject.workloads import WORKLOAD_KINDS, Outcome, inject_workload

DESCRIPTION = """\
Inject the debug sidecar into Pods and the pod templates of Deployments, StatefulSets,
DaemonSets, ReplicaSets, ReplicationControllers, Jobs and CronJobs (and Lists of them) in
multi-document YAML, as the webhook would (no policy or RBAC check runs offline).

The output differs from the input only by the injection: other documents, and workloads that
are not injected (excluded namespace, opted out, already injected, ...), are copied byte for
byte, with a line on stderr saying why a workload was left alone; injected documents keep their
comments, key order and quoting. YAML is read as kubectl reads it (YAML 1.2 core schema:
`12:30` stays a string; a duplicate key is an error).

Running it on its output again changes nothing. A pod already injected is not re-injected with
another --profile, --runtime or --mode: that is refused (exit 1), because the hints and mounts
added to the app's containers cannot be told apart from the manifest's own; inject the original
manifest instead. A document that cannot be read or injected is reported (file:line) and copied
unchanged; the others are still written, and the exit code is 1. Exit 2: a usage error.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "inject",
        help="inject the debug sidecar into manifests offline (stdout)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-f", "--filename", required=True, help="YAML file, or - for stdin")
    parser.add_argument(
        "--profile",
        help="debug profile for every injected pod (default: each pod's annotation, then the "
        "settings' default)",
    )
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


def check_options(settings: Settings, profile: str | None, runtime: str | None) -> str | None:
    """Why --profile or --runtime cannot be used, or None (a usage error: nothing is read)."""
    if profile is not None and profile.strip() not in settings.profiles:
        known = ", ".join(sorted(settings.profiles))
        return (
            f"--profile {profile!r} is not a debug profile; known profiles: {known}. Choose one, "
            f"or leave --profile out to use each pod's annotation or the default "
            f"{settings.default_profile!r}"
        )
    runtimes = settings.profile_set.runtimes
    if runtime is not None and runtime.strip() not in runtimes:
        return (
            f"--runtime {runtime!r} is not a runtime with hints; known runtimes: "
            f"{', '.join(sorted(runtimes))}. Leave --runtime out to add no environment hints"
        )
    return None


class Reporter:
    """One line per problem or skipped workload on stderr, `NAME:LINE: document N, WHAT: ...`."""

    def __init__(self, name: str, err: TextIO) -> None:
        self.name = name
        self.err = err
        self.failed = 0  # documents with a problem

    def say(self, chunk: manifest_yaml.Chunk, text: str, line: int | None = None) -> None:
        where = f"{self.name}:{line or chunk.line}: document {chunk.index}"
        print(f"sidecar-debug: {where}{text}", file=self.err)

    def problem(self, chunk: manifest_yaml.Chunk, problem: manifest_yaml.Problem) -> None:
        self.failed += 1
        self.say(chunk, f": {problem.message} (copied unchanged)", problem.line)

    def outcomes(self, chunk: manifest_yaml.Chunk, outcomes: list[Outcome]) -> None:
        failed = False
        for outcome in outcomes:
            for warning in outcome.warnings:
                self.say(chunk, f", {outcome.what}: warning: {warning}")
            if outcome.status == "skipped":
                self.say(
                    chunk, f", {outcome.what}: not injected (copied unchanged): {outcome.message}"
                )
            elif outcome.status == "refused":
                failed = True
                self.say(
                    chunk, f", {outcome.what}: cannot inject (copied unchanged): {outcome.message}"
                )
        self.failed += failed


def inject_bytes(
    data: bytes,
    name: str,
    settings: Settings,
    out: BinaryIO,
    err: TextIO,
    profile: str | None = None,
    runtime: str | None = None,
    mode: str | None = None,
) -> int:
    """Write `data` with every injectable pod injected to `out`; report to `err`. Returns the
    exit code: 0, or 1 when a document could not be read or injected (copied unchanged)."""
    try:
        manifest_yaml.check_encoding(data, name)
    except manifest_yaml.InputError as exc:
        print(f"sidecar-debug: {exc}", file=err)
        return EXIT_FAILED
    if data.startswith(manifest_yaml.UTF8_BOM):
        out.write(manifest_yaml.UTF8_BOM)
        data = data[len(manifest_yaml.UTF8_BOM) :]
    report = Reporter(name, err)
    chunks = manifest_yaml.split(data)
    for chunk in chunks:
        if chunk.index == 0:  # only comments or blank lines
            out.write(chunk.raw)
            continue
        try:
            text = manifest_yaml.decode(chunk)
            if manifest_yaml.scan(text, chunk) not in WORKLOAD_KINDS:
                out.write(chunk.raw)
                continue
            prefix, body, suffix = manifest_yaml.parts(text)
            plain = manifest_yaml.fast_load(body)
            document = None
            if plain is None:  # libyaml's constructors cannot: the round trip reads it
                document = manifest_yaml.load(text, chunk)
                plain = manifest_yaml.to_plain(document.tree)
            result = inject_workload(plain, settings, profile, runtime, mode)
            report.outcomes(chunk, result.outcomes)
            if not result.changed:
                out.write(chunk.raw)
                continue
            # Fast: libyaml writes the old and new objects, the changed lines are spliced into
            # the original text. Else the round trip (ruamel.yaml) writes the change.
            spliced = manifest_yaml.fast_write(body, plain, result.document)
            if spliced is not None:
                out.write((prefix + spliced + suffix).encode())
                continue
            if document is None:
                document = manifest_yaml.load(text, chunk)
                tree_plain = manifest_yaml.to_plain(document.tree)
                if tree_plain != plain:  # the two readers differ (should not): trust the tree
                    plain = tree_plain
                    result = inject_workload(plain, settings, profile, runtime, mode)
            try:
                written = manifest_yaml.write(document, plain, result.document)
            except ValueError:
                raise manifest_yaml.Problem(
                    chunk.line,
                    "the injection could not be written into this document's YAML (a bug in "
                    "sidecar-debug: please report it with the document)",
                ) from None
            out.write(written.encode())
        except manifest_yaml.Problem as problem:
            report.problem(chunk, problem)
            out.write(chunk.raw)
    out.flush()
    if report.failed:
        documents = sum(1 for c in chunks if c.index)
        print(
            f"sidecar-debug: {name}: {report.failed} of {documents} documents could not be read "
            "or injected (above); they were copied unchanged and every other document written",
            file=err,
        )
        return EXIT_FAILED
    return 0


def offline_settings(args: argparse.Namespace) -> Settings | None:
    """The settings of an offline command (--config, --toolset-image); None, said on stderr,
    when they are invalid."""
    try:
        return load_settings(args.config, overrides={"toolset_image": args.toolset_image})
    except SettingsError as exc:
        print(f"sidecar-debug: invalid settings: {exc}", file=sys.stderr)
        return None


def read_input(filename: str) -> tuple[str, bytes] | None:
    """(the name messages use, the bytes) of -f FILE or - (stdin); None, said on stderr, when
    it cannot be read."""
    try:
        if filename == "-":
            return "<stdin>", sys.stdin.buffer.read()
        with open(filename, "rb") as handle:
            return filename, handle.read()
    except OSError as exc:
        print(f"sidecar-debug: cannot read {filename}: {exc.strerror}", file=sys.stderr)
        return None


def run(args: argparse.Namespace) -> int:
    settings = offline_settings(args)
    if settings is None:
        return EXIT_USAGE
    usage = check_options(settings, args.profile, args.runtime)
    if usage is not None:
        print(f"sidecar-debug: inject: {usage}", file=sys.stderr)
        return EXIT_USAGE
    found = read_input(args.filename)
    if found is None:
        return EXIT_FAILED
    name, data = found
    return inject_bytes(
        data,
        name,
        settings,
        sys.stdout.buffer,
        sys.stderr,
        profile=args.profile.strip() if args.profile else None,
        runtime=args.runtime.strip() if args.runtime else None,
        mode=args.mode,
    )
