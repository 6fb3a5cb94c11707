"""Debugging sessions from a workstation, through the Kubernetes API only.

Each session command runs one of the toolset scripts (flamegraph, lttng-trace, uprobe-trace,
doctor) in the pod's toolset container over the exec subresource, streams its progress to the
user, and copies the results back as a base64-encoded tar stream over a second exec (what
`kubectl cp` does, without needing kubectl). `attach` adds the toolset to a running pod as an
ephemeral container targeting the app container, for pods that were created before they opted in.

The toolset container of a pod is, in order: the one named with --container; the injected
sidecar (named in the sidecar-debug.io/status annotation, else the configured sidecar name);
the newest running ephemeral container added by `attach`.
"""

from __future__ import annotations

import base64
import io
import json
import os
import secrets
import shlex
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from webhook import constants
from webhook.kube import client as kube

# Exit codes of the session commands (the in-sidecar scripts' own codes pass through).
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NO_TOOLSET = 5  # the pod has no toolset container (not injected, not attached)
EXIT_API = 6  # the Kubernetes API refused or failed

REMOTE_BASE = "/tmp/sidecar-debug"  # noqa: S108 - in the pod, under its emptyDir
ATTACH_PREFIX = constants.DEFAULT_SIDECAR_NAME


class SessionError(Exception):
    """An error the user can act on; `code` is the process exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class ExecResult:
    returncode: int
    stdout: str
    stderr: str


@dataclass
class Session:
    """One pod, reached through an authenticated kubernetes ApiClient."""

    api_client: Any
    pod: str
    namespace: str
    container: str | None = None
    sidecar_name: str = constants.DEFAULT_SIDECAR_NAME
    err: TextIO = field(default_factory=lambda: sys.stderr)

    @property
    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_client)

    # --- pod and container discovery ---------------------------------------------------------

    def read_pod(self) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        try:
            pod: dict[str, Any] = self.api_client.sanitize_for_serialization(
                self.core.read_namespaced_pod(self.pod, self.namespace))
        except ApiException as error:
            raise SessionError(_api_message(error, f"pod {self.namespace}/{self.pod}"),
                               EXIT_API) from error
        return pod

    def toolset_container(self) -> str:
        pod = self.read_pod()
        return find_toolset_container(pod, self.container, self.sidecar_name)

    # --- exec ----------------------------------------------------------------------------------

    def exec(self, command: Sequence[str], *, container: str | None = None,
             on_stderr: Callable[[str], None] | None = None,
             on_stdout: Callable[[str], None] | None = None,
             timeout: float = 3600) -> ExecResult:
        """Run `command` in the toolset container; stream stderr (progress) as it comes."""
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import stream

        target = container or self.toolset_container()
        try:
            response = stream(
                self.core.connect_get_namespaced_pod_exec, self.pod, self.namespace,
                container=target, command=list(command), stdin=False, stdout=True,
                stderr=True, tty=False, _preload_content=False)
        except ApiException as error:
            raise SessionError(_api_message(error, f"exec in {self.pod}/{target}"),
                               EXIT_API) from error
        stdout_parts: list[str] = []
        stderr_parts: list[str] = []
        deadline = time.monotonic() + timeout
        try:
            while response.is_open():
                response.update(timeout=1)
                if response.peek_stdout():
                    chunk = response.read_stdout()
                    stdout_parts.append(chunk)
                    if on_stdout:
                        on_stdout(chunk)
                if response.peek_stderr():
                    chunk = response.read_stderr()
                    stderr_parts.append(chunk)
                    if on_stderr:
                        on_stderr(chunk)
                if time.monotonic() > deadline:
                    raise SessionError(f"{shlex.join(command)} did not finish in {timeout:.0f} s")
            # Every peek reads frames too: the one that met the close frame may have buffered
            # the last output after this loop's reads (a trace copy lost its tail that way).
            for read, parts, callback in (
                (response.read_stdout, stdout_parts, on_stdout),
                (response.read_stderr, stderr_parts, on_stderr),
            ):
                chunk = read(timeout=0)
                if chunk:
                    parts.append(chunk)
                    if callback:
                        callback(chunk)
            returncode = response.returncode
        finally:
            response.close()
        return ExecResult(returncode=int(returncode if returncode is not None else EXIT_FAILED),
                          stdout="".join(stdout_parts), stderr="".join(stderr_parts))

    def progress(self, chunk: str) -> None:
        self.err.write(chunk)
        self.err.flush()

    def fetch(self, remote_dir: str, names: Sequence[str], local_dir: Path,
              container: str | None = None) -> list[Path]:
        """Copy files (or folders) from the toolset container: tar | base64 over exec."""
        quoted = " ".join(shlex.quote(name) for name in names)
        script = f"cd {shlex.quote(remote_dir)} && tar -cf - {quoted} | base64 -w0"
        result = self.exec(["sh", "-c", script], container=container)
        if result.returncode != 0:
            raise SessionError(f"copying {', '.join(names)} from the pod failed: "
                               f"{result.stderr.strip()}")
        local_dir.mkdir(parents=True, exist_ok=True)
        try:
            data = base64.b64decode("".join(result.stdout.split()), validate=True)
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
                for member in archive.getmembers():
                    if not (member.isfile() or member.isdir()) \
                            or member.name.startswith(("/", "..")) or "/../" in member.name:
                        raise SessionError(f"refusing unsafe path {member.name!r} from the pod")
                archive.extractall(local_dir, filter="data")
                return [local_dir / m.name for m in archive.getmembers() if m.isfile()]
        except (ValueError, tarfile.TarError) as error:  # binascii.Error is a ValueError
            raise SessionError(
                f"copying {', '.join(names)} from the pod: the archive arrived incomplete "
                f"({len(result.stdout)} characters, {error}); the files are still in "
                f"{remote_dir} in container {container or 'the toolset container'}: run the "
                "command again, or copy them with kubectl cp"
            ) from error

    def remove_remote(self, remote_dir: str, container: str | None = None) -> None:
        if remote_dir.startswith(REMOTE_BASE + "/"):
            self.exec(["rm", "-rf", remote_dir], container=container)


def find_toolset_container(pod: dict[str, Any], requested: str | None, sidecar_name: str) -> str:
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    names = [c["name"] for c in spec.get("containers") or []]
    init_names = [c["name"] for c in spec.get("initContainers") or []]
    ephemeral = [c["name"] for c in spec.get("ephemeralContainers") or []]
    if requested:
        if requested not in names + init_names + ephemeral:
            raise SessionError(f"pod has no container {requested!r} (containers: "
                               f"{', '.join(names + init_names + ephemeral)})", EXIT_USAGE)
        return requested
    annotation = ((pod.get("metadata") or {}).get("annotations") or {}).get(
        constants.ANNOTATION_STATUS)
    injected = sidecar_name
    if annotation:
        try:
            injected = str(json.loads(annotation).get("container") or sidecar_name)
        except (ValueError, AttributeError):
            pass
    if injected in names or injected in init_names:
        return injected
    running = {
        s["name"] for s in status.get("ephemeralContainerStatuses") or []
        if (s.get("state") or {}).get("running") is not None
    }
    attached = [name for name in ephemeral if name.startswith(ATTACH_PREFIX) and name in running]
    if attached:
        return str(attached[-1])
    raise SessionError(
        f"pod {pod['metadata']['name']} has no toolset container: it was not injected (label "
        "the pod or its namespace debug=enabled and recreate it) and nothing was attached "
        "(`sidecar-debug attach POD` adds one to the running pod)", EXIT_NO_TOOLSET)


def _api_message(error: Any, what: str) -> str:
    reason = getattr(error, "reason", "") or ""
    body = getattr(error, "body", "") or ""
    try:
        message = json.loads(body).get("message", body)
    except (ValueError, AttributeError):
        message = body
    return f"{what}: {getattr(error, 'status', '?')} {reason}: {message}".strip()


def remote_dir(kind: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{REMOTE_BASE}/session-{kind}-{stamp}-{secrets.token_hex(3)}"


# --- commands -------------------------------------------------------------------------------------

def flamegraph(session: Session, *, seconds: float, frequency: int, pid: int | None,
               name: str | None, output: Path | None, keep_remote: bool = False) -> int:
    container = session.toolset_container()
    out = remote_dir("flamegraph")
    command = ["flamegraph", "--seconds", f"{seconds:g}", "--frequency", str(frequency),
               "--out", out]
    if pid is not None:
        command += ["--pid", str(pid)]
    if name:
        command += ["--name", name]
    session.err.write(f"profiling pod {session.namespace}/{session.pod} from container "
                      f"{container} for {seconds:g} s\n")
    result = session.exec(command, container=container, on_stderr=session.progress,
                          timeout=seconds + 600)
    if result.returncode != 0:
        return result.returncode
    target = output or Path(f"flamegraph-{session.pod}.html")
    with _TemporaryDirectory(target.parent) as staging:
        files = session.fetch(out, ["flamegraph.html", "stacks.folded", "summary.txt"], staging,
                              container=container)
        by_name = {path.name: path for path in files}
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(by_name["flamegraph.html"], target)
        folded = target.with_suffix(".folded")
        os.replace(by_name["stacks.folded"], folded)
        summary = by_name["summary.txt"].read_text()
    if not keep_remote:
        session.remove_remote(out, container=container)
    sys.stdout.write(summary)
    sys.stdout.write(f"flame graph:   {target}\nfolded stacks: {folded}\n")
    return EXIT_OK


def trace(session: Session, *, seconds: float, events: str, domains: Sequence[str],
          output: Path | None, keep_remote: bool = False) -> int:
    container = session.toolset_container()
    out = remote_dir("lttng")
    command = ["lttng-trace", "--seconds", f"{seconds:g}", "--events", events, "--out", out,
               "--show", "0"]
    for domain in domains:
        command += ["--domain", domain]
    result = session.exec(command, container=container, on_stderr=session.progress,
                          timeout=seconds + 600)
    if result.returncode != 0:
        session.err.write(result.stdout)
        return result.returncode
    target = output or Path(f"trace-{session.pod}")
    session.fetch(out, ["trace.txt", "trace"], target, container=container)
    if not keep_remote:
        session.remove_remote(out, container=container)
    text = target / "trace.txt"
    lines = text.read_text().splitlines()
    for line in lines[:20]:
        sys.stdout.write(line + "\n")
    sys.stdout.write(f"{len(lines)} events; text: {text}; CTF trace: {target / 'trace'}\n")
    return EXIT_OK


def uprobe(session: Session, arguments: Sequence[str], seconds: float) -> int:
    def show(chunk: str) -> None:
        sys.stdout.write(chunk)
        sys.stdout.flush()

    result = session.exec(["uprobe-trace", *arguments], on_stderr=session.progress,
                          on_stdout=show, timeout=seconds + 600)
    return result.returncode


def doctor(session: Session, *, as_json: bool, expect: str | None) -> int:
    command = ["doctor", *(["--json"] if as_json else []),
               *(["--expect", expect] if expect else [])]
    result = session.exec(command, on_stderr=session.progress)
    sys.stdout.write(result.stdout)
    return result.returncode


# --- attach: ephemeral container ------------------------------------------------------------------

def server_minor_version(api_client: Any) -> int:
    from kubernetes import client

    info = client.VersionApi(api_client).get_code()
    return int("".join(ch for ch in str(info.minor) if ch.isdigit()) or 0)


def ephemeral_container(name: str, image: str, target: str, pull_policy: str,
                        security_context: dict[str, Any] | None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": [constants.TOOLSET_ENTRYPOINT],
        "targetContainerName": target,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if security_context:
        container["securityContext"] = security_context
    return container


def attach(session: Session, *, image: str, target: str | None, pull_policy: str,
           security_context: dict[str, Any] | None, wait_seconds: float = 120) -> int:
    """Add the toolset as an ephemeral container targeting the app container, wait until it
    runs, and say how to use it."""
    from kubernetes.client.exceptions import ApiException

    pod = session.read_pod()
    spec = pod.get("spec") or {}
    app_containers = [c["name"] for c in spec.get("containers") or []]
    if target is None:
        candidates = [name for name in app_containers if name != session.sidecar_name]
        if not candidates:
            raise SessionError("the pod has no app container to target", EXIT_USAGE)
        target = candidates[0]
    elif target not in app_containers:
        raise SessionError(f"pod has no container {target!r} (containers: "
                           f"{', '.join(app_containers)})", EXIT_USAGE)
    name = f"{ATTACH_PREFIX}-{secrets.token_hex(3)}"
    minor = server_minor_version(session.api_client)
    if security_context and minor < 23:
        session.err.write("note: Kubernetes < 1.23 forbids a securityContext on ephemeral "
                          "containers; attaching an unprivileged root container (perf can still "
                          "profile a root app; eBPF needs privileges)\n")
        security_context = None
    container = ephemeral_container(name, image, target, pull_policy, security_context)
    existing = list(spec.get("ephemeralContainers") or [])
    path = f"/api/v1/namespaces/{session.namespace}/pods/{session.pod}/ephemeralcontainers"
    try:
        if minor >= 23:
            # 1.23+: the subresource takes a Pod; a merge patch must carry the whole list.
            body: dict[str, Any] = {"spec": {"ephemeralContainers": existing + [container]}}
            kube.request(session.api_client, "PATCH", path, body,
                  "application/strategic-merge-patch+json")
        else:
            # 1.16-1.22 (alpha/beta): the subresource reads and writes an EphemeralContainers.
            current = kube.request(session.api_client, "GET", path, None, None)
            body = {
                "apiVersion": "v1",
                "kind": "EphemeralContainers",
                "metadata": current.get("metadata") or {"name": session.pod,
                                                        "namespace": session.namespace},
                "ephemeralContainers": list(current.get("ephemeralContainers") or []) + [container],
            }
            kube.request(session.api_client, "PUT", path, body, "application/json")
    except ApiException as error:
        hint = ""
        if error.status == 404:
            hint = (" (ephemeral containers are disabled: Kubernetes < 1.23 needs the "
                    "EphemeralContainers feature gate on the apiserver and kubelet)")
        raise SessionError(_api_message(error, "adding the ephemeral container") + hint,
                           EXIT_API) from error
    session.err.write(f"added ephemeral container {name} ({image}) targeting {target}; "
                      "waiting for it to run\n")
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        statuses = session.read_pod().get("status", {}).get("ephemeralContainerStatuses") or []
        state = next((s.get("state") or {} for s in statuses if s.get("name") == name), {})
        if state.get("running") is not None:
            sys.stdout.write(
                f"{name}\n"
                f"attached: sidecar-debug flamegraph {session.pod} -n {session.namespace} "
                f"--container {name}\n"
                f"   shell: kubectl exec -it {session.pod} -n {session.namespace} -c {name} "
                "-- bash\n")
            return EXIT_OK
        if state.get("terminated"):
            reason = state["terminated"].get("reason") or "terminated"
            raise SessionError(f"ephemeral container {name} stopped: {reason}")
        waiting = (state.get("waiting") or {}).get("reason")
        if waiting in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
            raise SessionError(f"ephemeral container {name}: {waiting} for {image} (is the "
                               "toolset image available to the node?)")
        time.sleep(1)
    raise SessionError(f"ephemeral container {name} was not running after {wait_seconds:.0f} s")


class _TemporaryDirectory:
    """A staging directory next to the output file, so that the final rename is atomic."""

    def __init__(self, parent: Path) -> None:
        self.path = parent / f".sidecar-debug-{secrets.token_hex(4)}"

    def __enter__(self) -> Path:
        self.path.mkdir(parents=True)
        return self.path

    def __exit__(self, *exc: object) -> None:
        import shutil

        shutil.rmtree(self.path, ignore_errors=True)


def api_client_from(kubeconfig: str | None, context: str | None) -> Any:
    """ApiClient for a developer's command: a kubeconfig (--kubeconfig, $KUBECONFIG,
    ~/.kube/config) when there is one, as kubectl does; in-cluster otherwise."""
    try:
        return kube.api_client(kubeconfig, context, kubeconfig_first=True)
    except kube.KubeConfigError as error:
        raise SessionError(
            f"{error}; use --kubeconfig or $KUBECONFIG, or run in a cluster", EXIT_USAGE
        ) from error


def current_namespace(kubeconfig: str | None, context: str | None) -> str:
    return kube.current_namespace(kubeconfig, context)
