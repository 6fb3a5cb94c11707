"""Debugging sessions from a workstation, through the Kubernetes API only.

Each session command runs one of the toolset scripts (flamegraph, lttng-trace, uprobe-trace,
doctor) in the pod's toolset container over the exec subresource, streams its progress to the
user, and copies the results back as a base64-encoded tar stream over a second exec (what
`kubectl cp` does, without needing kubectl; webhook.sessions.copyback unpacks it as hostile
input). `attach` adds the toolset to a running pod as an ephemeral container targeting the app
container, built from the installed webhook's settings (webhook.sessions.settings).

The toolset container of a pod is, in order: the one named with --container; the injected
sidecar (named in the sidecar-debug.io/status annotation, else the configured sidecar name);
the newest running ephemeral container added by `attach` (our name prefix and marker). The
annotation can be changed by anyone who may patch the pod, and the toolset image is public, so
the chosen container must verify as the guard verifies toolsets (webhook.guard.toolset: rebuilt
from the installed settings for the profile it claims, and compared) and the node must run the
toolset image in it, before anything is run in it or copied from it. What comes back is capped
(--max-output-bytes, --max-copy-bytes).
"""

from __future__ import annotations

import json
import secrets
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

from webhook import render
from webhook.config import Settings, load_settings
from webhook.guard.privilege import strongest_unprivileged
from webhook.inject.attach import (
    attached_name,
    build_attach_container,
    default_target,
    is_attached,
)
from webhook.kube import client as kube
from webhook.profiles import Profile
from webhook.sessions import copyback
from webhook.sessions.settings import InstalledSettings, SettingsNotFound, find_settings
from webhook.stacks import folded as folded_stacks
from webhook.wire import constants
from webhook.wire.exits import EXIT_API, EXIT_FAILED, EXIT_NO_TOOLSET, EXIT_OK, EXIT_USAGE
from webhook.wire.image import same_image
from webhook.wire.pod import named
from webhook.wire.status import read_status

READ_LIMIT = 1 << 20  # a file fetch() returns (a summary, trigger.json): small, held in memory

