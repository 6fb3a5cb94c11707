"""The controller's loop: leader election and work together, the schedules hook, a clean stop."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.unit.controller.fake import FakeApi, injected
from webhook.controller import metrics
from webhook.controller.lease import Timing
from webhook.controller.run import Controller, Options
from webhook.policy.model import RuleSettings
from webhook.schedules import runner

NS, LEASE = "sidecar-debug", "sd-controller"


class NoLimit:
    def rule_for(self, namespace: str, service_account: str) -> tuple[RuleSettings, str]:
        return RuleSettings(), "the defaults"


def controller(api: FakeApi, tmp_path: Path | None = None, **options: Any) -> Controller:
    return Controller(
        api_client="the ApiClient", elector_client=None, rules=NoLimit(),
        options=Options(identity="replica-1", lease_namespace=NS, lease_name=LEASE,
                        timing=Timing(2, 1, 0.1), interval=0.2, results_dir=tmp_path,
                        metrics_address="127.0.0.1", metrics_port=0, **options),
        api=api, elector_api=api)


def test_the_schedules_get_the_api_client_an_aware_time_and_the_results_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, dt.datetime, Path]] = []
    monkeypatch.setattr(runner, "tick", lambda api, now, results: calls.append((api, now, results)))
    api = FakeApi()
    subject = controller(api, tmp_path)
    subject.elector.step()  # now the leader
    subject.work_once()
    [(api_client, now, results)] = calls
    assert api_client == "the ApiClient" and results == tmp_path
    assert now.tzinfo is not None and abs(dt.datetime.now(dt.UTC) - now).total_seconds() < 5
    assert ("GET", "/api/v1/pods?resourceVersion=0") in api.calls  # the expiry pass ran first


def test_a_failing_tick_is_one_log_line_and_the_next_interval_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    def broken(api: Any, now: dt.datetime, results: Path) -> None:
        raise ValueError("disk full\nsecond line")

    monkeypatch.setattr(runner, "tick", broken)
    subject = controller(FakeApi(), tmp_path)
    subject.elector.step()
    with caplog.at_level(logging.ERROR):
        subject.work_once()
        subject.work_once()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == ["schedules tick failed: ValueError: disk full second line"] * 2


def test_a_standby_replica_runs_no_schedules(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(runner, "tick", lambda *args: calls.append(args))
    api = FakeApi()
    controller(api, tmp_path).elector.step()  # another replica holds the lease
    subject = controller(api, tmp_path, sidecar_name="debug-toolset")
    subject.elector.identity = "replica-2"
    subject.elector.step()
    assert not subject.elector.is_leader
    subject.work_once()  # (run() calls it only for the leader; the tick checks again)
    assert calls == []


def test_run_elects_works_serves_metrics_and_releases_the_lease_on_stop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi()
    api.pods = [injected("web")]
    subject = controller(api)
    ports: list[int] = []
    original = metrics.serve

    def serve(address: str, port: int, healthy: Any) -> Any:
        server = original(address, port, healthy)
        ports.append(server.server_address[1])
        return server

    monkeypatch.setattr(metrics, "serve", serve)
    observed: dict[str, Any] = {}

    def look_then_stop() -> None:
        base = f"http://127.0.0.1:{ports[0]}"
        with urllib.request.urlopen(base + "/metrics", timeout=5) as answer:  # noqa: S310
            observed["metrics"] = answer.read().decode()
        with urllib.request.urlopen(base + "/healthz", timeout=5) as answer:  # noqa: S310
            observed["health"] = answer.status
        observed["holder"] = api.leases[(NS, LEASE)]["spec"]["holderIdentity"]
        subject.stop.set()
        subject.wake.set()

    timer = threading.Timer(1.0, look_then_stop)
    timer.start()
    assert subject.run() == 0
    timer.join()
    assert observed["holder"] == "replica-1" and observed["health"] == 200
    assert "sidecar_debug_controller_leader 1.0" in observed["metrics"]
    assert 'sidecar_debug_sessions{kind="injected",state="unlimited"} 1.0' in observed["metrics"]
    assert api.calls.count(("GET", "/api/v1/pods?resourceVersion=0")) >= 2  # every interval
    assert api.leases[(NS, LEASE)]["spec"]["holderIdentity"] == ""  # released
