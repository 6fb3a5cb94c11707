"""onExpiry `stop` for real: the controller's script, exec'd in a toolset container of a pod with a
shared PID namespace, ends that container's processes (so the container stops) and leaves the
app's processes, which it can see, running. Plain podman pod: the toolset image, no cluster."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.runtime import podman_pod
from webhook.controller.expiry import STOP_GRACE_SECONDS, STOP_SCRIPT

IMAGE = podman_pod.TOOLSET_IMAGE


def podman(*args: str, check: bool = True,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check,
                          timeout=timeout)


def running(container: str) -> bool:
    state = podman("inspect", "--format", "{{.State.Running}}", container, check=False)
    return state.stdout.strip() == "true"


@pytest.fixture
def pod() -> Iterator[str]:
    reason = podman_pod.podman_available()
    if reason:
        pytest.skip(reason)
    if podman("image", "exists", IMAGE, check=False).returncode != 0:
        podman_pod.build_images("toolset")
    name = podman_pod.unique("stop")
    podman("pod", "create", "--name", name, "--share", "pid,ipc,net,uts")
    try:
        yield name
    finally:
        podman("pod", "rm", "--force", "--time", "0", name, check=False)


def test_stop_ends_the_toolset_container_and_not_the_app(pod: str) -> None:
    app, toolset = f"{pod}-app", f"{pod}-toolset"
    # The app: a process tree of its own, visible to the toolset through the shared PID namespace.
    podman("run", "-d", "--pod", pod, "--name", app, "--entrypoint", "sh", IMAGE, "-c",
           "sleep 3600 & exec sleep 3601")
    # The toolset as `attach` runs it, plus something a user started in it.
    podman("run", "-d", "--pod", pod, "--name", toolset, "--entrypoint", "sh", IMAGE, "-c",
           "sleep 3602 & exec sleep 3603")
    time.sleep(1)
    seen = podman("exec", toolset, "sh", "-c", "ps -eo args").stdout
    assert "sleep 3600" in seen and "sleep 3602" in seen  # one PID namespace

    answer = podman("exec", toolset, "sh", "-c", STOP_SCRIPT)
    assert answer.returncode == 0 and answer.stdout.startswith("stopping"), answer

    deadline = time.monotonic() + STOP_GRACE_SECONDS + 15
    while running(toolset) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not running(toolset), "the toolset container still runs"
    assert running(app)
    left = podman("exec", app, "sh", "-c", "ps -eo args").stdout
    assert "sleep 3600" in left and "sleep 3601" in left
    assert "sleep 3602" not in left and "sleep 3603" not in left
