"""Planning from annotations, each parsed alone: the issue's hostile annotations fail only their
own schedule, quickly and once; which pods a schedule picks; the pod's granted profile and the
policy rule decide whether it may run there (re-derived from the toolset's env and the installed
profiles, never from an annotation)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.unit.core_helpers import settings_with
from tests.unit.guard.test_toolset import as_admitted
from webhook.certs import pki
from webhook.config import Settings
from webhook.inject.sidecar import InjectionPlan, inject_pod
from webhook.policy.model import RuleSettings
from webhook.schedules import plan
from webhook.schedules.plan import Book
from webhook.wire import constants

T0 = datetime(2026, 12, 3, 7, 0, 20, tzinfo=UTC)
SETTINGS = settings_with(toolset_image="toolset:1", results_url="https://r.sd.svc:443",
                         results_audience="sidecar-debug.io/results/sd/r")
CA = pki.generate_ca().cert_pem.decode()
KEY = constants.ANNOTATION_SCHEDULE

# The four: 8,000 nested brackets, a superscript digit, an overflowing duration, and
# 3,270 crons that never match in 16 KiB (YAML aliases: 5 bytes each).
HOSTILE = {
    "nested": "[" * 8000 + "]" * 8000,
    "superscript": '{"cron": "\u00b2 * * * *"}',
    "overflow": '{"cron": "* * * * *", "duration": "99999999999999999999h"}',
    "never-3270": "- &a {cron: '0 0 31 2 *'}\n" + "- *a\n" * 3269,
    "huge-int": '{"cron": "* * * * *", "frequency": ' + "9" * 5000 + "}",
    "int-keys": "{1: a, b: c, cron: '* * * * *'}",
    "deep-yaml": "a:\n" + "".join(" " * i + "- \n" for i in range(1, 170)),
}


class Rules:
    def __init__(self, settings: RuleSettings | None = None, fail: bool = False) -> None:
        self.settings = settings or RuleSettings()
        self.fail = fail

    def rule_for(self, namespace: str, service_account: str) -> tuple[RuleSettings, str]:
        if self.fail:
            raise RuntimeError("namespace unreadable")
        return self.settings, "policy.yaml:3 (rule r)"


def toolset(profile: str = "full", *, image: str = "toolset:1", token: bool = True,
            name: str = "debug-toolset") -> dict[str, Any]:
    mounts = [{"name": "t", "mountPath": constants.RESULTS_TOKEN_DIR}] if token else []
    return {"name": name, "image": image,
            "env": [{"name": constants.ENV_PROFILE, "value": profile}], "volumeMounts": mounts}


def pod(name: str, labels: dict[str, str] | None = None, *, namespace: str = "shop",
        annotation: str | None = None, phase: str = "Running", profile: str = "full",
        wired: bool = True, containers: list[dict[str, Any]] | None = None,
        settings: Settings = SETTINGS) -> dict[str, Any]:
    """A pod as the API has it after the webhook injected it (with the results wiring unless
    `wired` is false) with `settings`; `containers` replaces its containers by hand-written
    ones."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                                "labels": labels or {}}
    app = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
           "spec": {"containers": [{"name": "app", "image": "app"}]}}
    injected, _ = inject_pod(app, InjectionPlan(profile=settings.profiles[profile],
                                                results_ca=CA if wired else "", grant="test"),
                             settings)
    result = as_admitted(injected)
    if containers is not None:
        result["spec"]["containers"] = containers
    if annotation is not None:
        result["metadata"]["annotations"][KEY] = annotation
    result["status"] = {"phase": phase}
    return result


def namespace(name: str = "shop", annotation: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "uid": f"uid-ns-{name}"}
    if annotation is not None:
        metadata["annotations"] = {KEY: annotation}
    return {"metadata": metadata}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_annotation_is_that_annotations_problem_only(name: str) -> None:
    book = Book()
    started = time.process_time()
    parsed = book.read("shop", None, HOSTILE[name])
    spent = time.process_time() - started
    assert parsed.error is not None and not parsed.schedules
    assert parsed.error.startswith(f"{KEY} on namespace shop")
    assert "\n" not in parsed.error
    assert spent < 1.0, f"{name}: {spent:.2f} s of CPU"  # the old parser: 10.8 s or a crash
    # Cached by its text: the second read costs nothing and says the same.
    assert book.read("shop", None, HOSTILE[name]) is parsed


