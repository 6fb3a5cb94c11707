"""The controller's loop: leader election and work together, the schedule checks after expiry,
a clean stop."""

from __future__ import annotations

import logging
import threading
import urllib.request
from typing import Any

import pytest

from tests.unit.controller.fake import FakeApi, injected
from webhook.controller import metrics
from webhook.controller.lease import Timing
from webhook.controller.loop import Controller, Options
from webhook.policy.model import RuleSettings
from webhook.wire import constants

NS, LEASE = "sidecar-debug", "sd-controller"


class NoLimit:
    def rule_for(self, namespace: str, service_account: str) -> tuple[RuleSettings, str]:
        return RuleSettings(), "the defaults"


def controller(api: FakeApi, check_schedules: bool = True, **options: Any) -> Controller:
    return Controller(
        api_client="the ApiClient", elector_client=None, rules=NoLimit(),
        options=Options(identity="replica-1", lease_namespace=NS, lease_name=LEASE,
                        timing=Timing(2, 1, 0.1), interval=0.2, check_schedules=check_schedules,
                        metrics_address="127.0.0.1", metrics_port=0, **options),
        api=api, elector_api=api)


def poisoned_namespace() -> dict[str, Any]:
    return {"metadata": {"name": "shop", "uid": "uid-shop",
                         "annotations": {constants.ANNOTATION_SCHEDULE: "[" * 8000 + "]" * 8000}}}


def test_schedule_checks_run_after_expiry_over_its_pods_and_report_once() -> None:
    api = FakeApi()
    api.pods = [injected("web")]
    api.namespaces = [poisoned_namespace()]
    subject = controller(api)
    subject.elector.step()  # now the leader
    subject.work_once()
    subject.work_once()
    listed = [path for method, path in api.calls if method == "GET" and "/api/v1/" in path]
    assert listed[0] == "/api/v1/pods?resourceVersion=0"  # expiry first
    assert listed.count("/api/v1/pods?resourceVersion=0") == 2  # one pod list per pass
    events = [e for (namespace, _), e in api.events.items() if e["reason"] == "ScheduleInvalid"
              and namespace == "default"]  # a cluster-scoped object's Events live there
    assert len(events) == 1  # once, not every pass
    assert events[0]["involvedObject"]["kind"] == "Namespace"
    assert "nested 8000 deep" in events[0]["message"]


def test_failing_schedule_checks_are_one_log_line_and_expiry_goes_on(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def broken(pods: Any) -> Any:
        raise ValueError("disk full\nsecond line")

    api = FakeApi()
    api.pods = [injected("web")]
    subject = controller(api)
    assert subject.schedules is not None
    monkeypatch.setattr(subject.schedules, "run", broken)
    subject.elector.step()
    with caplog.at_level(logging.ERROR):
        subject.work_once()
        subject.work_once()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == ["schedule checks failed: ValueError: disk full second line"] * 2
    assert api.calls.count(("GET", "/api/v1/pods?resourceVersion=0")) == 2


def test_a_standby_replica_and_a_controller_without_checks_post_nothing() -> None:
    api = FakeApi()
    api.pods = [injected("web")]
    api.namespaces = [poisoned_namespace()]
    controller(api).elector.step()  # another replica holds the lease
    subject = controller(api, sidecar_name="debug-toolset")
    subject.elector.identity = "replica-2"
    subject.elector.step()
    assert not subject.elector.is_leader
    subject.work_once()  # (run() calls it only for the leader; the checks look again)
    unchecked = controller(FakeApi(), check_schedules=False)
    unchecked.elector.step()
    unchecked.work_once()
    assert not api.events and unchecked.schedules is None


def test_run_elects_works_serves_metrics_and_releases_the_lease_on_stop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi()
    api.pods = [injected("web")]
    subject = controller(api)
    ports: list[int] = []
    original = metrics.serve

    def serve(address: str, port: int, healthy: Any, **kwargs: Any) -> Any:
        server = original(address, port, healthy, **kwargs)
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