# Output of one exec kept in memory (stdout and stderr together; a copy-back's archive is
# spooled instead, see copyback): above it the command is stopped, whatever runs in the pod.
DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 * 1024
REMOTE_BASE = "/tmp/sidecar-debug"  # noqa: S108 - in the pod, under its emptyDir
# Kubernetes minor versions: the ephemeralcontainers subresource takes the Pod from 1.22 (an
# EphemeralContainers object before), and an ephemeral container may have a securityContext
# from 1.23.
POD_SHAPED_EPHEMERAL_MINOR = 22
SECURITY_CONTEXT_MINOR = 23


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
    # Where the installed settings are (--settings-configmap), a local settings file (--config)
    # and the toolset image to expect (--image); see settings().
    settings_ref: str | None = None
    config_file: str | None = None
    image: str | None = None
    # Caps on what the pod may send back (--max-output-bytes, --max-copy-bytes).
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    max_copy_bytes: int = copyback.DEFAULT_MAX_COPY_BYTES
    _installed: InstalledSettings | None = field(default=None, init=False, repr=False)
    _settings_error: str = field(default="", init=False, repr=False)

    @property
    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_client)

    # --- pod and container discovery ---------------------------------------------------------

    def read_pod(self) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        # A raw GET: the typed CoreV1Api costs ~1 s of imports (250 pydantic models) in
        # kubernetes >= 35, a third of what a flame graph adds to its recording.
        path = (f"/api/v1/namespaces/{quote(self.namespace, safe='')}"
                f"/pods/{quote(self.pod, safe='')}")
        try:
            pod: dict[str, Any] = kube.request(self.api_client, "GET", path, None, None)
        except ApiException as error:
            raise SessionError(_api_message(error, f"pod {self.namespace}/{self.pod}"),
                               EXIT_API) from error
        return pod

    def settings(self) -> InstalledSettings | None:
        """The installed webhook's settings (--config file, else from the cluster), looked up
        once; None when they cannot be found (then settings_error says why)."""
        if self._installed is None and not self._settings_error:
            try:
                if self.config_file:
                    self._installed = InstalledSettings(
                        load_settings(self.config_file, environ={}), f"file {self.config_file}"
                    )
                else:
                    self._installed = find_settings(self.api_client, self.settings_ref)
            except SettingsNotFound as error:
                self._settings_error = str(error)
            except ValueError as error:  # SettingsError from a local file
                self._settings_error = f"settings file {self.config_file}: {error}"
        return self._installed

    @property
    def settings_error(self) -> str:
        return self._settings_error

    def toolset_container(self) -> str:
        """The pod's toolset container, verified as the guard verifies it (see the module
        doc) before anything is run in it."""
        pod = self.read_pod()
        name = find_toolset_container(pod, self.container, self.sidecar_name)
        try:
            settings = attach_settings(self)  # what the toolset is rebuilt from
        except SessionError as error:
            raise SessionError(f"cannot verify the pod's toolset container, so nothing was run "
                               f"in it: {error}", EXIT_NO_TOOLSET) from error
        verify_toolset_container(pod, name, settings)
        return name

    # --- exec ----------------------------------------------------------------------------------

    def _open_exec(self, target: str, command: Sequence[str]) -> Any:
        """The exec websocket, as `kubernetes.stream.stream` opens it for the typed
        connect_get_namespaced_pod_exec, without importing the typed API (see read_pod)."""
        from kubernetes.stream import stream, ws_client

        if not hasattr(self.api_client, "param_serialize"):  # kubernetes < 35: cheap typed API
            return stream(
                self.core.connect_get_namespaced_pod_exec, self.pod, self.namespace,
                container=target, command=list(command), stdin=False, stdout=True,
                stderr=True, tty=False, _preload_content=False)
        method, url, headers, body, post_params = self.api_client.param_serialize(
            method="GET", resource_path="/api/v1/namespaces/{namespace}/pods/{name}/exec",
            path_params={"namespace": self.namespace, "name": self.pod},
            query_params=[("command", list(command)), ("container", target), ("stderr", True),
                          ("stdin", False), ("stdout", True), ("tty", False)],
            header_params={"Accept": "*/*"}, auth_settings=["BearerToken"],
            collection_formats={"command": "multi"})
        websocket_call: Any = ws_client.websocket_call  # untyped in the kubernetes package
        return websocket_call(self.api_client.configuration, method, url, headers=headers,
                              body=body, post_params=post_params, _preload_content=False,
                              binary=False)

    def exec(self, command: Sequence[str], *, container: str | None = None,
             on_stderr: Callable[[str], None] | None = None,
             on_stdout: Callable[[str], None] | None = None,
             timeout: float = 3600, keep_stdout: bool = True) -> ExecResult:
        """Run `command` in the toolset container; stream stderr (progress) as it comes.
        What is kept in memory (stdout unless `keep_stdout` is False, and stderr) is capped at
        max_output_bytes: past it the exec is closed and SessionError raised."""
        from kubernetes.client.exceptions import ApiException

        target = container or self.toolset_container()
        try:
            response = self._open_exec(target, command)
        except ApiException as error:
            raise SessionError(_api_message(error, f"exec in {self.pod}/{target}"),
                               EXIT_API) from error
        stdout_parts: list[str] = []
        stderr_parts: list[str] = []
        kept = [0]

        def take(chunk: str, parts: list[str] | None,
                 callback: Callable[[str], None] | None) -> None:
            if parts is not None:
                kept[0] += len(chunk)
                if kept[0] > self.max_output_bytes:
                    raise SessionError(
                        f"{shlex.join(command)} sent more than {self.max_output_bytes} bytes of "
                        "output; it was stopped (raise --max-output-bytes if you expect that "
                        "much)")
                parts.append(chunk)
            if callback:
                callback(chunk)

        kept_stdout = stdout_parts if keep_stdout else None
        deadline = time.monotonic() + timeout
        try:
            while response.is_open():
                response.update(timeout=1)
                if response.peek_stdout():
                    take(response.read_stdout(), kept_stdout, on_stdout)
                if response.peek_stderr():
                    take(response.read_stderr(), stderr_parts, on_stderr)
                if time.monotonic() > deadline:
                    raise SessionError(f"{shlex.join(command)} did not finish in {timeout:.0f} s")
            # Every peek reads frames too: the one that met the close frame may have buffered
            # the last output after this loop's reads (a trace copy lost its tail that way).
            for read, parts, callback in (
                (response.read_stdout, kept_stdout, on_stdout),
                (response.read_stderr, stderr_parts, on_stderr),
            ):
                chunk = read(timeout=0)
                if chunk:
                    take(chunk, parts, callback)
            returncode = response.returncode
        finally:
            response.close()
        return ExecResult(returncode=int(returncode if returncode is not None else EXIT_FAILED),
                          stdout="".join(stdout_parts), stderr="".join(stderr_parts))

    def progress(self, chunk: str) -> None:
        self.err.write(chunk)
        self.err.flush()

    def fetch(self, remote_dir: str, destinations: Mapping[str, Path], *,
              read: Sequence[str] = (), read_if_there: Sequence[str] = (), force: bool = False,
              container: str | None = None) -> dict[str, bytes]:
        """Copy `destinations` (remote name -> local path; files or folders) and `read` (small
        files whose content is returned, never written) from `remote_dir` in the toolset
        container: tar | base64 over exec, decoded as it arrives (at most max_copy_bytes) and
        unpacked by webhook.sessions.copyback.
        `read_if_there` are read like `read` when the pod has them (what older toolsets lack)."""
        names = [*destinations, *read]
        try:
            copyback.refuse_overwrite(destinations.values(), force)
        except copyback.CopyError as error:
            raise SessionError(str(error), EXIT_USAGE) from error
        quoted = " ".join(shlex.quote(name) for name in names)
        optional = " ".join(shlex.quote(name) for name in read_if_there)
        script = (f"cd {shlex.quote(remote_dir)} && set -- {quoted} && "
                  f"for f in {optional}; do [ -e \"$f\" ] && set -- \"$@\" \"$f\"; done; "
                  "tar -cf - \"$@\" | base64 -w0")
        where = (f"the files are still in {remote_dir} in container "
                 f"{container or 'the toolset container'}")
        received = copyback.Base64Archive(self.max_copy_bytes)
        try:
            try:
                result = self.exec(["sh", "-c", script], container=container,
                                   on_stdout=received.feed, keep_stdout=False)
            except copyback.CopyError as error:
                raise SessionError(f"copying {', '.join(names)} from the pod: {error}; "
                                   f"nothing was written; {where}") from error
            if result.returncode != 0:
                raise SessionError(f"copying {', '.join(names)} from the pod failed: "
                                   f"{result.stderr.strip()}")
            try:
                archive = received.finish()
            except copyback.CopyError as error:
                raise SessionError(
                    f"copying {', '.join(names)} from the pod: {error}; {where}: run the "
                    "command again, or copy them with kubectl cp") from error
            return self._unpack(archive, names, destinations, read, read_if_there, force, where)
        finally:
            received.close()

    def _unpack(self, archive: Any, names: Sequence[str], destinations: Mapping[str, Path],
                read: Sequence[str], read_if_there: Sequence[str], force: bool,
                where: str) -> dict[str, bytes]:
        unwritten = "; nothing was written"
        first = next(iter(destinations.values()), Path(".") / "x")
        try:
            with copyback.staging_directory(first.parent) as staging:
                arrived = copyback.extract(archive, [*names, *read_if_there], staging,
                                           self.max_copy_bytes)
                missing = [name for name in names if name not in arrived]
                if missing:
                    raise copyback.CopyError(f"the pod sent no {', '.join(missing)}")
                contents: dict[str, bytes] = {}
                for name in [*read, *(name for name in read_if_there if name in arrived)]:
                    if not arrived[name].is_file():
                        raise copyback.CopyError(f"{name!r} is not a file")
                    if arrived[name].stat().st_size > READ_LIMIT:
                        raise copyback.CopyError(f"{name!r} is larger than {READ_LIMIT} bytes")
                    contents[name] = arrived[name].read_bytes()
                unwritten = ""
                copyback.place(
                    {arrived[name]: path for name, path in destinations.items()}, force
                )
        except copyback.CopyError as error:
            raise SessionError(
                f"copying {', '.join(names)} from the pod: {error}{unwritten}; {where}"
            ) from error
        return contents

    def remove_remote(self, remote_dir: str, container: str | None = None) -> None:
        if remote_dir.startswith(REMOTE_BASE + "/"):
            self.exec(["rm", "-rf", remote_dir], container=container)


