"""onExpiry `stop` without exec (issue 19): an attached toolset ends itself at the deadline the
webhook wrote into its env. The real entrypoint, in a toolset container of a pod with a shared
PID namespace, stops every process of its own container (a user's shell with it) at
SIDECAR_DEBUG_SESSION_DEADLINE and exits 0, which ends the container; the app's processes,
which it can see, keep running. Plain podman pod: the toolset image, no cluster."""

from __future__ import annotations

import datetime as dt
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.runtime import podman_pod
from webhook.wire import constants

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


def test_the_attached_toolset_ends_itself_at_its_deadline_and_not_the_app(pod: str) -> None:
    app, toolset = f"{pod}-app", f"{pod}-toolset"
    # The app: a process tree of its own, visible to the toolset through the shared PID namespace.
    podman("run", "-d", "--pod", pod, "--name", app, "--entrypoint", "sh", IMAGE, "-c",
           "sleep 3600 & exec sleep 3601")
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=12)
    # The toolset as `attach` adds it: its entrypoint, the marker and the webhook's deadline.
    podman("run", "-d", "--pod", pod, "--name", toolset,
           "-e", f"{constants.ENV_ATTACHED}={constants.ENV_ATTACHED_VALUE}",
           "-e", f"{constants.ENV_SESSION_DEADLINE}={deadline:%Y-%m-%dT%H:%M:%SZ}", IMAGE)
    time.sleep(2)
    # Something a user started in it (as `kubectl exec` would).
    podman("exec", "-d", toolset, "sh", "-c", "exec sleep 3602")
    time.sleep(1)
    seen = podman("exec", toolset, "sh", "-c", "ps -eo args").stdout
    assert "sleep 3600" in seen and "sleep 3602" in seen  # one PID namespace
    assert running(toolset)

    until = time.monotonic() + (deadline - dt.datetime.now(dt.UTC)).total_seconds() + 20
    while running(toolset) and time.monotonic() < until:
        time.sleep(0.5)
    assert not running(toolset), "the toolset container still runs after its deadline"
    ended = dt.datetime.now(dt.UTC)
    assert ended >= deadline - dt.timedelta(seconds=1)  # not before it
    state = podman("inspect", "--format", "{{.State.ExitCode}}", toolset).stdout.strip()
    logs = podman("logs", toolset).stderr + podman("logs", toolset).stdout
    assert state == "0", logs
    assert "stopped at the session's deadline" in logs
    assert running(app)
    left = podman("exec", app, "sh", "-c", "ps -eo args").stdout
    assert "sleep 3600" in left and "sleep 3601" in left
    assert "sleep 3602" not in left
