"""Commands end with an exit code and a one-line message, never a traceback, for what the user
can fix; a bug still shows its traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.commands import errors
from webhook.commands.cli import main


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
    assert main(["certs", "inspect", "/nonexistent/tls.crt"]) == 1
    err = capsys.readouterr().err
    assert "/nonexistent/tls.crt" in err and "Traceback" not in err


def test_the_table_matches_along_the_class_hierarchy(capsys: pytest.CaptureFixture[str]) -> None:
    from webhook.config import SettingsError
    from webhook.policy.loader import PolicyError, Problem

    assert errors.handle(SettingsError("port: not a number")) == 2
    assert capsys.readouterr().err == "sidecar-debug: invalid settings: port: not a number\n"
    problem = Problem("p.yaml", 3, "spec.rules[0]", "unknown key")
    assert errors.handle(PolicyError([problem])) == 2
    assert capsys.readouterr().err.startswith("sidecar-debug: invalid policy: p.yaml:3: ")
    assert errors.handle(FileNotFoundError(2, "No such file or directory", "x.yaml")) == 1
    assert capsys.readouterr().err == "sidecar-debug: x.yaml: No such file or directory\n"


def test_a_bug_is_not_hidden() -> None:
    assert errors.handle(KeyError("oops")) is None