def find_toolset_container(pod: dict[str, Any], requested: str | None, sidecar_name: str) -> str:
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    names = [c["name"] for c in named(spec.get("containers"))]
    init_names = [c["name"] for c in named(spec.get("initContainers"))]
    ephemeral = named(spec.get("ephemeralContainers"))
    if requested:
        every = names + init_names + [c["name"] for c in ephemeral]
        if requested not in every:
            raise SessionError(f"pod has no container {requested!r} (containers: "
                               f"{', '.join(every)})", EXIT_USAGE)
        return requested
    recorded = read_status(pod).status
    injected = (recorded.container if recorded else "") or sidecar_name
    if injected in names or injected in init_names:
        return injected
    running = {
        s.get("name") for s in named(status.get("ephemeralContainerStatuses"))
        if isinstance(s.get("state"), dict) and s["state"].get("running") is not None
    }
    attached = [c["name"] for c in ephemeral if is_attached(c) and c["name"] in running]
    if attached:
        return str(attached[-1])
    raise SessionError(
        f"pod {pod['metadata']['name']} has no toolset container: it was not injected (label "
        "the pod or its namespace debug=enabled and recreate it) and nothing was attached "
        "(`sidecar-debug attach POD` adds one to the running pod)", EXIT_NO_TOOLSET)


