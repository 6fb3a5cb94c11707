"""Expiry decisions and actions: the real policy gate over a policy file, the fake API."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.controller.fake import (
    NOW,
    FakeApi,
    attached_container,
    injected,
    pod,
    running,
    stamp,
)
from webhook.config import load_settings
from webhook.controller import metrics
from webhook.controller.expiry import ExpiryPass
from webhook.controller.sessions import ATTACHED, INJECTED, STANDBY, sessions_of
from webhook.kube.access import AccessCheck, ClusterAPIError
from webhook.policy.engine import PolicyGate, load_policy_engine
from webhook.wire import constants

HOUR = dt.timedelta(hours=1)


class Namespaces:
    """The gate's cluster: namespace labels (for namespaceSelector rules) or an outage."""

    def __init__(self, labels: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self.labels = dict(labels or {})

    def access_allowed(self, check: AccessCheck, timeout: float) -> bool:
        raise AssertionError("the controller never asks for a grant")

    def namespace_labels(self, name: str, timeout: float) -> Mapping[str, str]:
        if name not in self.labels:
            raise ClusterAPIError(f"GET namespace {name}: connection refused")
        return self.labels[name]


def gate(tmp_path: Path, rules: list[dict[str, Any]], cluster: Namespaces | None = None
         ) -> PolicyGate:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "sidecar-debug.io/v1alpha1", "kind": "DebugPolicy",
        "metadata": {"name": "expiry"}, "spec": {"rules": rules}}))
    settings = dataclasses.replace(load_settings(environ={}), policy_path=str(path))
    return load_policy_engine(settings, cluster or Namespaces())


def shop_rule(on_expiry: str, max_session: str = "30m", **extra: Any) -> dict[str, Any]:
    return {"name": "shop", "match": {"namespaces": ["shop"]}, "maxSessionDuration": max_session,
            "onExpiry": on_expiry, **extra}


def expiry_pass(api: FakeApi, rules: PolicyGate, **kwargs: Any) -> ExpiryPass:
    return ExpiryPass(api, rules, identity="test", wall_clock=lambda: NOW, **kwargs)


def count(action: str, result: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "sidecar_debug_session_expiry_actions_total", {"action": action, "result": result})
    return value or 0.0


def events(api: FakeApi, reason: str) -> list[dict[str, Any]]:
    return [e for e in api.events.values() if e["reason"] == reason]


# ------------------------------------------------------------------ which sessions there are


def test_sessions_of_each_kind_are_found_and_foreign_containers_ignored() -> None:
    standby = pod("standby", status={"mode": "standby", "profile": "perf", "grant": "unprivileged"},
                  ephemeral=[attached_container("0a0b0c"),
                             {"name": "debugger", "image": "busybox"},  # kubectl debug: not ours
                             attached_container("dddddd")],
                  ephemeral_status=[running("debug-toolset-0a0b0c", NOW - HOUR),
                                    {"name": "debug-toolset-dddddd",
                                     "state": {"terminated": {"exitCode": 0}}}])
    found = sessions_of(standby)
    assert [(s.kind, s.container) for s in found] == [
        (STANDBY, ""), (ATTACHED, "debug-toolset-0a0b0c")]
    assert found[1].profile == "perf" and found[1].grant == "user:alice"
    assert found[1].started == NOW - HOUR
    # An injected pod whose sidecar is gone (status copied from a template) is no session.
    copied = pod("copied", status={"profile": "lttng", "container": "debug-toolset"})
    assert sessions_of(copied) == []
    assert [s.kind for s in sessions_of(injected("web"))] == [INJECTED]
    assert sessions_of(pod("plain")) == []


# ------------------------------------------------------------------ report


def test_report_writes_one_event_per_session_and_counts_it(tmp_path: Path) -> None:
    api = FakeApi()
    api.pods = [injected("old", created=NOW - HOUR), injected("new", created=NOW - 10 * 60 * (
        dt.timedelta(seconds=1)))]
    rules = gate(tmp_path, [shop_rule("report")])
    before = count("report", "reported")
    result = expiry_pass(api, rules).run()
    assert result.actions == [("shop/old", "report", "reported")]
    [event] = events(api, "DebugSessionExpired")
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "old",
                                       "namespace": "shop", "uid": "uid-old"}
    assert event["type"] == "Warning"
    assert "maxSessionDuration 30m" in event["message"] and "'shop'" in event["message"]
    assert "expired at 2026-12-03T11:30:00Z" in event["message"]
    assert not api.evictions
    assert count("report", "reported") == before + 1
    # Next pass (even on another replica): not reported again (the Event's name is fixed).
    assert expiry_pass(api, rules).run().actions == [("shop/old", "report", "already-reported")]
    assert len(events(api, "DebugSessionExpired")) == 1
    assert count("report", "reported") == before + 1