def test_a_parse_over_the_cpu_budget_is_refused_and_not_repeated(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def slow(text: str, *, namespace: str, pod: str | None = None) -> list[Any]:
        calls.append(text)
        ends = time.thread_time() + 0.05
        while time.thread_time() < ends:
            pass
        return []

    monkeypatch.setattr(plan, "parse", slow)
    book = Book(budget=0.01)
    parsed = book.read("shop", "web", "anything")
    assert parsed.error is not None and "ms of CPU to read" in parsed.error
    book.read("shop", "web", "anything")
    assert calls == ["anything"]


def test_an_unexpected_exception_stays_the_annotations(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(text: str, *, namespace: str, pod: str | None = None) -> list[Any]:
        raise KeyError("a bug")

    monkeypatch.setattr(plan, "parse", broken)
    parsed = Book().read("shop", "web", "{}")
    assert parsed.error == f"{KEY} on pod shop/web: cannot be read (KeyError)"


def test_a_poisoned_namespace_leaves_the_others_planned() -> None:
    good = json.dumps({"cron": "* * * * *", "duration": "5s"})
    namespaces = [namespace("bad", HOSTILE["never-3270"]), namespace("shop", good)]
    pods = [pod("web", namespace="shop"), pod("api", namespace="bad")]
    book = Book()
    found = plan.problems(namespaces, pods, book, SETTINGS, Rules())
    assert [(p.kind, p.name, p.reason) for p in found] == [
        ("Namespace", "bad", plan.REASON_INVALID)]
    schedules, problems = plan.applicable(pods[0], namespaces[1], pods[:1], book, SETTINGS)
    assert [s.key for s in schedules] == ["namespace/shop#0"] and problems == []


def test_namespace_schedules_pick_running_pods_with_an_agent_by_name() -> None:
    annotation = json.dumps({"cron": "* * * * *", "selector": {"matchLabels": {"app": "web"}},
                             "maxPods": 2})
    pods = [pod("web-c", {"app": "web"}), pod("web-a", {"app": "web"}),
            pod("web-b", {"app": "web"}, wired=False),
            pod("web-0", {"app": "web"}, phase="Pending"), pod("batch", {"app": "batch"})]
    book = Book()
    picked = [p["metadata"]["name"] for p in pods
              if plan.applicable(p, namespace("shop", annotation), pods, book, SETTINGS)[0]]
    assert sorted(picked) == ["web-a", "web-c"]  # no agent in web-b, web-0 not running


def test_the_toolset_is_the_one_the_guard_verifies_and_its_profile_the_granted_one() -> None:
    assert plan.toolset_of(pod("a"), SETTINGS) == plan.Toolset(
        "debug-toolset", "full", frozenset({"perf", "lttng", "bcc"}), True)
    assert plan.toolset_of(pod("b", profile="lttng"), SETTINGS) == plan.Toolset(
        "debug-toolset", "lttng", frozenset({"lttng"}), True)
    assert plan.toolset_of(pod("c", wired=False), SETTINGS) == plan.Toolset(
        "debug-toolset", "full", frozenset({"perf", "lttng", "bcc"}), False)
    # Hand-written containers claiming the toolset (its image, its env, its name, the token
    # mount), whatever the status annotation says: not a toolset.
    for forged in (toolset(), toolset(image="evil:1"), toolset("made-up")):
        claimed = pod("d", containers=[forged, {"name": "app", "image": "app"}])
        assert plan.toolset_of(claimed, SETTINGS) is None
    # Another profile written into a real sidecar's env (a forged grant): not verified.
    edited = pod("e", profile="lttng")
    for item in edited["spec"]["containers"][0]["env"]:
        if item["name"] == constants.ENV_PROFILE:
            item["value"] = "full"
    assert plan.toolset_of(edited, SETTINGS) is None


def test_a_technique_the_granted_profile_cannot_run_is_a_problem_on_the_pod() -> None:
    """Issue 18 item 5: perf asked of a sidecar downgraded to lttng."""
    [schedule] = Book().read("shop", None, '{"cron": "* * * * *"}').schedules
    downgraded = pod("web", profile="lttng")
    problem = plan.check(schedule, downgraded, plan.toolset_of(downgraded, SETTINGS), Rules())
    assert problem is not None and problem.reason == plan.REASON_TECHNIQUE
    assert (problem.kind, problem.name, problem.uid) == ("Pod", "web", "uid-web")
    assert "profile lttng (lttng)" in problem.message and "perf" in problem.message
    assert plan.check(schedule, pod("ok"), plan.toolset_of(pod("ok"), SETTINGS), Rules()) is None


def test_the_policy_rule_limits_duration_and_frequency() -> None:
    [long, fast] = Book().read("shop", None, json.dumps([
        {"cron": "* * * * *", "duration": "1h"},
        {"cron": "* * * * *", "duration": "10s", "frequency": 5000}])).schedules
    target = pod("web")
    tools = plan.toolset_of(target, SETTINGS)
    problem = plan.check(long, target, tools, Rules())
    assert problem is not None and problem.reason == plan.REASON_POLICY
    assert "maxScheduleDuration 10m" in problem.message and "policy.yaml:3" in problem.message
    problem = plan.check(fast, target, tools, Rules())
    assert problem is not None and "maxScheduleFrequency 1000" in problem.message
    loose = Rules(RuleSettings(max_schedule_seconds=3600, max_schedule_frequency=10000))
    assert plan.check(long, target, tools, loose) is None
    undecided = plan.check(fast, target, tools, Rules(fail=True))
    assert undecided is not None and "cannot be decided now" in undecided.message


def test_due_minutes_cost_a_few_checks_whatever_the_expression() -> None:
    [schedule] = Book().read("shop", None, '{"cron": "*/5 * * * *"}').schedules
    assert plan.due_minute(schedule, T0, None) == T0.replace(second=0)  # 07:00 matches
    assert plan.due_minute(schedule, T0 + timedelta(minutes=1), None) is None  # first seen
    # Known: the last run was 07:00; at 07:05:10 the 07:05 minute is due, once.
    later = T0 + timedelta(minutes=5)
    assert plan.due_minute(schedule, later, T0.replace(second=0)) == later.replace(second=0)
    assert plan.due_minute(schedule, later, later.replace(second=0)) is None
    # Missed by more than the starting deadline (07:00, now 07:08): not run late.
    [hourly] = Book().read("shop", None, '{"cron": "0 * * * *"}').schedules
    assert plan.due_minute(hourly, T0 + timedelta(minutes=8), T0 - timedelta(hours=1)) is None
    assert plan.due_minute(hourly, T0 + timedelta(minutes=4), T0 - timedelta(hours=1)) == \
        T0.replace(second=0)