def verify_toolset_container(pod: dict[str, Any], name: str, settings: Settings) -> None:
    """Refuse a container that is not our toolset: it must verify exactly as the guard verifies
    it (webhook.guard.toolset: rebuilt from `settings` for the profile it claims and compared),
    and the image the kubelet runs in it must be the one in its spec. The status annotation
    and the container's name prove nothing: anyone who may patch or create the pod writes
    them, and the toolset image is public."""
    from webhook.guard.toolset import verify_toolsets

    status = pod.get("status") or {}
    pod_name = (pod.get("metadata") or {}).get("name", "")
    statuses = {s["name"]: s for key in ("containerStatuses", "initContainerStatuses",
                                         "ephemeralContainerStatuses")
                for s in named(status.get(key))}

    def refuse(why: str) -> SessionError:
        return SessionError(
            f"container {name!r} of pod {pod_name} is not a debug toolset we can trust: {why}. "
            "Nothing was run in it. Pick the toolset container with --container, or name your "
            "toolset image with --image (or --settings-configmap) if it differs",
            EXIT_NO_TOOLSET,
        )

    report = verify_toolsets(pod, settings, lambda image: image == settings.toolset_image)
    if not any(t.container.name == name for t in report.toolsets):
        why = next((v.message for v in report.violations
                    if v.container is not None and v.container.name == name), None)
        spec = pod.get("spec") or {}
        every = {c["name"]: c for key in ("containers", "initContainers", "ephemeralContainers")
                 for c in named(spec.get(key))}
        image = str((every.get(name) or {}).get("image") or "(none)")
        raise refuse(why or f"it is not what sidecar-debug builds for any profile (it runs "
                     f"image {image}; the toolset image is {settings.toolset_image})")
    running = str((statuses.get(name) or {}).get("image") or "")
    if not running:
        raise refuse("it is not running")
    if not same_image(running, settings.toolset_image):
        raise refuse(f"the node runs image {running} in it, not the toolset image "
                     f"{settings.toolset_image}")


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
               name: str | None, output: Path | None, keep_remote: bool = False,
               force: bool = False, profile_type: str = "cpu") -> int:
    """Record in the toolset, bring back the run (stacks.folded, meta.json) and render the page
    here with the one renderer (webhook.render): the pod sends data, never HTML."""
    target = output or Path(f"flamegraph-{session.pod}.html")
    folded = target.with_suffix(".folded")
    _refuse_overwrite([target, folded], force)
    container = session.toolset_container()
    out = remote_dir("flamegraph")
    command = ["flamegraph", "--seconds", f"{seconds:g}", "--frequency", str(frequency),
               "--out", out]
    if profile_type != "cpu":  # the default: toolsets older than --type still take the command
        command += ["--type", profile_type]
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
    contents = session.fetch(out, {"stacks.folded": folded},
                             read_if_there=["meta.json", "summary.txt"], force=force,
                             container=container)
    if not keep_remote:
        session.remove_remote(out, container=container)
    profile = write_flamegraph(folded, contents.get("meta.json"), target, force=force,
                               title=f"{session.namespace}/{session.pod}")
    # The toolset's summary names the process (and, from toolsets that write meta.json, the
    # named share); what it does not say, the renderer's summary adds.
    sidecar_summary = copyback.terminal_text(contents.get("summary.txt", b""))
    sys.stdout.write(sidecar_summary)
    if "named frames" not in sidecar_summary:
        lines = render.summary(profile, hottest=0 if sidecar_summary else 10)
        sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.write(f"flame graph:   {target}\nfolded stacks: {folded}\n")
    return EXIT_OK


