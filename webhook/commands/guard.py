"""`sidecar-debug guard check -f FILE|- [--level baseline|restricted] [--version v1.N|latest]`:
the guard, offline.

Every Pod and pod template of workloads (and Lists of them) in a multi-document YAML stream is
checked as the validating webhook checks it (webhook.guard.check.evaluate): the Pod Security
Standards on every container, except our toolset where it is exactly what sidecar-debug builds.
Offline nobody can be asked whether the pod's creator holds a profile's grant: a verified
toolset is then reported, not refused. Documents are read as `inject` reads them
(webhook.manifest_yaml), aliases bounded the same way.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

import yaml

from webhook import manifest_yaml
from webhook.commands import files, output
from webhook.commands.inject import offline_settings
from webhook.config import Settings
from webhook.guard import check, pss
from webhook.inject.workloads import WORKLOAD_KINDS, pod_templates
from webhook.wire import constants
from webhook.wire.exits import EXIT_FAILED, EXIT_USAGE

DESCRIPTION = """\
Check Pods and the pod templates of Deployments, StatefulSets, DaemonSets, ReplicaSets,
ReplicationControllers, Jobs and CronJobs (and Lists of them) in multi-document YAML against
the Pod Security Standards, as sidecar-debug's validating webhook does in the namespaces it
guards: every container, init container and ephemeral container, and the pod's own fields.

The one exception is sidecar-debug's toolset: a container that is exactly what the injector
or `attach` builds for its profile. Offline, whether its creator holds the profile's RBAC grant
cannot be checked: it is reported as a note, and the webhook checks it at admission. A
container that runs the toolset image but is not the toolset, or a status annotation that
claims an injection no toolset backs, is a violation.

Each violation is one line: FILE:LINE: document N, KIND 'NAME': FIELD: REASON: MESSAGE, then
Pod Security admission's own message for each pod that would be denied.

-f is repeatable and takes - (stdin) and directories (-R: with subdirectories), as kubectl.
-o json|yaml writes one GuardCheck object (docs/cli.md) instead of the lines.

