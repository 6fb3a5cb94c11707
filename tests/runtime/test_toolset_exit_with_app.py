"""Jobs complete (issue 13): in a pod with restartPolicy Never and no native sidecar, the
toolset sidecar exits 0 once the app's processes are gone, when the webhook asked for it with
SIDECAR_DEBUG_EXIT_WITH_APP=true; otherwise it keeps running, as before. Real pods, played by
podman with the pod's restartPolicy."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.runtime import podman_pod

pytestmark = [pytest.mark.runtime, pytest.mark.timeout(600)]

EXIT_WITH_APP = "SIDECAR_DEBUG_EXIT_WITH_APP"
# The app works a few seconds in two processes, as a Job's shell script would, then succeeds.
JOB = "sleep 3 & sleep 4; wait; echo job done"


def job_pod(name: str, exit_with_app: bool) -> dict[str, Any]:
    pod = podman_pod.sample_pod("c", name)
    pod["spec"]["restartPolicy"] = "Never"
    pod["spec"]["containers"][0]["command"] = ["/bin/sh", "-c", JOB]
    # podman hands the new volume to the app's user (10001 in the image), where the kubelet's
    # emptyDir is 0777: as root, the app leaves it writable for the sidecar's session daemon.
    pod["spec"]["containers"][0]["securityContext"] = {"runAsUser": 0}
    # The lttng profile: no capability at all, so the sidecar cannot read the app's
    # /proc/PID/ns links and must tell its own processes from the app's by their cgroup.
    injected = podman_pod.inject(pod, "lttng", None, podman_pod.TOOLSET_IMAGE)
    podman_pod.set_env(injected, podman_pod.SIDECAR, EXIT_WITH_APP,
                       "true" if exit_with_app else None)
    podman_pod.set_env(injected, podman_pod.SIDECAR, "SIDECAR_DEBUG_APP_CONTAINERS", "app")
    return injected


def sidecar_log(name: str) -> str:
    result = subprocess.run(["podman", "logs", name], capture_output=True, text=True, timeout=60)
    return result.stdout + result.stderr


def test_the_sidecar_exits_0_after_the_app_of_a_job(
    runtime_images: None, pod_workdir: Path
) -> None:
    pod = job_pod(podman_pod.unique("rt-job"), exit_with_app=True)
    with podman_pod.played(pod, pod_workdir) as played:
        played.wait_for_log("job done")
        assert played.wait_for_state("app", "exited", timeout=60) == ("exited", 0)
        app_done = time.monotonic()
        state = played.wait_for_state(podman_pod.SIDECAR, "exited", timeout=60)
        waited = time.monotonic() - app_done
        log = sidecar_log(played.container(podman_pod.SIDECAR))
        assert state == ("exited", 0), log
        assert "app processes seen" in log
        assert "the app has exited" in log
        assert "lttng-sessiond stopped" in log
        print(f"sidecar exited {waited:.1f} s after the app")


def test_without_the_setting_the_sidecar_keeps_running(
    runtime_images: None, pod_workdir: Path
) -> None:
    pod = job_pod(podman_pod.unique("rt-nojob"), exit_with_app=False)
    with podman_pod.played(pod, pod_workdir) as played:
        played.wait_for_log("job done")
        assert played.wait_for_state("app", "exited", timeout=60)[0] == "exited"
        time.sleep(8)
        assert played.state(podman_pod.SIDECAR)[0] == "running"
        # Tools still work in the finished pod.
        assert played.exec("toolset-entrypoint", "--wait-ready", "--timeout", "5").returncode == 0