def write_flamegraph(folded_path: Path, meta: bytes | None, target: Path, *, title: str,
                     force: bool = False) -> render.Profile:
    """Render a run brought back from the pod (its folded stacks and meta.json) into `target`,
    which is replaced only with `force`."""
    try:
        stacks = folded_stacks.parse(folded_path.read_text(encoding="utf-8", errors="replace"))
    except folded_stacks.FoldedError as error:
        raise SessionError(f"the pod's stacks.folded ({folded_path}) is not folded stacks: "
                           f"{error}") from error
    profile = render.Profile(stacks, meta=render.read_meta(meta), title=title, name=target.stem)
    page = render.render(profile)
    try:
        with copyback.staging_directory(target.parent) as staging:
            staged = staging / target.name
            staged.write_text(page.html, encoding="utf-8")
            copyback.place({staged: target}, force)
    except copyback.CopyError as error:
        raise SessionError(f"{error}; the folded stacks are in {folded_path}",
                           EXIT_USAGE) from error
    return profile


def trace(session: Session, *, seconds: float, events: str, domains: Sequence[str],
          output: Path | None, keep_remote: bool = False, force: bool = False) -> int:
    target = output or Path(f"trace-{session.pod}")
    destinations = {"trace.txt": target / "trace.txt", "trace": target / "trace"}
    _refuse_overwrite(destinations.values(), force)
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
    session.fetch(out, destinations, force=force, container=container)
    if not keep_remote:
        session.remove_remote(out, container=container)
    text = destinations["trace.txt"]
    lines = text.read_text(errors="replace").splitlines()
    for line in lines[:20]:  # the app's events: its text, escape sequences included
        sys.stdout.write(copyback.terminal_text(line.encode(), 4096).rstrip("\n") + "\n")
    sys.stdout.write(f"{len(lines)} events; text: {text}; CTF trace: {destinations['trace']}\n")
    return EXIT_OK


def _refuse_overwrite(paths: Any, force: bool) -> None:
    """Before recording: an output that exists is kept unless --force (checked again when the
    copy is put in place)."""
    try:
        copyback.refuse_overwrite(paths, force)
    except copyback.CopyError as error:
        raise SessionError(str(error), EXIT_USAGE) from error


def uprobe(session: Session, arguments: Sequence[str], seconds: float) -> int:
    def show(chunk: str) -> None:
        sys.stdout.write(chunk)
        sys.stdout.flush()

    result = session.exec(["uprobe-trace", *arguments], on_stderr=session.progress,
                          on_stdout=show, timeout=seconds + 600)
    return result.returncode


def doctor(session: Session, *, as_json: bool, expect: str | None, as_yaml: bool = False) -> int:
    """The toolset's `doctor` in the pod; its JSON report (as_json), or that report as YAML."""
    command = ["doctor", *(["--json"] if as_json or as_yaml else []),
               *(["--expect", expect] if expect else [])]
    result = session.exec(command, on_stderr=session.progress)
    text = result.stdout
    if as_yaml:
        import yaml

        try:
            text = yaml.safe_dump(json.loads(text), sort_keys=False, allow_unicode=True)
        except ValueError:
            pass  # not the JSON report (an older toolset?): shown as it came
    sys.stdout.write(text)
    return result.returncode


# --- attach: ephemeral container ------------------------------------------------------------------

def server_minor_version(api_client: Any) -> int:
    from kubernetes import client

    info = client.VersionApi(api_client).get_code()
    return int("".join(ch for ch in str(info.minor) if ch.isdigit()) or 0)


def attach_settings(session: Session) -> Settings:
    """The settings `attach` builds from, and a toolset is verified against: the installed
    webhook's; with only --image, the built-in profiles and that image (said on stderr); else a
    refusal that says how to point at the settings."""
    installed = session.settings()
    if installed is not None:
        settings = installed.settings
        if session.image:
            settings = _with_image(settings, session.image)
        return settings
    if session.image:
        session.err.write(f"note: {session.settings_error}; using --image {session.image} "
                          "with the built-in profiles\n")
        return _with_image(load_settings(environ={}), session.image)
    raise SessionError(session.settings_error, EXIT_USAGE)


