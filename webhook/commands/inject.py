"""`sidecar-debug inject -f FILE|-`: offline injection, like `istioctl kube-inject`.

Pods and the pod templates of workloads are injected; every other document, and every workload
that is not injected, is copied byte for byte. Injected documents keep their comments, key
order and styles (webhook.manifest_yaml). Running it on its own output changes nothing (the
status annotation makes it idempotent); running it again with other options is refused for the
pods already injected. A document that cannot be read or injected is reported with its line
and copied unchanged, the others go on; the exit code is then 2 (cannot be read) or 1 (cannot
be injected). JSON input stays JSON (a changed document is written with its own indentation);
`-o yaml|json` chooses one format for everything.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
from dataclasses import dataclass
from typing import Any, BinaryIO, TextIO

from webhook import manifest_yaml
from webhook.commands import files
from webhook.config import Settings, load_settings
from webhook.errors import SettingsError
from webhook.inject.workloads import WORKLOAD_KINDS, Outcome, inject_workload
from webhook.wire.exits import EXIT_FAILED, EXIT_USAGE

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
unchanged; the others are still written, and the exit code is 2 (a document cannot be read) or
1 (a document cannot be injected).

-f takes files, - (stdin) and directories (their .json, .yaml and .yml files, by name; -R:
subdirectories too), repeated as often as needed: the output is one stream, the inputs in
order, separated by `---`. JSON input stays JSON, indented as it was; -o yaml or -o json
writes everything in one format (-o json: one object, or a v1 List of all of them, as
`kubectl -o json` does). An input without any document is said on stderr; when no input has
one, inject fails (exit 2), as `kubectl apply` does.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "inject",
        help="inject the debug sidecar into manifests offline (stdout)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    files.add_filename(parser, "the manifests to inject")
    parser.add_argument(
        "-o", "--output", choices=("yaml", "json"),
        help="the output documents' format (default: each input's own, YAML stays YAML byte "
        "for byte and JSON stays JSON); yaml: JSON input written as YAML; json: every "
        "document as JSON, several as a v1 List",
    )
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
        self.unreadable = 0  # documents that cannot be read (exit 2)
        self.failed = 0  # documents that cannot be injected (exit 1)
        self.documents = 0
        self.not_text = False  # the whole input is no UTF-8 text (said in one line; exit 2)

    def say(self, chunk: manifest_yaml.Chunk, text: str, line: int | None = None) -> None:
        where = f"{self.name}:{line or chunk.line}: document {chunk.index}"
        print(f"sidecar-debug: {where}{text}", file=self.err)

    def problem(self, chunk: manifest_yaml.Chunk, problem: manifest_yaml.Problem) -> None:
        self.unreadable += 1
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

    def exit_code(self) -> int:
        """2 when a document cannot be read, else 1 when one cannot be injected, else 0."""
        if self.not_text:
            return EXIT_USAGE
        if self.unreadable or self.failed:
            print(
                f"sidecar-debug: {self.name}: {self.unreadable + self.failed} of "
                f"{self.documents} documents could not be read or injected (above); they were "
                "copied unchanged and every other document written",
                file=self.err,
            )
        return EXIT_USAGE if self.unreadable else EXIT_FAILED if self.failed else 0


@dataclass(frozen=True)
class Options:
    profile: str | None = None
    runtime: str | None = None
    mode: str | None = None


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
    exit code: 0; 1 when a document could not be injected, 2 when one could not be read (both
    copied unchanged)."""
    return inject_input(data, name, settings, out, err, Options(profile, runtime, mode)).exit_code()


def inject_input(
    data: bytes, name: str, settings: Settings, out: BinaryIO, err: TextIO, options: Options
) -> Reporter:
    """inject_bytes' work; the Reporter holds what happened (documents, problems)."""
    report = Reporter(name, err)
    try:
        manifest_yaml.check_encoding(data, name)
    except manifest_yaml.InputError as exc:
        print(f"sidecar-debug: {exc}", file=err)
        report.not_text = True
        return report
    stream = json_stream(data)
    if stream is not None:
        _inject_json(data, stream, settings, out, report, options)
        return report
    if data.startswith(manifest_yaml.UTF8_BOM):
        out.write(manifest_yaml.UTF8_BOM)
        data = data[len(manifest_yaml.UTF8_BOM) :]
    profile, runtime, mode = options.profile, options.runtime, options.mode
    chunks = manifest_yaml.split(data)
    report.documents = sum(1 for c in chunks if manifest_yaml.has_content(c))
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
    return report


# -- JSON input stays JSON ----------------------------------------------------------------------


@dataclass(frozen=True)
class JSONValue:
    value: Any
    start: int  # offsets in the text
    end: int
    line: int  # 1-based


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise ValueError("duplicate key")  # the YAML reader then reports it with both lines
    return found


