"""One table: which exception ends a command with which exit code and one-line message.

No command prints a traceback for a condition the user can fix (bad settings, no cluster
access, an unreadable file, a refused API call). Exceptions are matched by their class path
along the MRO, so this table imports nothing (the kubernetes client stays unloaded for `inject`).
Usage errors exit 2, as argparse's own do.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from webhook.wire.exits import (
    EXIT_API,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NO_TOOLSET,
    EXIT_OK,
    EXIT_PIPE,
    EXIT_USAGE,
)

# Every command's exit codes: `--help` shows this table (EPILOG), and so does the README.
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "done; for a check: everything passed"),
    (EXIT_FAILED, "the command ran and the answer is no, or it failed: a pod would be denied "
     "(guard check), a policy or schedule is invalid, a document could not be injected, a "
     "command in the pod failed"),
    (EXIT_USAGE, "nothing usable to work on: a usage error, an input that cannot be read "
     "(missing, unreadable, not UTF-8, not YAML, empty), invalid settings or kubeconfig"),
    (EXIT_NO_TOOLSET, "the pod has no toolset container to use (session commands)"),
    (EXIT_API, "the Kubernetes API refused the request or cannot be reached"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
    (EXIT_PIPE, "the reader of the output went away (e.g. `| head`)"),
)


EPILOG_TITLE = "exit codes (every command):"


def epilog(width: int = 79) -> str:
    """The exit-code table as `--help` prints it, wrapped here (HelpFormatter keeps it)."""
    import textwrap

    rows = [
        textwrap.fill(meaning, width, initial_indent=f"  {code:<5}", subsequent_indent=" " * 7)
        for code, meaning in EXIT_CODES
    ]
    return EPILOG_TITLE + "\n" + "\n".join(rows)


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, but the exit-code table keeps its lines."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(EPILOG_TITLE):
            return text
        return super()._fill_text(text, width, indent)


def add_epilog(parser: argparse.ArgumentParser) -> None:
    """The exit-code table under `parser`'s help and every subcommand's, recursively."""
    for each in walk(parser):
        if each.epilog is None:
            each.epilog = epilog()
        if each.formatter_class is argparse.HelpFormatter:
            each.formatter_class = HelpFormatter


def walk(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """`parser` and every parser under it (subcommands), depth first, each once."""
    found: list[argparse.ArgumentParser] = []
    stack = [parser]
    while stack:
        current = stack.pop()
        if any(current is seen for seen in found):
            continue
        found.append(current)
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(reversed(list(dict.fromkeys(action.choices.values()))))
    return found


@dataclass(frozen=True)
class ExitRule:
    exit_code: int
    label: str  # prefix of the one-line message; "" = the exception's text alone


# The first class on the exception's MRO that is listed wins (PolicyError before SettingsError).
ERRORS: dict[str, ExitRule] = {
    "webhook.policy.loader.PolicyError": ExitRule(EXIT_USAGE, "invalid policy"),
    "webhook.errors.SettingsError": ExitRule(EXIT_USAGE, "invalid settings"),
    "webhook.results.export.settings.ExportSettingsError": ExitRule(EXIT_USAGE,
                                                                    "invalid export settings"),
    "webhook.kube.client.KubeConfigError": ExitRule(EXIT_USAGE, "Kubernetes configuration"),
    "webhook.inject.workloads.InjectError": ExitRule(EXIT_FAILED, ""),
    "webhook.stacks.InputError": ExitRule(EXIT_USAGE, ""),
    "webhook.commands.files.InputsError": ExitRule(EXIT_USAGE, ""),
    "webhook.certs.pki.CertificateError": ExitRule(EXIT_FAILED, "certificates"),
    "webhook.kube.secrets.ConflictError": ExitRule(EXIT_FAILED, "conflict (retry)"),
    "webhook.kube.secrets.StoreError": ExitRule(EXIT_API, "Kubernetes API"),
    "webhook.kube.access.ClusterAPIError": ExitRule(EXIT_API, "Kubernetes API"),
    "kubernetes.client.exceptions.ApiException": ExitRule(EXIT_API, "Kubernetes API"),
    "urllib3.exceptions.HTTPError": ExitRule(EXIT_API, "Kubernetes API unreachable"),
    # A file that cannot be read or written: the user fixes the path (as `-f` input does).
    "builtins.OSError": ExitRule(EXIT_USAGE, ""),
}


def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _api_message(body: object) -> str:
    """The apiserver's own explanation in an error answer (a Status object's `message`, e.g.
    `secrets is forbidden: User "x" cannot create ...`), "" when there is none."""
    import json

    try:
        status = json.loads(body) if isinstance(body, (str, bytes)) and body else None
    except ValueError:
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    return " ".join(str(message).split()) if message else ""


def _message(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    if _class_path(type(exc)).startswith("kubernetes.") and status is not None:
        explanation = _api_message(getattr(exc, "body", None))
        return f"HTTP {status} {reason or ''}".strip() + (f": {explanation}" if explanation else "")
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror}"
    # One line, except PolicyError's one `file:line: path: problem` line per problem.
    return str(exc).strip() or type(exc).__name__


def handle(exc: BaseException) -> int | None:
    """Print the one-line message for `exc` and return the exit code; None when not listed
    (a bug: the caller re-raises, so the traceback shows where)."""
    code = getattr(exc, "code", None)
    if _class_path(type(exc)) == "webhook.sessions.session.SessionError" and isinstance(code, int):
        print(f"sidecar-debug: {exc}", file=sys.stderr)
        return code
    for cls in type(exc).__mro__:
        rule = ERRORS.get(_class_path(cls))
        if rule is not None:
            label = f"{rule.label}: " if rule.label else ""
            print(f"sidecar-debug: {label}{_message(exc)}", file=sys.stderr)
            return rule.exit_code
    return None