def _with_image(settings: Settings, image: str) -> Settings:
    import dataclasses

    return dataclasses.replace(settings, toolset_image=image)


def attach(session: Session, *, profile_name: str | None = None, target: str | None = None,
           wait_seconds: float = 120, minor: int | None = None) -> int:
    """Add the toolset as an ephemeral container targeting the app container, built from the
    installed settings; wait until it runs (unless wait_seconds is 0) and say how to use it.
    stdout's first line is the container's name."""
    from kubernetes.client.exceptions import ApiException

    settings = attach_settings(session)
    profile: Profile | None
    if profile_name:
        profile = settings.profiles.get(profile_name)
        if profile is None:
            raise SessionError(f"unknown profile {profile_name!r} (installed profiles: "
                               f"{', '.join(sorted(settings.profiles))})", EXIT_USAGE)
    else:
        profile = strongest_unprivileged(settings.profiles.values())  # needs no grant
    pod = session.read_pod()
    spec = pod.get("spec") or {}
    app_containers = [c["name"] for c in named(spec.get("containers"))]
    if target is None:
        target = default_target(pod, settings)
        if target is None:
            raise SessionError("the pod has no app container to target", EXIT_USAGE)
    elif target not in app_containers:
        raise SessionError(f"pod has no container {target!r} (containers: "
                           f"{', '.join(app_containers)})", EXIT_USAGE)
    name = attached_name(secrets.token_hex(3))
    minor = server_minor_version(session.api_client) if minor is None else minor
    with_security_context = minor >= SECURITY_CONTEXT_MINOR
    if profile is not None and profile.security_context and not with_security_context:
        session.err.write(
            f"note: Kubernetes 1.{minor} forbids a securityContext on ephemeral containers; "
            f"the toolset runs with profile {profile.name!r} but without its securityContext "
            "(perf can still profile an app that runs as root; eBPF needs privileges)\n")
    container = build_attach_container(
        pod, settings, profile, name=name, target=target,
        with_security_context=with_security_context)
    existing = named(spec.get("ephemeralContainers"))
    path = f"/api/v1/namespaces/{session.namespace}/pods/{session.pod}/ephemeralcontainers"
    try:
        if minor >= POD_SHAPED_EPHEMERAL_MINOR:
            # The subresource takes a Pod; the merge patch carries the whole list.
            body: dict[str, Any] = {"spec": {"ephemeralContainers": [*existing, container]}}
            kube.request(session.api_client, "PATCH", path, body,
                         "application/strategic-merge-patch+json")
        else:
            # 1.16-1.21 (alpha): the subresource reads and writes an EphemeralContainers.
            current = kube.request(session.api_client, "GET", path, None, None)
            body = {
                "apiVersion": "v1",
                "kind": "EphemeralContainers",
                "metadata": current.get("metadata") or {"name": session.pod,
                                                        "namespace": session.namespace},
                "ephemeralContainers": [*named(current.get("ephemeralContainers")), container],
            }
            kube.request(session.api_client, "PUT", path, body, "application/json")
    except ApiException as error:
        hint = ""
        if error.status == 404:
            hint = (" (ephemeral containers are disabled: Kubernetes < 1.23 needs the "
                    "EphemeralContainers feature gate on the apiserver and kubelet)")
        raise SessionError(_api_message(error, "adding the ephemeral container") + hint,
                           EXIT_API) from error
    image = container["image"]
    profile_text = f"profile {profile.name}" if profile else "no profile"
    session.err.write(f"added ephemeral container {name} ({image}, {profile_text}) targeting "
                      f"{target}\n")
    usage = (f"{name}\n"
             f"attached: sidecar-debug flamegraph {session.pod} -n {session.namespace} "
             f"--container {name}\n"
             f"   shell: kubectl exec -it {session.pod} -n {session.namespace} -c {name} "
             "-- bash\n")
    if wait_seconds <= 0:
        sys.stdout.write(usage)
        return EXIT_OK
    session.err.write("waiting for it to run\n")
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        statuses = named((session.read_pod().get("status") or {}).get(
            "ephemeralContainerStatuses"))
        state = next((s.get("state") or {} for s in statuses if s.get("name") == name), {})
        if state.get("running") is not None:
            sys.stdout.write(usage)
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