def test_the_deadline_from_admission_counts_even_without_a_limit_now(
        tmp_path: Path) -> None:
    api = FakeApi()
    api.pods = [injected("web", created=NOW - HOUR,
                         deadline=NOW - 5 * 60 * dt.timedelta(seconds=1))]
    rules = gate(tmp_path, [{"name": "unlimited", "match": {"namespaces": ["shop"]},
                             "onExpiry": "report"}])
    result = expiry_pass(api, rules).run()
    assert result.actions == [("shop/web", "report", "reported")]
    [event] = events(api, "DebugSessionExpired")
    assert "11:55:00Z (the deadline set at admission, SIDECAR_DEBUG_SESSION_DEADLINE)" in (
        event["message"])


def test_sessions_within_their_limit_standby_and_finished_pods_are_left_alone(
        tmp_path: Path) -> None:
    api = FakeApi()
    api.pods = [
        injected("young", created=NOW - 29 * 60 * dt.timedelta(seconds=1)),
        pod("standby", created=NOW - 5 * HOUR, status={"mode": "standby", "profile": "perf"}),
        injected("going", created=NOW - HOUR, deletionTimestamp=stamp(NOW)),
        injected("other-namespace", namespace="prod", created=NOW - 5 * HOUR),
    ]
    done = injected("done", created=NOW - 5 * HOUR)
    done["status"]["phase"] = "Succeeded"
    api.pods.append(done)
    result = expiry_pass(api, gate(tmp_path, [shop_rule("evict")])).run()
    assert result.actions == [] and api.writes() == []
    kinds = {(v.session.pod, v.overdue, v.expires is None) for v in result.verdicts}
    assert ("young", False, False) in kinds and ("standby", False, True) in kinds
    assert ("other-namespace", False, True) in kinds  # no rule covers it: no limit


# ------------------------------------------------------------------ evict


def test_evict_honours_the_disruption_budget_and_retries(tmp_path: Path) -> None:
    api = FakeApi(minor=20)
    api.pods = [injected("web", created=NOW - HOUR)]
    rules = gate(tmp_path, [shop_rule("evict")])
    api.eviction_status = 429
    blocked = count("evict", "blocked")
    result = expiry_pass(api, rules).run()
    assert result.actions == [("shop/web", "evict", "blocked")]
    assert not api.evictions and count("evict", "blocked") == blocked + 1
    [event] = events(api, "DebugSessionEvictionBlocked")
    assert "disruption budget" in event["message"] and "tries again" in event["message"]
    # Still blocked: tried again, no second Event.
    expiry_pass(api, rules).run()
    assert count("evict", "blocked") == blocked + 2
    assert len(events(api, "DebugSessionEvictionBlocked")) == 1
    # The budget allows it now.
    api.eviction_status = None
    evicted = count("evict", "evicted")
    result = expiry_pass(api, rules).run()
    assert result.actions == [("shop/web", "evict", "evicted")]
    assert api.evictions == [{"apiVersion": "policy/v1beta1", "kind": "Eviction",
                              "metadata": {"name": "web", "namespace": "shop"}}]
    assert count("evict", "evicted") == evicted + 1
    assert events(api, "DebugSessionEvicted")
    # The pod is terminating now: no second eviction.
    expiry_pass(api, rules).run()
    assert len(api.evictions) == 1
    # Nor when the (cached) list still shows it without its deletionTimestamp.
    del api.pods[0]["metadata"]["deletionTimestamp"]
    runner = expiry_pass(api, rules)
    api.pods.append(injected("web2", created=NOW - HOUR))
    runner.run()
    del api.pods[1]["metadata"]["deletionTimestamp"]
    assert runner.run().actions == []
    assert [e["metadata"]["name"] for e in api.evictions] == ["web", "web", "web2"]


def test_evict_uses_policy_v1_from_kubernetes_1_22_and_one_eviction_per_pod(
        tmp_path: Path) -> None:
    api = FakeApi(minor=22)
    api.pods = [injected("web", created=NOW - HOUR, ephemeral=[attached_container()],
                         ephemeral_status=[running("debug-toolset-a1b2c3", NOW - HOUR)])]
    result = expiry_pass(api, gate(tmp_path, [shop_rule("evict")])).run()
    assert len([v for v in result.verdicts if v.overdue]) == 2
    assert [e["apiVersion"] for e in api.evictions] == ["policy/v1"]


