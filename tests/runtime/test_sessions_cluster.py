"""The session commands as a user runs them, against the full one-node cluster (real kubelet,
containerd, exec and ephemeral-containers subresources of Kubernetes 1.20)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.runtime import podman_pod

pytestmark = [pytest.mark.runtime, pytest.mark.cluster, pytest.mark.full,
              pytest.mark.timeout(1200)]

NODE_IMAGE = podman_pod.sample_image("node")
PYTHON_IMAGE = podman_pod.sample_image("python")


@pytest.fixture(scope="module")
def namespace(full_cluster: Any, runtime_images: None) -> Iterator[str]:
    for image in (podman_pod.TOOLSET_IMAGE, NODE_IMAGE, PYTHON_IMAGE):
        full_cluster.load_image(image)
    name = f"sessions-{uuid.uuid4().hex[:6]}"
    full_cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        full_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def settings_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The settings `podman_pod.inject` injects with (defaults, the test's toolset image). The
    commands verify a toolset against the installed settings; a release another test left in
    the cluster has its own (imagePullPolicy: Never), so they are named explicitly."""
    path = tmp_path_factory.mktemp("settings") / "config.yaml"
    path.write_text(yaml.safe_dump({"toolsetImage": podman_pod.TOOLSET_IMAGE}))
    return path


def cli(cluster: Any, config: Path, *args: str,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([podman_pod.sidecar_debug(), *args, "--config", str(config),
                           "--kubeconfig",
                           str(cluster.kubeconfig)], capture_output=True, text=True,
                          timeout=timeout)


def start(cluster: Any, pod: dict[str, Any], namespace: str, app_ready: str) -> str:
    """Create `pod`, wait until it is Ready and its app container has logged `app_ready`."""
    name: str = pod["metadata"]["name"]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(pod))
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", f"pod/{name}",
                    "--timeout=180s")
    wait_for_log(cluster, namespace, name, "app", app_ready)
    return name


def wait_for_log(cluster: Any, namespace: str, pod: str, container: str, text: str) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        logs = cluster.kubectl("logs", "-n", namespace, pod, "-c", container, check=False).stdout
        if text in logs:
            return
        time.sleep(1)
    raise AssertionError(f"{text!r} never appeared in {pod}/{container}")


def test_flamegraph_through_the_kubernetes_api(full_cluster: Any, namespace: str,
                                               settings_file: Path, tmp_path: Path) -> None:
    pod = podman_pod.sample_pod("node", "injected-node",
                                annotations={"sidecar-debug.io/runtime": "node"})
    injected = podman_pod.inject(pod, "full", "node", podman_pod.TOOLSET_IMAGE)
    name = start(full_cluster, injected, namespace, '"rate"')
    output = tmp_path / "out.html"
    result = cli(full_cluster, settings_file, "flamegraph", name, "-n", namespace, "--seconds", "5",
                 "-o", str(output))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "recording" in result.stderr  # progress while recording
    html = output.read_text()
    assert "fibonacci" in html
    folded = output.with_suffix(".folded").read_text().splitlines()
    assert "fibonacci" in folded[0]  # the hottest stack
    assert "fibonacci" in result.stdout.splitlines()[1]

    doctor = cli(full_cluster, settings_file, "doctor", name, "-n", namespace, "--json")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    report = json.loads(doctor.stdout)
    assert report["techniques"]["perf"]["works"]
    assert report["techniques"]["lttng"]["works"]


def test_trace_records_an_app_started_together_with_the_sidecar(
    full_cluster: Any, namespace: str, settings_file: Path, tmp_path: Path,
) -> None:
    """The kubelet runs the sidecar's postStart (`toolset-entrypoint --wait-ready`) before it
    starts the app, so the app finds the LTTng session daemon and registers: no restart."""
    pod = podman_pod.sample_pod("python", "injected-python")
    injected = podman_pod.inject(pod, "lttng", "python", podman_pod.TOOLSET_IMAGE)
    name = start(full_cluster, injected, namespace, "tick")
    output = tmp_path / "trace"
    result = cli(full_cluster, settings_file, "trace", name, "-n", namespace, "--seconds", "3",
                 "-o", str(output))
    assert result.returncode == 0, result.stdout + result.stderr
    text = (output / "trace.txt").read_text()
    assert "lttng_python:event" in text
    assert 'logger_name = "sample"' in text
    assert (output / "trace").is_dir()
    restarts = full_cluster.kubectl_json("get", "pod", name, "-n", namespace)["status"][
        "containerStatuses"]
    assert all(status["restartCount"] == 0 for status in restarts)

    doctor = cli(full_cluster, settings_file, "doctor", name, "-n", namespace, "--json")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    report = json.loads(doctor.stdout)
    assert report["techniques"]["lttng"]["works"]
    assert not report["techniques"]["perf"]["works"]


def test_attach_profiles_a_pod_created_before_opting_in(full_cluster: Any, namespace: str,
                                                        settings_file: Path,
                                                        tmp_path: Path) -> None:
    # Not injected: a pod that was running before anyone labelled it. It runs as root, like
    # most apps: an ephemeral container on 1.20 cannot have a securityContext, and root
    # without CAP_SYS_PTRACE may only profile processes of its own user.
    pod = podman_pod.sample_pod("node", "running-node", env={"NODE_OPTIONS": "--perf-basic-prof"})
    pod["metadata"]["labels"] = {"app": "running-node"}
    pod["spec"]["containers"][0]["securityContext"] = {"runAsUser": 0}
    pod["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    name = start(full_cluster, pod, namespace, '"rate"')

    before = cli(full_cluster, settings_file, "flamegraph", name, "-n", namespace, "--seconds", "1")
    assert before.returncode == 5, before.stderr  # no toolset container yet
    assert "attach" in before.stderr

    attached = cli(full_cluster, settings_file, "attach", name, "-n", namespace, "--image",
                   podman_pod.TOOLSET_IMAGE)
    assert attached.returncode == 0, attached.stdout + attached.stderr
    container = attached.stdout.splitlines()[0]
    assert container.startswith("debug-toolset-")
    spec = full_cluster.kubectl_json("get", "pod", name, "-n", namespace)["spec"]
    assert spec["ephemeralContainers"][0]["targetContainerName"] == "app"

    output = tmp_path / "attached.html"
    result = cli(full_cluster, settings_file, "flamegraph", name, "-n", namespace, "--seconds", "5",
                 "-o", str(output))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fibonacci" in output.read_text()
    assert "fibonacci" in result.stdout.splitlines()[1]
