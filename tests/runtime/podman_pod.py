"""Run the pod that `sidecar-debug inject` produces with `podman kube play`, and exec in it.

Two adjustments make an injected pod playable by podman 4.3 on this machine, both outside what
the tests check:
- podman refuses annotation values longer than 63 characters (a podman bug: Kubernetes allows
  256 KiB), so the long `sidecar-debug.io/status` JSON is dropped from the played copy;
- podman refuses a hostPath whose path does not exist, where the kubelet creates it empty
  (`/lib/modules` is absent here): such volumes become emptyDirs, which is what the node would
  mount.
- podman turns an emptyDir into a named volume called like the pod's volume, shared by every
  pod with that volume name and kept after `kube down`: two injected pods would share one LTTng
  session daemon's sockets. Each pod's emptyDirs are renamed `<pod>-<volume>` and removed after.
- podman 4.3 ignores a container's `securityContext.seccompProfile` and applies its default
  filter, which refuses perf_event_open: a container asking for `Unconfined` gets podman's
  per-container annotation saying the same.
- podman ignores the postStart hook that holds the app containers until the sidecar is ready
  (`toolset-entrypoint --wait-ready`), so the app's command is wrapped to wait for what the
  hook waits for: the LTTng session daemon's agent.port in the shared /var/run/lttng.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.1.0"
# SIDECAR_DEBUG_TEST_TOOLSET_IMAGE runs the tests against another build (e.g. an older one, to
# see a regression test fail there).
TOOLSET_IMAGE = os.environ.get("SIDECAR_DEBUG_TEST_TOOLSET_IMAGE",
                               f"localhost/sidecar-debug/toolset:{VERSION}")
TOOLSET_SLIM_IMAGE = f"localhost/sidecar-debug/toolset-slim:{VERSION}"
SIDECAR = "debug-toolset"


def sample_image(name: str) -> str:
    return f"localhost/sidecar-debug/sample-{name}:{VERSION}"


def podman_available() -> str | None:
    """Why runtime tests cannot run here, or None."""
    if shutil.which("podman") is None:
        return "podman is not installed (scripts/images.sh setup)"
    if os.geteuid() != 0:
        return "runtime tests need root (privileged containers, perf, eBPF)"
    return None


def build_images(*targets: str) -> None:
    for target in targets:
        subprocess.run([str(ROOT / "scripts" / "images.sh"), target], check=True, timeout=3600)


def sidecar_debug() -> str:
    venv = ROOT / ".venv" / "bin" / "sidecar-debug"
    return str(venv) if venv.exists() else "sidecar-debug"


def inject(pod: dict[str, Any], profile: str, runtime: str | None,
           toolset_image: str, settings: dict[str, str] | None = None) -> dict[str, Any]:
    """`sidecar-debug inject` of the pod; `settings`: more of the webhook's settings, by their
    environment names (SIDECAR_DEBUG_...)."""
    command = [sidecar_debug(), "inject", "-f", "-", "--profile", profile]
    if runtime:
        command += ["--runtime", runtime]
    env = dict(os.environ, SIDECAR_DEBUG_TOOLSET_IMAGE=toolset_image, **(settings or {}))
    result = subprocess.run(command, input=yaml.safe_dump(pod), capture_output=True, text=True,
                            env=env, check=True, timeout=60)
    injected: dict[str, Any] = yaml.safe_load(result.stdout)
    return injected


def playable(pod: dict[str, Any]) -> dict[str, Any]:
    """The adjustments described in the module docstring, on a copy."""
    pod = json.loads(json.dumps(pod))
    annotations = pod["metadata"].get("annotations") or {}
    pod["metadata"]["annotations"] = {k: v for k, v in annotations.items() if len(str(v)) <= 63}
    containers = pod["spec"]["containers"]
    for container in containers:
        seccomp = (container.get("securityContext") or {}).get("seccompProfile") or {}
        if seccomp.get("type") == "Unconfined":
            key = f"container.seccomp.security.alpha.kubernetes.io/{container['name']}"
            pod["metadata"]["annotations"][key] = "unconfined"
    hook = ((containers[0].get("lifecycle") or {}).get("postStart") or {}).get("exec", {})
    if "--wait-ready" in hook.get("command", []):
        for container in containers[1:]:
            if any(m["mountPath"] == "/var/run/lttng" for m in container.get("volumeMounts", [])):
                command = container.get("command") or image_command(container["image"])[0]
                args = container.get("args") or (
                    [] if container.get("command") else image_command(container["image"])[1])
                container["command"] = ["/bin/sh", "-c", WAIT_FOR_SIDECAR, "wait-for-sidecar"]
                container["args"] = [*command, *args]
    name = pod["metadata"]["name"]
    renamed = {}
    for volume in pod["spec"].get("volumes", []):
        if "emptyDir" in volume:
            renamed[volume["name"]] = volume["name"] = f"{name}-{volume['name']}"
    for container in containers + (pod["spec"].get("initContainers") or []):
        for mount in container.get("volumeMounts") or []:
            mount["name"] = renamed.get(mount["name"], mount["name"])
    for volume in pod["spec"].get("volumes", []):
        host_path = volume.get("hostPath")
        if host_path and not os.path.exists(host_path["path"]):
            del volume["hostPath"]
            volume["emptyDir"] = {}
    return pod


# What `toolset-entrypoint --wait-ready` waits for, seen from the app side: the agent port file
# and the apps' registration socket; then a moment for the port file to be complete.
WAIT_FOR_SIDECAR = (
    'i=0; while { [ ! -s /var/run/lttng/agent.port ] || [ ! -S /var/run/lttng/lttng-ust-sock-8 ]; '
    '} && [ "$i" -lt 600 ]; do sleep 0.1; i=$((i+1)); done; sleep 0.5; exec "$@"'
)


def image_command(image: str) -> tuple[list[str], list[str]]:
    """ENTRYPOINT and CMD of an image."""
    result = subprocess.run(["podman", "image", "inspect", "--format", "{{json .Config}}", image],
                            capture_output=True, text=True, check=True, timeout=60)
    config = json.loads(result.stdout)
    return list(config.get("Entrypoint") or []), list(config.get("Cmd") or [])


@dataclass
class PlayedPod:
    name: str
    spec: dict[str, Any]
    file: Path

    def container(self, name: str) -> str:
        return f"{self.name}-{name}"

    def exec(self, *command: str, container: str = SIDECAR, timeout: float = 180,
             check: bool = False) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(["podman", "exec", self.container(container), *command],
                                capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(command)} exited {result.returncode}\nstdout:\n{result.stdout}\n"
                f"stderr:\n{result.stderr}")
        return result

    def state(self, container: str) -> tuple[str, int]:
        """The container's status (running, exited, ...) and exit code."""
        result = subprocess.run(
            ["podman", "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}",
             self.container(container)], capture_output=True, text=True, timeout=60, check=True)
        status, code = result.stdout.split()
        return status, int(code)

    def wait_for_state(self, container: str, status: str, timeout: float = 60) -> tuple[str, int]:
        deadline = time.monotonic() + timeout
        while True:
            state = self.state(container)
            if state[0] == status or time.monotonic() > deadline:
                return state
            time.sleep(0.5)

    def logs(self, container: str = "app") -> str:
        return subprocess.run(["podman", "logs", self.container(container)], capture_output=True,
                              text=True, timeout=60).stdout

    def wait_for_log(self, pattern: str, container: str = "app", timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            logs = self.logs(container)
            if re.search(pattern, logs):
                return logs
            time.sleep(0.5)
        raise AssertionError(f"{pattern!r} not in the logs of {container} after {timeout}s:\n"
                             f"{self.logs(container)[-2000:]}")


def set_env(pod: dict[str, Any], container: str, name: str, value: str | None) -> None:
    """Set (or with None remove) an environment variable of one container of the pod."""
    target = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    env = [item for item in target.get("env") or [] if item.get("name") != name]
    if value is not None:
        env.append({"name": name, "value": value})
    target["env"] = env


def sample_pod(sample: str, name: str, *, annotations: dict[str, str] | None = None,
               env: dict[str, str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": sample_image(sample)}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"debug": "enabled", "app": f"sample-{sample}"},
                     "annotations": annotations or {}},
        "spec": {"containers": [container]},
    }


@contextmanager
def played(pod: dict[str, Any], workdir: Path) -> Iterator[PlayedPod]:
    """`podman kube play` the pod; always `podman kube down` it (and force-remove leftovers)."""
    name = pod["metadata"]["name"]
    path = workdir / f"{name}.yaml"
    spec = playable(pod)
    volumes = [v["name"] for v in spec["spec"].get("volumes", []) if "emptyDir" in v]
    path.write_text(yaml.safe_dump(spec))
    subprocess.run(["podman", "pod", "rm", "-f", name], capture_output=True, timeout=120)
    try:
        started = subprocess.run(["podman", "kube", "play", str(path)], capture_output=True,
                                 text=True, timeout=300)
        if started.returncode != 0:
            raise AssertionError(f"podman kube play {path} exited {started.returncode}:\n"
                                 f"{started.stderr.strip()[-2000:]}")
        yield PlayedPod(name=name, spec=pod, file=path)
    finally:
        subprocess.run(["podman", "kube", "down", str(path)], capture_output=True, timeout=300)
        subprocess.run(["podman", "pod", "rm", "-f", name], capture_output=True, timeout=120)
        if volumes:
            subprocess.run(["podman", "volume", "rm", "-f", *volumes], capture_output=True,
                           timeout=120)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"
