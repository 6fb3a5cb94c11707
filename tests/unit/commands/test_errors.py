"""Commands end with an exit code and a one-line message, never a traceback, for what the user
can fix; a bug still shows its traceback."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from webhook.commands import errors
from webhook.commands.cli import main
from webhook.wire import exits


def test_certs_ensure_with_a_bad_kubeconfig_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["certs", "ensure", "--namespace", "tools"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sidecar-debug: Kubernetes configuration: ")
    assert str(kubeconfig) in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_unreadable_input_names_the_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "inspect", "/nonexistent/tls.crt"]) == 2
    err = capsys.readouterr().err
    assert "/nonexistent/tls.crt" in err and "Traceback" not in err


def test_the_table_matches_along_the_class_hierarchy(capsys: pytest.CaptureFixture[str]) -> None:
    from webhook.errors import SettingsError
    from webhook.policy.loader import PolicyError, Problem

    assert errors.handle(SettingsError("port: not a number")) == 2
    assert capsys.readouterr().err == "sidecar-debug: invalid settings: port: not a number\n"
    problem = Problem("p.yaml", 3, "spec.rules[0]", "unknown key")
    assert errors.handle(PolicyError([problem])) == 2
    assert capsys.readouterr().err.startswith("sidecar-debug: invalid policy: p.yaml:3: ")
    assert errors.handle(FileNotFoundError(2, "No such file or directory", "x.yaml")) == 2
    assert capsys.readouterr().err == "sidecar-debug: x.yaml: No such file or directory\n"


def test_a_refused_api_call_says_what_the_apiserver_said(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kubernetes.client.exceptions import ApiException

    refused = ApiException(status=403, reason="Forbidden")
    refused.body = ('{"kind":"Status","message":"secrets is forbidden: User \\"dev\\" cannot '
                    'create resource \\"secrets\\" in the namespace \\"tools\\"","code":403}')
    assert errors.handle(refused) == exits.EXIT_API
    assert capsys.readouterr().err == (
        'sidecar-debug: Kubernetes API: HTTP 403 Forbidden: secrets is forbidden: User "dev" '
        'cannot create resource "secrets" in the namespace "tools"\n')
    bare = ApiException(status=500, reason="Internal Server Error")
    bare.body = "<html>oops</html>"
    assert errors.handle(bare) == exits.EXIT_API
    assert capsys.readouterr().err == (
        "sidecar-debug: Kubernetes API: HTTP 500 Internal Server Error\n")


def test_a_bug_is_not_hidden() -> None:
    assert errors.handle(KeyError("oops")) is None


# --- every command, given what a user gets wrong, answers in one line -------------------------

MISSING = "/nonexistent/input.yaml"
# (command path, arguments after it, exit code, text the message must contain); `{tmp}` is a
# fresh directory, `{kubeconfig}` the unusable kubeconfig that $KUBECONFIG names. A command
# added to the CLI without a case here fails test_every_command_has_a_bad_input_case.
BAD_INPUT: list[Any] = [
    ("serve", ["--config", MISSING], 2, MISSING),
    ("serve", ["--tls-cert-file", MISSING, "--tls-key-file", MISSING], 1,
     f"tlsCertFile {MISSING} does not exist"),
    ("serve", ["--tls-cert-file", "{tmp}/garbage", "--tls-key-file", "{tmp}/garbage"], 1,
     "tlsCertFile {tmp}/garbage: not a PEM certificate"),
    ("inject", ["-f", MISSING], 2, MISSING),
    ("guard check", ["-f", MISSING], 2, MISSING),
    ("certs generate", ["--service", "s", "--namespace", "n", "--out", "{tmp}/garbage/out"], 2,
     "{tmp}/garbage"),
    ("certs inspect", [MISSING], 2, MISSING),
    ("certs verify", ["--ca", MISSING, "--cert", MISSING], 2, MISSING),
    ("certs ensure", ["--namespace", "tools"], 2, "{kubeconfig}"),
    ("certs rotate", ["--force", "--namespace", "tools"], 2, "{kubeconfig}"),
    ("policy check", [MISSING], 2, MISSING),
    ("policy explain", ["--namespace", "x", "--policy", MISSING], 2, MISSING),
    ("policy explain", ["--namespace", "x", "--config", MISSING], 2, MISSING),
    ("policy schema", ["--bogus-flag"], 2, "unrecognized arguments"),
    ("flamegraph", ["pod"], 2, "{kubeconfig}"),
    ("trace", ["pod"], 2, "{kubeconfig}"),
    ("doctor", ["pod"], 2, "{kubeconfig}"),
    ("attach", ["pod"], 2, "{kubeconfig}"),
    ("trap", ["pod", "--cpu", "80"], 2, "{kubeconfig}"),
    ("sessions", [], 2, "{kubeconfig}"),
    ("schedule check", [MISSING], 2, MISSING),
    ("controller", ["--policy", MISSING], 2, MISSING),
    ("controller", [], 2, "{kubeconfig}"),
    ("results serve", ["--dir", MISSING], 2, f"{MISSING} is not a directory"),
    ("results list", ["--dir", MISSING], 2, f"{MISSING} is not a directory"),
    ("results prune", ["--dir", MISSING, "--keep", "1"], 2, f"{MISSING} is not a directory"),
    ("results service", ["--dir", MISSING, "--audience", "a", "--tls-cert-file", MISSING,
                         "--tls-key-file", MISSING], 2, f"{MISSING} is not a directory"),
    ("results service", ["--dir", "{tmp}", "--audience", "a", "--tls-cert-file",
                         "{tmp}/garbage", "--tls-key-file", "{tmp}/garbage", "--tls-wait", "0"],
     2, "no usable serving certificate"),
    ("results open", [], 2, "{kubeconfig}"),
    ("version", ["--request-timeout", "soon"], 2, "invalid float value: 'soon'"),
    ("completion", ["tcsh"], 2, "invalid choice: 'tcsh'"),
    ("render", [MISSING], 2, f"cannot read {MISSING}: No such file or directory"),
    ("render", ["{tmp}"], 2, "cannot read {tmp}: Is a directory"),
    ("render", ["{tmp}/garbage", "-o", "{tmp}/page.html"], 2,
     "{tmp}/garbage: folded stacks: line 1: expected"),
]


def _leaf_commands() -> set[str]:
    """Every runnable command path of the CLI ("serve", "certs ensure", ...), from its parser."""
    from webhook.commands.cli import build_parser

    def walk(parser: argparse.ArgumentParser, prefix: str) -> set[str]:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions:
            return {prefix}
        return {path for name, sub in actions[0].choices.items()
                for path in walk(sub, f"{prefix} {name}".strip())}

    return walk(build_parser(), "")


def _case(case: Any) -> tuple[str, list[str], int, str]:
    values = case.values if hasattr(case, "values") else case  # pytest.param or a tuple
    return values[0], values[1], values[2], values[3]


def test_every_command_has_a_bad_input_case() -> None:
    assert _leaf_commands() == {_case(case)[0] for case in BAD_INPUT}


@pytest.fixture
def unusable_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config to fall back on
    return kubeconfig


@pytest.mark.parametrize(("command", "arguments", "code", "text"), BAD_INPUT,
                         ids=[f"{_case(c)[0]} {' '.join(_case(c)[1])}" for c in BAD_INPUT])
def test_bad_input_is_one_line_without_a_traceback(
    command: str, arguments: list[str], code: int, text: str, tmp_path: Path,
    unusable_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import os

    def no_exec(*args: object) -> None:
        raise AssertionError(f"{command} started a server: {args}")

    monkeypatch.setattr(os, "execve", no_exec)
    (tmp_path / "garbage").write_text("not a certificate\n")
    values = {"tmp": str(tmp_path), "kubeconfig": str(unusable_kubeconfig)}
    argv = [*command.split(), *(a.format(**values) for a in arguments)]
    got: int | str | None  # main's code, or SystemExit's (an int from argparse)
    try:
        got = main(argv)
    except SystemExit as exit_:  # argparse's own usage errors
        got = exit_.code
    err = capsys.readouterr().err
    assert got == code, err
    assert "Traceback" not in err
    assert text.format(**values) in err
    lines = err.splitlines()
    if code != 2 or "usage:" not in err:  # argparse prints its usage before the error line
        assert len(lines) == 1, err
    assert lines[-1].startswith(("sidecar-debug", MISSING)), err
