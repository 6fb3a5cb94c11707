"""`sidecar-debug policy check|explain|schema`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from webhook.commands.cli import main

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = str(REPO / "policies/examples/dev-and-prod.yaml")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("SIDECAR_DEBUG_"):
            monkeypatch.delenv(key)


def test_check_valid_files(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["policy", "check", str(REPO / "policies/default.yaml"), EXAMPLE])
    out = capsys.readouterr().out
    assert code == 0
    assert "default.yaml: OK (0 rules)" in out and "dev-and-prod.yaml: OK (3 rules)" in out


def test_check_reports_file_line_path_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "typo.yaml"
    bad.write_text(
        Path(EXAMPLE)
        .read_text()
        .replace("allowedProfiles: [lttng, perf", "allowedProfile: [lttng, perf")
    )
    line = bad.read_text().splitlines().index("      allowedProfile: [lttng, perf, bcc, full]") + 1
    code = main(["policy", "check", EXAMPLE, str(bad)])
    captured = capsys.readouterr()
    assert code == 1
    assert (
        f"{bad}:{line}: spec.rules[2].allowedProfile: unknown field (did you mean 'allowedProfiles'?)"  # noqa: E501
        in captured.err
    )
    assert "dev-and-prod.yaml: OK" in captured.out


def test_check_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "check", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml: no such file or directory" in capsys.readouterr().err


def explain(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    assert main(["policy", "explain", "-o", "json", *args]) == 0
    result: dict[str, object] = json.loads(capsys.readouterr().out)
    return result


def test_explain_offline_denied_downgrades(capsys: pytest.CaptureFixture[str]) -> None:
    result = explain(
        capsys,
        "--namespace",
        "dev",
        "--service-account",
        "app",
        "--profile",
        "full",
        "--policy",
        EXAMPLE,
        "--assume-denied",
    )
    assert (result["rule"], result["profile"], result["reason"]) == (
        "dev-full",
        "lttng",
        "no-rbac-grant",
    )
    assert "--clusterrole=sidecar-debug-profile-full --serviceaccount=dev:app -n dev" in str(
        result["message"]
    )


def test_explain_offline_granted(capsys: pytest.CaptureFixture[str]) -> None:
    result = explain(
        capsys,
        "-n",
        "dev",
        "--service-account",
        "app",
        "-p",
        "full",
        "--policy",
        EXAMPLE,
        "--assume-granted",
    )
    assert (result["profile"], result["reason"], result["grant"]) == (
        "full",
        "granted-serviceaccount",
        "serviceaccount:dev:app",
    )
    annotations = result["annotations"]
    assert isinstance(annotations, dict) and "sidecar-debug.io/overdue-after" in annotations


def test_explain_namespace_labels_and_user(capsys: pytest.CaptureFixture[str]) -> None:
    result = explain(
        capsys,
        "-n",
        "shop",
        "-p",
        "perf",
        "--policy",
        EXAMPLE,
        "--assume-granted",
        "--namespace-label",
        "environment=production",
        "--user",
        "bob",
    )
    assert (result["rule"], result["profile"], result["reason"]) == (
        "production-lttng-only",
        "lttng",
        "not-allowed-by-policy",
    )


def test_explain_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "explain", "-n", "dev", "-p", "full", "--assume-denied"]) == 0
    out = capsys.readouterr().out
    assert "policy:    built-in default policy" in out
    assert "decision:  inject profile 'lttng'" in out
    assert "replicaset-controller" in out and "never grants" in out


def test_explain_without_a_cluster_fails_closed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            ["policy", "explain", "-n", "dev", "-p", "full", "--kubeconfig", str(tmp_path / "none")]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "reason:    rbac-check-failed" in out and "--assume-granted" in out


def test_explain_unknown_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "explain", "-n", "dev", "-p", "ful", "--assume-denied"]) == 2
    assert "unknown profile 'ful'" in capsys.readouterr().err


def test_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "schema"]) == 0
    assert json.loads(capsys.readouterr().out)["properties"]["kind"] == {"const": "DebugPolicy"}