def json_stream(data: bytes) -> list[JSONValue] | None:
    """The JSON values of an input that is one or more JSON documents (as `kubectl get -o json`
    writes, or a stream of them); None for anything else, which is read as YAML (a JSON
    document with an error or a duplicate key too: the YAML reader names its line)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    if text.lstrip()[:1] not in ("{", "["):
        return None
    decoder = json.JSONDecoder(object_pairs_hook=_no_duplicates)
    values: list[JSONValue] = []
    position = 0
    while True:
        while position < len(text) and text[position] in " \t\r\n":
            position += 1
        if position == len(text):
            return values
        try:
            value, end = decoder.raw_decode(text, position)
        except ValueError:
            return None
        values.append(JSONValue(value, position, end, text.count("\n", 0, position) + 1))
        position = end


def _json_text(value: Any, original: str) -> str:
    """`value` written as `original` was: indented with its indent (kubectl's 4 spaces when it
    has none), or on one line."""
    if "\n" not in original.strip():
        compact = ", " not in original and ": " not in original
        separators = (",", ":") if compact else (", ", ": ")
        return json.dumps(value, ensure_ascii=False, separators=separators)
    indent: str | int = 4
    match = re.search(r"\n([ \t]+)\S", original)
    if match:
        indent = match.group(1) if "\t" in match.group(1) else len(match.group(1))
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _inject_json(
    data: bytes,
    stream: list[JSONValue],
    settings: Settings,
    out: BinaryIO,
    report: Reporter,
    options: Options,
) -> None:
    """Inject each JSON document; those not changed are copied byte for byte, the others
    rewritten as JSON with their own indentation."""
    text = data.decode("utf-8-sig")
    report.documents = len(stream)
    pieces: list[str] = []
    position = 0
    for index, found in enumerate(stream, 1):
        chunk = manifest_yaml.Chunk(b"", found.line, found.line, index)
        result = inject_workload(
            found.value, settings, options.profile, options.runtime, options.mode
        )
        report.outcomes(chunk, result.outcomes)
        pieces.append(text[position : found.start])
        original = text[found.start : found.end]
        pieces.append(_json_text(result.document, original) if result.changed else original)
        position = found.end
    pieces.append(text[position:])
    written = "".join(pieces)
    if written == text:
        out.write(data)
    else:
        bom = manifest_yaml.UTF8_BOM if data.startswith(manifest_yaml.UTF8_BOM) else b""
        out.write(bom + written.encode())
    out.flush()


def offline_settings(args: argparse.Namespace) -> Settings | None:
    """The settings of an offline command (--config, --toolset-image); None, said on stderr,
    when they are invalid."""
    try:
        return load_settings(args.config, overrides={"toolset_image": args.toolset_image})
    except SettingsError as exc:
        print(f"sidecar-debug: invalid settings: {exc}", file=sys.stderr)
        return None


def run(args: argparse.Namespace) -> int:
    settings = offline_settings(args)
    if settings is None:
        return EXIT_USAGE
    usage = check_options(settings, args.profile, args.runtime)
    if usage is not None:
        print(f"sidecar-debug: inject: {usage}", file=sys.stderr)
        return EXIT_USAGE
    inputs = files.read_all(args.filename, args.recursive)  # InputsError: one line, exit 2
    options = Options(
        profile=args.profile.strip() if args.profile else None,
        runtime=args.runtime.strip() if args.runtime else None,
        mode=args.mode,
    )
    return inject_inputs(inputs, settings, options, args.output, sys.stdout.buffer, sys.stderr)


def inject_inputs(
    inputs: list[files.Input],
    settings: Settings,
    options: Options,
    output: str | None,
    out: BinaryIO,
    err: TextIO,
) -> int:
    """Inject every input in order and write them as one stream to `out`: each in its own
    format (output None), or all as YAML or as JSON (one object, or a List of them). The exit
    code is the worst of the inputs'; an input with no object is said on `err`, and when no
    input has one, that is an error (exit 2), as kubectl's `apply` says it."""
    codes: list[int] = []
    documents = 0
    results: list[tuple[bool, bytes]] = []  # (JSON?, the injected bytes)
    for each in inputs:
        buffer = io.BytesIO()
        report = inject_input(each.data, each.name, settings, buffer, err, options)
        codes.append(report.exit_code())
        documents += report.documents
        if not report.documents and not report.not_text and len(inputs) > 1:
            print(f"sidecar-debug: {each.name}: no objects (the input is empty or only "
                  "comments)", file=err)
        results.append((json_stream(buffer.getvalue()) is not None, buffer.getvalue()))
    if output == "json":
        out.write(_as_json(results).encode())
    else:
        previous: bytes | None = None
        previous_json = False
        for is_json, data in results:
            if output == "yaml" and is_json:
                data = "---\n".join(manifest_yaml.dump_plain(v.value)
                                     for v in json_stream(data) or []).encode()
                is_json = False
            if previous is not None and data.strip():
                if not previous.endswith(b"\n"):
                    out.write(b"\n")
                if not (is_json and previous_json) and not _STARTS_WITH_MARKER.match(data):
                    out.write(b"---\n")
            out.write(data)
            if data.strip():
                previous, previous_json = data, is_json
    out.flush()
    if not documents and not any(codes):
        names = ", ".join(each.name for each in inputs)
        print(f"sidecar-debug: inject: no objects in {names}: nothing to inject (give "
              "manifests with at least one document)", file=err)
        return EXIT_USAGE
    return max(codes, default=0)


_STARTS_WITH_MARKER = re.compile(rb"(?:[ \t]*(?:#[^\n]*)?\r?\n)*---(?:[ \t\r\n]|\Z)")


def _as_json(results: list[tuple[bool, bytes]]) -> str:
    """All documents as JSON: the one object, or a `List` of them (as `kubectl -o json`)."""
    values: list[Any] = []
    for is_json, data in results:
        if is_json:
            values.extend(v.value for v in json_stream(data) or [])
        else:
            values.extend(manifest_yaml.plain_documents(data))
    if not values:
        return ""
    document = values[0] if len(values) == 1 else {
        "apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": values}
    return json.dumps(document, indent=4, ensure_ascii=False) + "\n"
