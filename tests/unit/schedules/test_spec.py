"""The schedule annotation: JSON or YAML, one or several, defaults, and type errors that say
where and what is allowed."""

from __future__ import annotations

import pytest

from webhook.schedules.spec import ScheduleError, parse


def test_yaml_namespace_schedule_with_selector() -> None:
    [schedule] = parse("cron: '0 * * * *'\nduration: 1m30s\ntechnique: bpftrace-profile\n"
                       "selector:\n  matchLabels: {app: web}\n  matchExpressions:\n"
                       "  - {key: tier, operator: In, values: [front]}\nmaxPods: 3\n",
                       namespace="shop")
    assert schedule.duration == 90 and schedule.technique == "bpftrace-profile"
    assert schedule.max_pods == 3 and schedule.key == "namespace/shop#0"
    assert schedule.selector.matches({"app": "web", "tier": "front"})
    assert not schedule.selector.matches({"app": "web", "tier": "back"})


def test_json_pod_schedule_defaults() -> None:
    [schedule] = parse('{"cron": "@hourly"}', namespace="shop", pod="web-1")
    assert (schedule.duration, schedule.technique, schedule.frequency) == (30, "perf", 99)
    assert schedule.key == "pod/shop/web-1#0"
    assert "pod shop/web-1" in schedule.describe()


def test_a_list_gives_several_schedules() -> None:
    schedules = parse('[{"cron": "0 * * * *"}, {"cron": "30 2 * * *", "duration": 300}]',
                      namespace="shop")
    assert [s.key for s in schedules] == ["namespace/shop#0", "namespace/shop#1"]
    assert schedules[1].duration == 300


@pytest.mark.parametrize("text,message", [
    ("", "empty"),
    ("cron: [", "neither JSON nor YAML"),
    ("just a string", "expected a mapping"),
    ("duration: 30s", "cron: required"),
    ("cron: '61 * * * *'", "cron: minute: 61 is out of range 0-59"),
    ("{cron: '@daily', technique: lttng}", "technique: 'lttng' is not one of perf, "
     "bpftrace-profile"),
    ("{cron: '@daily', duration: 2h}", "duration: 7200 s is outside 1 s..3600 s"),
    ("{cron: '@daily', duration: soon}", "duration: 'soon' is not a duration"),
    ("{cron: '@daily', duration: true}", "got a boolean"),
    ("{cron: '@daily', maxPods: '2'}", "maxPods: expected a whole number, got a string"),
    ("{cron: '@daily', maxPod: 2}", "unknown field 'maxPod'"),
    ("{cron: '@daily', selector: {app: web}}", "unknown field 'app'.*matchLabels"),
    ("{cron: '@daily', selector: {matchLabels: {replicas: 1}}}", "quote numbers"),
    ("{cron: '@daily', selector: {matchExpressions: [{key: a, operator: In}]}}",
     "operator In needs values"),
    ("[]", "empty list schedules nothing"),
    ("[{cron: '@daily'}, {cron: 5}]", r"\[1\]: cron: expected a string"),
])
def test_refusals_say_where_and_why(text: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=message) as caught:
        parse(text, namespace="shop")
    assert "sidecar-debug.io/schedule on namespace shop" in str(caught.value)


def test_selector_is_refused_on_a_pod() -> None:
    with pytest.raises(ScheduleError, match="belong to namespace schedules"):
        parse("{cron: '@daily', maxPods: 2}", namespace="shop", pod="web-1")


def test_schedule_check_command(tmp_path: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
                                ) -> None:
    from pathlib import Path

    from webhook.commands import cli

    good = Path(str(tmp_path)) / "good.yaml"
    good.write_text("- cron: '30 2 * * mon-fri'\n  duration: 2m\n- cron: '@hourly'\n")
    assert cli.main(["schedule", "check", str(good), "-n", "shop", "--runs", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("namespace/shop#0: perf for 120 s at 99 Hz, cron '30 2 * * mon-fri', pods "
                      "of namespace shop matching (everything) (at most 1)")
    assert out[1].startswith("  next: ") and out[1].endswith(" 02:30 UTC")
    assert out[3].startswith("namespace/shop#1: ")
    bad = Path(str(tmp_path)) / "bad.yaml"
    bad.write_text("{cron: '@daily', maxPods: 2}")
    assert cli.main(["schedule", "check", str(bad), "-n", "shop", "--pod", "web-1"]) == 1
    assert "belong to namespace schedules" in capsys.readouterr().err
