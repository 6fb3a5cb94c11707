"""`sidecar-debug sessions`: the listing, against a fake pod list."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from tests.unit.controller.fake import NOW, attached_container, injected, pod, running
from webhook.commands.cli import main
from webhook.commands.sessions import sessions_cli
from webhook.kube import client as kube
from webhook.sessions import session as sessions
from webhook.wire import exits

MINUTE = dt.timedelta(minutes=1)


def cluster_pods() -> list[dict[str, Any]]:
    recent = NOW - 20 * MINUTE
    return [
        injected("web-7d9f", created=recent, deadline=dt.datetime(2026, 12, 3, 13, tzinfo=dt.UTC)),
        pod("cart-0", created=NOW - 3 * 60 * MINUTE,
            status={"mode": "standby", "profile": "perf", "grant": "unprivileged"},
            ephemeral=[attached_container("c0ffee", grant="user:alice")],
            ephemeral_status=[running("debug-toolset-c0ffee", NOW - 5 * MINUTE)]),
        pod("plain", created=recent),
        injected("api-1", namespace="prod", created=NOW - 90 * MINUTE, profile="full",
                 grant="serviceaccount:prod:api"),
    ]


class Pods:
    def __init__(self, pods: list[dict[str, Any]], error: int | None = None) -> None:
        self.pods, self.error = pods, error
        self.paths: list[str] = []

    def __call__(self, api_client: Any, method: str, path: str, body: Any,
                 content_type: str | None, **kwargs: Any) -> Any:
        self.paths.append(path)
        if self.error:
            raise ApiException(status=self.error, reason="Forbidden")
        namespace = path.split("/")[4] if "/namespaces/" in path else None
        return {"items": [p for p in self.pods
                          if namespace in (None, p["metadata"]["namespace"])]}


@pytest.fixture
def fake_cluster(monkeypatch: pytest.MonkeyPatch) -> Pods:
    fake = Pods(cluster_pods())
    monkeypatch.setattr(kube, "request", fake)
    monkeypatch.setattr(sessions, "api_client_from", lambda kubeconfig, context: object())
    monkeypatch.setattr(sessions, "current_namespace", lambda kubeconfig, context: "shop")
    return fake


def test_rows_name_kind_profile_grant_age_and_expiry() -> None:
    rows = sessions_cli.session_rows(cluster_pods(), NOW)
    by_pod = {(r["pod"], r["session"]): r for r in rows}
    assert set(by_pod) == {("web-7d9f", "injected"), ("cart-0", "standby"),
                           ("cart-0", "attached"), ("api-1", "injected")}
    web = by_pod[("web-7d9f", "injected")]
    assert (web["container"], web["profile"], web["granted-by"], web["age"]) == (
        "debug-toolset", "lttng", "unprivileged", "20m")
    assert web["expires"] == "2026-12-03T13:00:00Z (in 60m)"
    attached = by_pod[("cart-0", "attached")]
    assert (attached["container"], attached["profile"], attached["granted-by"],
            attached["age"]) == ("debug-toolset-c0ffee", "perf", "user:alice", "5m")
    assert attached["expires"] == "" and by_pod[("cart-0", "standby")]["expires"] == ""
    assert by_pod[("api-1", "injected")]["granted-by"] == "serviceaccount:prod:api"


def test_rows_with_a_policy_show_what_the_controller_would_do(tmp_path: Path) -> None:
    from webhook.config import load_settings
    from webhook.policy.engine import load_policy_engine

    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({
        "apiVersion": "sidecar-debug.io/v1alpha1", "kind": "DebugPolicy",
        "metadata": {"name": "p"}, "spec": {"rules": [
            {"name": "short", "match": {"namespaces": ["shop"]}, "maxSessionDuration": "15m"}]}}))
    rules = load_policy_engine(load_settings(environ={}, overrides={"policy_path": str(policy)}))
    by_pod = {(r["pod"], r["session"]): r
              for r in sessions_cli.session_rows(cluster_pods(), NOW, rules)}
    assert by_pod[("web-7d9f", "injected")]["expires"] == "2026-12-03T11:55:00Z (overdue 5m)"
    assert by_pod[("cart-0", "attached")]["expires"] == "2026-12-03T12:10:00Z (in 10m)"
    assert by_pod[("cart-0", "standby")]["expires"] == ""  # nothing runs, nothing expires


def test_the_table_for_one_namespace(fake_cluster: Pods,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert fake_cluster.paths == ["/api/v1/namespaces/shop/pods"]
    assert out[0].split() == ["POD", "SESSION", "CONTAINER", "PROFILE", "GRANTED-BY", "AGE",
                              "EXPIRES"]
    rows = [line.split() for line in out[1:]]
    assert ["cart-0", "standby", "-", "perf", "unprivileged"] == rows[1][:5]
    assert rows[2][:5] == ["cart-0", "attached", "debug-toolset-c0ffee", "perf", "user:alice"]
    assert [r[0] for r in rows] == ["web-7d9f", "cart-0", "cart-0"]


def test_all_namespaces_and_json(fake_cluster: Pods, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "-A"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert fake_cluster.paths == ["/api/v1/pods"]
    assert out[0].split()[:2] == ["NAMESPACE", "POD"]
    assert any(line.split()[:3] == ["prod", "api-1", "injected"] for line in out)
    assert main(["sessions", "-n", "prod", "-o", "json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["pod"] == "api-1" and row["profile"] == "full"


def test_no_sessions_and_no_permission_say_so_in_one_line(
        monkeypatch: pytest.MonkeyPatch, fake_cluster: Pods,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "-n", "empty"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "No debug sessions in namespace empty.\n"
    monkeypatch.setattr(kube, "request", Pods([], error=403))
    assert main(["sessions", "-n", "secret"]) == exits.EXIT_API
    err = capsys.readouterr().err
    assert err == ("sidecar-debug sessions: listing pods in namespace secret: HTTP 403 "
                   "Forbidden (you need `list` on pods there)\n")
