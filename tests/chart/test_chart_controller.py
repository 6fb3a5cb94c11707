"""The controller's Deployment (templates/controller-deployment.yaml); its RBAC is in
test_chart_rbac.py."""

from __future__ import annotations

import pytest

from tests.chart.helm import FULLNAME, KUBE_OLD, render, template_error
from webhook.commands.cli import build_parser

pytestmark = pytest.mark.chart

NAME = f"{FULLNAME}-controller"


def test_two_replicas_run_the_controller_command_with_the_lease_values() -> None:
    manifest = render(kube_version=KUBE_OLD, sets=["controller.leaseDurationSeconds=20",
                                                   "controller.intervalSeconds=60"])
    deployment = manifest.one("Deployment", NAME)
    assert deployment["spec"]["replicas"] == 2
    spec = deployment["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == NAME and spec["enableServiceLinks"] is False
    [container] = spec["containers"]
    command = container["command"]
    assert command[:4] == ["sidecar-debug", "controller", "--config",
                           "/etc/sidecar-debug/config.yaml"]
    options = dict(zip(command[4::2], command[5::2], strict=True))
    assert options == {"--lease-name": NAME, "--lease-duration": "20", "--renew-deadline": "10",
                       "--retry-period": "2", "--interval": "60", "--metrics-port": "9090"}
    # The command line the chart writes is one the CLI accepts.
    args = build_parser().parse_args(command[1:])
    assert (args.lease_duration, args.interval, args.lease_name) == (20.0, 60.0, NAME)
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"POD_NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mounts["/etc/sidecar-debug/policies"]]["configMap"]["name"] == (
        f"{FULLNAME}-policies")  # the same policies as the webhook
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_controller_pods_are_not_webhook_pods() -> None:
    manifest = render()
    labels = manifest.one("Deployment", NAME)["spec"]["template"]["metadata"]["labels"]
    for selector in (manifest.one("Service", FULLNAME)["spec"]["selector"],
                     manifest.one("PodDisruptionBudget", FULLNAME)["spec"]["selector"][
                         "matchLabels"]):
        assert not selector.items() <= labels.items(), "the webhook's Service would reach it"


def test_lease_timing_misuse_fails_the_render() -> None:
    error = template_error(sets=["controller.renewDeadlineSeconds=15"])
    assert "controller.renewDeadlineSeconds (15) must be below" in error
    error = template_error(sets=["controller.retryPeriodSeconds=10"])
    assert "controller.retryPeriodSeconds (10)" in error


def test_switched_off() -> None:
    manifest = render(sets=["controller.enabled=false"])
    assert not manifest.has("Deployment", NAME) and not manifest.has("ServiceAccount", NAME)


def test_with_results_the_controller_checks_schedules_and_stores_nothing() -> None:
    spec = render(sets=["results.enabled=true"]).one("Deployment", NAME)["spec"]["template"][
        "spec"]
    [controller] = spec["containers"]  # the results page is not a container of this pod
    assert controller["name"] == "controller"
    assert "--check-schedules" in controller["command"]
    assert "--results-dir" not in controller["command"]
    assert not any(v["name"] == "results" for v in spec["volumes"])
    plain = render().one("Deployment", NAME)["spec"]["template"]["spec"]["containers"][0]
    assert "--check-schedules" not in plain["command"]
