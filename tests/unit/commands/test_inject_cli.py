"""`sidecar-debug inject -f`: offline injection as a new user would try it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.core_helpers import validate_pod

CLI = [sys.executable, "-m", "webhook.commands.cli"]
TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "web"}},
    "spec": {"containers": [{"name": "web", "image": "node:20"}]},
}
WORKLOADS = {
    "Deployment": ("apps/v1", {"selector": {"matchLabels": {"app": "web"}}, "template": TEMPLATE}),
    "StatefulSet": (
        "apps/v1",
        {"serviceName": "web", "selector": {"matchLabels": {"app": "web"}}, "template": TEMPLATE},
    ),
    "DaemonSet": ("apps/v1", {"selector": {"matchLabels": {"app": "web"}}, "template": TEMPLATE}),
    "ReplicaSet": ("apps/v1", {"selector": {"matchLabels": {"app": "web"}}, "template": TEMPLATE}),
    "Job": (
        "batch/v1",
        {"template": {**TEMPLATE, "spec": {**TEMPLATE["spec"], "restartPolicy": "Never"}}},
    ),
    "CronJob": (
        "batch/v1",
        {
            "schedule": "* * * * *",
            "jobTemplate": {
                "spec": {
                    "template": {**TEMPLATE, "spec": {**TEMPLATE["spec"], "restartPolicy": "Never"}}
                }
            },
        },
    ),
}


def run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, timeout=60)


def manifests() -> str:
    docs: list[dict[str, Any]] = [
        {"apiVersion": api, "kind": kind, "metadata": {"name": kind.lower()}, "spec": spec}
        for kind, (api, spec) in WORKLOADS.items()
    ]
    docs.append(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod"}, "spec": TEMPLATE["spec"]}
    )
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"ports": [{"port": 80}]},
        }
    )
    docs.append(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}
    )
    return yaml.safe_dump_all(docs, sort_keys=False)


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    if doc["kind"] == "Pod":
        return doc
    if doc["kind"] == "CronJob":
        return dict(doc["spec"]["jobTemplate"]["spec"]["template"])
    return dict(doc["spec"]["template"])


def test_every_workload_kind_is_injected_and_others_pass_through(tmp_path: Path) -> None:
    source = tmp_path / "app.yaml"
    source.write_text(manifests())
    result = run(["inject", "-f", str(source), "--runtime", "node"])
    assert result.returncode == 0, result.stderr
    docs = list(yaml.safe_load_all(result.stdout))
    originals = list(yaml.safe_load_all(source.read_text()))
    assert [d["kind"] for d in docs] == [d["kind"] for d in originals]
    for doc in docs:
        if doc["kind"] in ("Service", "ConfigMap"):
            assert doc == next(o for o in originals if o["kind"] == doc["kind"])
            continue
        template = pod_spec(doc)
        containers = template["spec"]["containers"]
        assert [c["name"] for c in containers] == ["debug-toolset", "web"], doc["kind"]
        assert {"name": "NODE_OPTIONS", "value": "--perf-basic-prof"} in containers[1]["env"]
        assert template["spec"]["shareProcessNamespace"] is True
        validate_pod({"metadata": template.get("metadata", {}), "spec": template["spec"]})


def test_running_twice_changes_nothing_and_stdin_works(tmp_path: Path) -> None:
    once = run(["inject", "-f", "-", "--profile", "perf"], stdin=manifests())
    assert once.returncode == 0, once.stderr
    twice = run(["inject", "-f", "-"], stdin=once.stdout)
    assert twice.returncode == 0, twice.stderr
    assert twice.stdout == once.stdout


def test_profile_flag_is_recorded_on_the_pod() -> None:
    result = run(["inject", "-f", "-", "--profile", "lttng"], stdin=manifests())
    deployment = next(yaml.safe_load_all(result.stdout))
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["sidecar-debug.io/profile"] == "lttng"
    assert '"profile":"lttng"' in annotations["sidecar-debug.io/status"]


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["inject", "-f", "/no/such/file.yaml"], None, "-f /no/such/file.yaml: the path does not"),
        (["inject", "-f", "-"], "a: [unclosed", "<stdin>:1: document 1: not valid YAML"),
        (["inject", "-f", "-", "--profile", "nope"], manifests(), "--profile 'nope' is not a"),
        (
            ["inject", "-f", "-"],
            "kind: Deployment\nmetadata: {name: x}\nspec: {}\n",
            "has no pod template",
        ),
    ],
)
def test_errors_are_one_clear_line_and_exit_non_zero(
    args: list[str], stdin: str | None, message: str
) -> None:
    result = run(args, stdin)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_version_and_help() -> None:
    assert run(["--version"]).stdout.startswith("sidecar-debug 0.1.0")
    assert "inject" in run(["--help"]).stdout