def test_a_replica_that_is_no_longer_leader_does_nothing(tmp_path: Path) -> None:
    api = FakeApi()
    api.pods = [injected("web", created=NOW - HOUR)]
    result = expiry_pass(api, gate(tmp_path, [shop_rule("evict")]), may_act=lambda: False).run()
    assert result.actions == [] and api.writes() == []


# ------------------------------------------------------------------ stop


def test_stop_leaves_the_attached_toolset_to_end_itself_and_reports_what_still_runs(
        tmp_path: Path) -> None:
    """The attached toolset ends itself at its deadline (its env): the controller waits
    STOP_GRACE, then reports one that still runs, once; an injected sidecar is reported as
    unsupported. No exec, no eviction, ever."""
    api = FakeApi()
    api.pods = [
        pod("standby", created=NOW - 3 * HOUR, status={"mode": "standby", "profile": "perf"},
            ephemeral=[attached_container("a1b2c3"), attached_container("ffffff")],
            ephemeral_status=[running("debug-toolset-a1b2c3", NOW - HOUR),
                              running("debug-toolset-ffffff", NOW - 60 * dt.timedelta(
                                  seconds=1))]),
        injected("web", created=NOW - HOUR),
    ]
    still, unsupported = count("stop", "still-running"), count("stop", "unsupported")
    result = expiry_pass(api, gate(tmp_path, [shop_rule("stop")])).run()
    assert sorted(result.actions) == [("shop/standby", "stop", "still-running"),
                                      ("shop/web", "stop", "unsupported")]
    assert not api.evictions and all(method != "POST" or "/events" in path
                                     for method, path in api.calls)
    assert count("stop", "still-running") == still + 1
    assert count("stop", "unsupported") == unsupported + 1
    notes = {e["involvedObject"]["name"]: e["message"] for e in events(api, "DebugSessionExpired")}
    assert "use onExpiry evict" in notes["web"]
    assert constants.ENV_SESSION_DEADLINE in notes["standby"] and "no exec right" in notes[
        "standby"]
    again = expiry_pass(api, gate(tmp_path, [shop_rule("stop")])).run()
    assert ("shop/standby", "stop", "already-reported") in again.actions


def test_an_attached_toolset_just_past_its_expiry_is_given_time_to_end_itself(
        tmp_path: Path) -> None:
    api = FakeApi()
    # The rule allows 1h; this one started 1h and 30s ago: within STOP_GRACE of its expiry.
    api.pods = [pod("p", ephemeral=[attached_container()],
                    ephemeral_status=[running("debug-toolset-a1b2c3",
                                              NOW - HOUR - dt.timedelta(seconds=30))])]
    result = expiry_pass(api, gate(tmp_path, [shop_rule("stop", "1h")])).run()
    assert result.actions == [("shop/p", "stop", "waiting")]
    assert not events(api, "DebugSessionExpired") and api.writes() == []


# ------------------------------------------------------------------ undecidable rules


def test_an_undecidable_namespace_selector_rule_means_no_action(tmp_path: Path) -> None:
    api = FakeApi()
    api.pods = [injected("web", created=NOW - HOUR)]
    rules = gate(tmp_path, [{"name": "by-label", "match": {"namespaceSelector": {
        "matchLabels": {"env": "dev"}}}, "maxSessionDuration": "10m", "onExpiry": "evict"}],
        Namespaces())  # the namespace cannot be read
    result = expiry_pass(api, rules).run()
    assert result.skipped == ["shop/web"] and api.writes() == []
    # Readable, and matching: acted on.
    rules = gate(tmp_path, [{"name": "by-label", "match": {"namespaceSelector": {
        "matchLabels": {"env": "dev"}}}, "maxSessionDuration": "10m", "onExpiry": "evict"}],
        Namespaces({"shop": {"env": "dev"}}))
    assert expiry_pass(api, rules).run().actions == [("shop/web", "evict", "evicted")]


@pytest.mark.parametrize("bad", ["not json", "[1]", '{"container": 7}', None,
                                 '{"mode": "standby"}', '{"container": "app"}'])
def test_the_toolset_is_found_whatever_the_status_annotation_says(bad: str | None) -> None:
    """Issue 17: deleting or rewriting the annotation no longer hides a session."""
    document = injected("x", profile="full", grant="user:alice")
    if bad is None:
        del document["metadata"]["annotations"][constants.ANNOTATION_STATUS]
    else:
        document["metadata"]["annotations"][constants.ANNOTATION_STATUS] = bad
    [session] = sessions_of(document)
    assert (session.kind, session.container, session.profile, session.grant) == (
        INJECTED, "debug-toolset", "full", "user:alice")