Exit 0: every pod would be admitted. 1: at least one would be denied. 2: the input (or part
of it) cannot be read (the rest is still checked), has no object at all, or a usage error.
"""

_TOKEN = re.compile(r'\.?([A-Za-z0-9_]+)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    guard = subparsers.add_parser(
        "guard",
        help="the validating guard (Pod Security Standards but for the toolset), offline",
        description="The validating guard's checks, offline. See docs/policy.md.",
    )
    guard.set_defaults(func=lambda _args: _usage(guard))
    commands = guard.add_subparsers(dest="guard_command", metavar="SUBCOMMAND")
    parser = commands.add_parser(
        "check",
        help="check manifests as the guard would (exit 1 when a pod would be denied)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    files.add_filename(parser, "the manifests to check")
    parser.add_argument(
        "--level",
        choices=pss.LEVELS,
        default="baseline",
        help="Pod Security Standards level (default: baseline, the guard's default)",
    )
    parser.add_argument(
        "--version",
        dest="pss_version",
        type=_policy_version,
        default=pss.resolve(),
        metavar="v1.N|latest",
        help="Pod Security policy version, as the namespace label "
        f"{constants.LABEL_POD_SECURITY_ENFORCE_VERSION} names it (default: latest, "
        f"{pss.NEWEST}; a newer version applies {pss.NEWEST}'s checks)",
    )
    parser.add_argument("--config", help="settings file, as for `serve` (profiles, image)")
    parser.add_argument("--toolset-image", help="the toolset image the webhook injects")
    output.add_output(parser)
    parser.set_defaults(func=run)


def _policy_version(text: str) -> pss.PolicyVersion:
    """--version: `latest` or `v1.N`; anything else is a usage error that says why (offline,
    the person can fix it now; the webhook reads a bad namespace label as latest, as PSA)."""
    try:
        return pss.resolve(pss.parse_version(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def field_line(root: Any, path: str) -> int:
    """The 0-based line, in the document, of the deepest node of `path` that `root` (the
    document's libyaml node tree) has: a missing field is reported at its parent."""
    if root is None:
        return 0
    node = root
    line = int(node.start_mark.line)
    for match in _TOKEN.finditer(path):
        name, index, quoted = match.groups()
        if isinstance(node, yaml.MappingNode):
            key = json.loads(quoted) if quoted is not None else name
            found = next((pair for pair in node.value if pair[0].value == key), None)
            if found is None:
                break
            line, node = int(found[0].start_mark.line), found[1]
        elif (
            isinstance(node, yaml.SequenceNode)
            and index is not None
            and int(index) < len(node.value)
        ):
            node = node.value[int(index)]
            line = int(node.start_mark.line)
        else:
            break
    return line


def check_bytes(
    data: bytes,
    name: str,
    settings: Settings,
    level: pss.Level,
    out: TextIO,
    err: TextIO,
    report: Report | None = None,
    version: pss.PolicyVersion | None = None,
) -> int:
    """Check every pod in `data`; report to `out` (violations) and `err` (what cannot be read,
    the summary), and into `report` (for -o json|yaml). Returns the exit code."""
    report = report if report is not None else Report()
    version = version or pss.resolve()
    try:
        manifest_yaml.check_encoding(data, name)
    except manifest_yaml.InputError as exc:
        print(f"sidecar-debug: {exc}", file=err)
        report.unreadable.append({"file": name, "line": 1, "message": str(exc)})
        return EXIT_USAGE
    if data.startswith(manifest_yaml.UTF8_BOM):
        data = data[len(manifest_yaml.UTF8_BOM) :]
    unreadable = denied = checked = 0
    documents_before = report.documents
    for chunk in manifest_yaml.split(data):
        if not chunk.index:
            continue
        report.documents += manifest_yaml.has_content(chunk)
        where = f"{name}:{{line}}: document {chunk.index}"
        try:
            text = manifest_yaml.decode(chunk)
            if manifest_yaml.scan(text, chunk) not in WORKLOAD_KINDS:
                continue
            prefix, body, _ = manifest_yaml.parts(text)
            plain = manifest_yaml.fast_load(body)
            if plain is None:  # libyaml's constructors cannot: the round trip reads it
                plain = manifest_yaml.to_plain(manifest_yaml.load(text, chunk).tree)
        except manifest_yaml.Problem as problem:
            unreadable += 1
            print(f"sidecar-debug: {where.format(line=problem.line)}: {problem.message}", file=err)
            report.unreadable.append({"file": name, "line": problem.line,
                                      "document": chunk.index, "message": problem.message})
            continue
        root = manifest_yaml.compose(body)  # line numbers, from libyaml's nodes
        base = chunk.input_line(prefix.count("\n"))
        for found in pod_templates(plain):
            at = where.format(line=base + field_line(root, found.path.rstrip(".")))
            pod_line = base + field_line(root, found.path.rstrip("."))
            if found.pod is None:
                unreadable += 1
                print(f"sidecar-debug: {at}, {found.what}: {found.problem}", file=err)
                report.unreadable.append({"file": name, "line": pod_line,
                                          "document": chunk.index,
                                          "message": f"{found.what}: {found.problem}"})
                continue
            checked += 1
            result = check.evaluate(found.pod, settings, level, None, None, version)
            violations: list[dict[str, Any]] = []
            for violation in result.violations:
                path = found.path + violation.field
                line = base + field_line(root, path)
                print(
                    f"{where.format(line=line)}, {found.what}: {path}: {violation.reason}: "
                    f"{violation.message}",
                    file=out,
                )
                violations.append({"field": path, "line": line, "reason": violation.reason,
                                   "message": violation.message})
            notes = list(result.notes())
            for note in notes:
                print(f"{at}, {found.what}: note: {note}", file=out)
            if not result.allowed:
                denied += 1
                print(f"{at}, {found.what}: would be denied: {result.message()}", file=out)
            report.pods.append({
                "file": name, "line": pod_line, "document": chunk.index, "object": found.what,
                "allowed": result.allowed, "violations": violations, "notes": notes,
                "message": "" if result.allowed else result.message(),
            })
    if report.documents == documents_before and not unreadable:
        return 0  # no object at all: the caller says so (and fails when no input has one)
    summary = (
        f"sidecar-debug: {name}: {denied} of {checked} pods and pod templates would be "
        f"denied at level {level}:{version.label()}"
    )
    if unreadable:
        summary += f"; {unreadable} documents or templates could not be read (above)"
    print(summary, file=err)
    if unreadable:
        return EXIT_USAGE
    return EXIT_FAILED if denied else 0


@dataclass
class Report:
    """What `guard check` found, for -o json|yaml (docs/cli.md: kind GuardCheck)."""

    documents: int = 0
    pods: list[dict[str, Any]] = field(default_factory=list)
    unreadable: list[dict[str, Any]] = field(default_factory=list)


def run(args: argparse.Namespace) -> int:
    settings = offline_settings(args)
    if settings is None:
        return EXIT_USAGE
    inputs = files.read_all(args.filename, args.recursive)  # InputsError: one line, exit 2
    report = Report()
    text = args.output == "text"
    out = sys.stdout if text else io.StringIO()
    codes = []
    for each in inputs:
        before = report.documents
        codes.append(check_bytes(each.data, each.name, settings, args.level, out, sys.stderr,
                                 report, args.pss_version))
        if report.documents == before and not codes[-1] and len(inputs) > 1:
            print(f"sidecar-debug: {each.name}: no objects (the input is empty or only "
                  "comments)", file=sys.stderr)
    code = max(codes)
    if not report.documents and not code:
        names = ", ".join(each.name for each in inputs)
        print(f"sidecar-debug: guard check: no objects in {names}: nothing to check",
              file=sys.stderr)
        code = EXIT_USAGE
    if not text:
        denied = sum(1 for pod in report.pods if not pod["allowed"])
        output.emit(output.document(
            "GuardCheck", level=args.level, version=args.pss_version.label(),
            files=[each.name for each in inputs],
            allowed=code == 0, checked=len(report.pods), denied=denied,
            pods=report.pods, unreadable=report.unreadable), args.output)
    return code
