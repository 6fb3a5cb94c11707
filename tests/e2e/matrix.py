"""The matrix of issue 23 item 2 on the full one-node cluster: every runtime sample x the
profiles that record flame graphs (`perf`, `bcc`, `full`) x how the toolset got there, the app
always as uid 10001:

- `injected`: the webhook injected the toolset at the pod's creation (profile annotation, the
  profile's grant bound to the pod's service account); `sidecar-debug flamegraph POD`;
- `scheduled`: the pod's `sidecar-debug.io/schedule` annotation; the results agent in its
  toolset records and pushes the run, the results service stores it (read back through
  `sidecar-debug results open`);
- `attached`: `sidecar-debug attach POD --profile P`, then `sidecar-debug flamegraph POD
  --container ...` on a pod created before it opted in (not injected: what `attach` is for);
  Kubernetes 1.20 gives an ephemeral container no securityContext, so it runs as root
  without CAP_SYS_PTRACE and must refuse the uid-10001 app in one line.

One injected pod per runtime x profile carries the first two entries, one plain pod per runtime
the three attached toolsets. Cells run concurrently: every pod is created at once (apps
CPU-limited, so the recorders get the CPU; 499 Hz, so that a few seconds of a tenth of a CPU
still give a hundred samples), the scheduled runs are recorded while the sessions record.

A profile whose capabilities the node's container runtime cannot grant (its bounding set lacks
one: CAP_SYS_RESOURCE of `bcc` on this project's build VM) never gets a running toolset: its
injected and scheduled cells then expect the kubelet's refusal (`unable to apply caps`).

Used by tests/e2e/test_matrix_e2e.py (assertions) and bench/matrix.py (`make bench`, the
numbers of docs/techniques.md); plain functions over a `Cluster`, no pytest."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.cluster.cluster import Cluster
from tests.e2e.conftest import RELEASE, REPO, apply, wait_until
from tests.runtime import podman_pod
from tests.runtime.test_flamegraph_runtimes import CASES, app_pod, self_weights

PROFILES = ("perf", "bcc", "full")
ENTRIES = ("injected", "scheduled", "attached")
# The samples of tests/runtime/test_flamegraph_runtimes.py (CASES), as their users run them.
RUNTIMES = ("c", "go", "go1.24", "node", "node-official", "python3.11", "python3.13", "java")
SCHEDULE = "sidecar-debug.io/schedule"
SIDECAR_DEBUG = str(REPO / ".venv" / "bin" / "sidecar-debug")
# Each app may use this much CPU: 24 busy apps on 2 cores would leave the recorders (and the
# kubelet) nothing; at 60m each, 499 Hz still gives ~30 samples a second of its own CPU time.
APP_CPU = "60m"
ATTACH_APP_CPU = "30m"
# A scheduled run is measured only when it started this long after the app's first throughput
# line: at APP_CPU, Debian's Node had not yet optimized its hot function 11 s after it (the
# interpreter's builtins, hidden in libnode, were the hottest frames: the CI run of 2026-12-06).
WARM_SECONDS = 30
# Scheduled runs wait for the namespace's fair share (maxConcurrentRunsPerNamespace) and, when
# early, for the next minute: the last of 16 came 231 s after its pod was ready (2026-12-06).
SCHEDULE_TIMEOUT = 420
FREQUENCY = 499
CANNOT_APPLY_CAPS = "unable to apply caps: operation not permitted"
# Capability numbers (linux/capability.h) of the profiles' `add` lists.
CAPABILITY_BITS = {"CHOWN": 0, "NET_ADMIN": 12, "IPC_LOCK": 14, "SYS_PTRACE": 19,
                   "SYS_ADMIN": 21, "SYS_RESOURCE": 24, "SYSLOG": 34, "PERFMON": 38, "BPF": 39}
# The documented one line of an attached toolset on Kubernetes < 1.23 (docs/techniques.md,
# the matrix), PID replaced.
ATTACHED_REASON = re.compile(
    r"the app \(PID \d+\) runs as uid 10001 and this toolset as uid 0 without CAP_SYS_PTRACE, "
    r"so .*: this is an attached \(ephemeral\) toolset with the runtime's default privileges: "
    r"Kubernetes < 1\.23 gives ephemeral containers no securityContext; inject the toolset "
    r"with the `perf` or `full` profile instead")


@dataclass
class Cell:
    runtime: str
    profile: str
    entry: str
    named_share: float | None = None  # named frames / all sampled frames (bracketed: unnamed)
    samples: int = 0
    hottest: str = ""  # the innermost frame with the most samples (CASES' python_frames prefix)
    code: int | None = None  # the CLI's exit code (sessions)
    error: str = ""  # the `error:` line of a refusal
    seconds: float = 0.0  # command to result (scheduled: pod Ready to the stored run)
    detail: str = field(default="", repr=False)  # output, for assertion messages

    @property
    def key(self) -> str:
        return f"{self.runtime}/{self.profile}/{self.entry}"


def pod_name(runtime: str, profile: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", f"{runtime}-{profile}")


def ungrantable(profile: str, status: Path = Path("/proc/self/status")) -> list[str]:
    """The capabilities of the built-in `profile` outside this host's bounding set (the full
    cluster's kubelet and containerd run here, as root, with the same set)."""
    from webhook.profiles import load_profile_set

    added = ((load_profile_set(None).profiles[profile].security_context.get("capabilities")
              or {}).get("add") or [])
    bounding = int(next(line.split()[1] for line in status.read_text().splitlines()
                        if line.startswith("CapBnd:")), 16)
    return [cap for cap in added if not bounding >> CAPABILITY_BITS.get(cap, 0) & 1]


def matrix_pod(runtime: str, profile: str, namespace: str, seconds: int) -> dict[str, Any]:
    case = CASES[runtime]
    pod = app_pod(case, pod_name(runtime, profile))  # the app as uid 10001, the runtime hint
    pod["metadata"]["namespace"] = namespace
    pod["metadata"]["annotations"].update({
        "sidecar-debug.io/profile": profile,
        SCHEDULE: json.dumps({"cron": "* * * * *", "duration": f"{seconds}s",
                              "frequency": FREQUENCY})})
    return _small(pod, APP_CPU)


def _small(pod: dict[str, Any], cpu_limit: str) -> dict[str, Any]:
    """The app from the node's images, limited to `cpu_limit` (so that the matrix's pods fit
    on 2 cores), gone a second after its delete."""
    app = pod["spec"]["containers"][0]
    app["imagePullPolicy"] = "Never"
    app["resources"] = {"requests": {"cpu": "5m", "memory": "32Mi"},
                        "limits": {"cpu": cpu_limit}}
    pod["spec"]["terminationGracePeriodSeconds"] = 1
    return pod


def attach_pod(runtime: str, namespace: str) -> dict[str, Any]:
    """The runtime's app as uid 10001, not injected (`debug: disabled` in an opted-in
    namespace): a pod created before anyone meant to debug it."""
    pod = app_pod(CASES[runtime], pod_name(runtime, "attach"))
    pod["metadata"]["namespace"] = namespace
    pod["metadata"]["labels"]["debug"] = "disabled"
    return _small(pod, ATTACH_APP_CPU)


def sample_images(runtimes: Iterable[str]) -> list[str]:
    return sorted({podman_pod.sample_image(CASES[runtime].sample) for runtime in runtimes})


def prepare_namespace(cluster: Cluster, namespace: str, profiles: Iterable[str]) -> None:
    """Opted in, and each profile granted to the pods' service account (as a platform team
    would grant it; the default policy gives a pod without its grant `lttng`)."""
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("label", "namespace", namespace, "debug=enabled")
    for profile in profiles:
        cluster.kubectl("create", "rolebinding", f"profile-{profile}", "-n", namespace,
                        f"--clusterrole={RELEASE}-profile-{profile}",
                        "--serviceaccount", f"{namespace}:default")


def cli(cluster: Cluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SIDECAR_DEBUG, *args, "--kubeconfig", str(cluster.kubeconfig)],
                          capture_output=True, text=True, timeout=timeout, check=False)


def share_of(folded: str, prefix: str = "") -> tuple[float | None, int, str]:
    """(named share, samples, hottest leaf) of folded stacks by the toolset's convention: the
    frames it could not name are bracketed ([unknown], [libfoo.so+0x...], [unwind stopped])."""
    frames = named = samples = 0
    for line in folded.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        names = stack.split(";")
        frames += len(names) * int(count)
        named += sum(1 for name in names if not name.startswith("[")) * int(count)
        samples += int(count)
    weights = self_weights(folded, prefix)
    hottest = max(weights, key=lambda leaf: weights[leaf]) if weights else ""
    return (named / frames if frames else None), samples, hottest


def error_line(stderr: str) -> str:
    lines = [line[len("error: "):] for line in stderr.splitlines() if line.startswith("error: ")]
    return lines[0] if len(lines) == 1 else "\n".join(lines)


def injected(cluster: Cluster, namespace: str, runtime: str, profile: str, seconds: int,
             workdir: Path) -> Cell:
    cell = Cell(runtime, profile, "injected")
    output = workdir / f"{pod_name(runtime, profile)}.html"
    started = time.monotonic()
    result = cli(cluster, "flamegraph", pod_name(runtime, profile), "-n", namespace,
                 "--seconds", str(seconds), "--frequency", str(FREQUENCY), "-o", str(output),
                 "--force")
    cell.seconds = time.monotonic() - started
    cell.code, cell.detail = result.returncode, result.stdout + result.stderr
    if result.returncode == 0:
        folded = output.with_suffix(".folded").read_text()
        cell.named_share, cell.samples, cell.hottest = share_of(
            folded, CASES[runtime].python_frames)
    else:
        cell.error = error_line(result.stderr)
    return cell


def attached(cluster: Cluster, namespace: str, runtime: str, profile: str,
             workdir: Path) -> Cell:
    cell = Cell(runtime, profile, "attached")
    name = pod_name(runtime, "attach")
    started = time.monotonic()
    added = cli(cluster, "attach", name, "-n", namespace, "--profile", profile)
    cell.detail = added.stdout + added.stderr
    if added.returncode != 0:
        cell.code, cell.error = added.returncode, error_line(added.stderr) or cell.detail
        return cell
    container = added.stdout.splitlines()[0]
    result = cli(cluster, "flamegraph", name, "-n", namespace, "--container", container,
                 "--seconds", "1", "-o", str(workdir / f"{name}-{profile}.html"))
    cell.seconds = time.monotonic() - started
    cell.code, cell.detail = result.returncode, cell.detail + result.stdout + result.stderr
    cell.error = error_line(result.stderr)
    return cell


class Results:
    """The results service's API as the admin reads it (`sidecar-debug results open`)."""

    def __init__(self, cluster: Cluster, workdir: Path) -> None:
        from tests.e2e.test_schedules import Opened

        self.opened = Opened(cluster, "admin", workdir)

    def runs(self, namespace: str) -> list[dict[str, Any]]:
        status, body = self.opened.get("/api/runs")
        return [run for run in json.loads(body) if run["namespace"] == namespace] \
            if status == 200 else []

    def folded(self, run: dict[str, Any]) -> str:
        status, body = self.opened.get(f"/runs/{run['id']}/stacks.folded")
        assert status == 200, (status, body[:500])
        return body

    def close(self) -> None:
        self.opened.close()


def scheduled(cluster: Cluster, results: Results, namespace: str,
              pods: dict[str, tuple[str, str]], ready: dict[str, float],
              timeout: float) -> list[Cell]:
    """Wait for one stored run per pod that started WARM_SECONDS after its app was ready (an
    earlier one, the cron minute right after the pod started, is passed over: the schedule
    records again the next minute); each pod's schedule is removed once its run is in (an
    every-minute schedule would otherwise keep recording)."""
    cells: dict[str, Cell] = {}
    early: set[str] = set()  # runs passed over, by id
    deadline = time.monotonic() + timeout
    while len(cells) < len(pods) and time.monotonic() < deadline:
        for run in results.runs(namespace):
            name = run["pod"]
            if name in cells or name not in pods or run["id"] in early:
                continue
            warm = time.time() - (time.monotonic() - ready[name]) + WARM_SECONDS
            started = datetime.fromisoformat(run["started"])  # when the plan was handed out
            if started.replace(tzinfo=started.tzinfo or UTC).timestamp() < warm:
                early.add(run["id"])
                continue
            runtime, profile = pods[name]
            cell = Cell(runtime, profile, "scheduled", detail=json.dumps(run))
            cell.named_share, cell.samples, cell.hottest = share_of(
                results.folded(run), CASES[runtime].python_frames)
            cell.seconds = time.monotonic() - ready[name]
            cells[name] = cell
            cluster.kubectl("annotate", "pod", name, "-n", namespace, f"{SCHEDULE}-",
                            check=False)
        time.sleep(3)
    for name, (runtime, profile) in pods.items():
        if name not in cells:
            cells[name] = Cell(runtime, profile, "scheduled",
                               error=f"no run stored within {timeout:.0f} s")
    return list(cells.values())


def wait_ready(cluster: Cluster, namespace: str, names: Iterable[str],
               timeout: float) -> tuple[dict[str, float], dict[str, str]]:
    """When each pod was Ready and its app had logged its first throughput line; and the pods
    whose toolset the node's runtime refused to start (CANNOT_APPLY_CAPS), with its message."""
    ready: dict[str, float] = {}
    refused: dict[str, str] = {}
    waiting = set(names)

    def check() -> bool:
        for pod in cluster.kubectl_json("get", "pods", "-n", namespace)["items"]:
            name = pod["metadata"]["name"]
            statuses = pod.get("status", {}).get("containerStatuses") or []
            if name not in waiting or not statuses:
                continue
            for status in statuses:
                states = (status.get("state") or {}, status.get("lastState") or {})
                messages = [state.get("message") or "" for states_of in states
                            for state in states_of.values()]
                message = next((m for m in messages if CANNOT_APPLY_CAPS in m), None)
                if status["name"] == podman_pod.SIDECAR and message:
                    refused[name] = message.strip()
                    waiting.discard(name)
            if name in waiting and all(s.get("ready") for s in statuses):
                logs = cluster.kubectl("logs", name, "-n", namespace, "-c", "app",
                                       check=False).stdout
                if '"rate"' in logs:
                    waiting.discard(name)
                    ready[name] = time.monotonic()
        return not waiting

    wait_until(check, timeout, f"matrix pods ready: {sorted(waiting)}", interval=3)
    return ready, refused


def attached_cells(cluster: Cluster, namespace: str, runtime: str, profiles: Iterable[str],
                   workdir: Path) -> list[Cell]:
    """One pod, one ephemeral container per profile, one after the other (each adds itself to
    the pod's list of ephemeral containers)."""
    return [attached(cluster, namespace, runtime, profile, workdir) for profile in profiles]


def run(cluster: Cluster, namespace: str, workdir: Path, *,
        runtimes: Iterable[str] = RUNTIMES, profiles: Iterable[str] = PROFILES,
        seconds: int = 3, parallel: int = 2, schedule_timeout: float = SCHEDULE_TIMEOUT,
        log: Callable[[str], None] = print) -> list[Cell]:
    """Every cell, concurrently; the namespace must exist (prepare_namespace), the chart be
    installed with results.enabled=true. Leaves the pods running (the namespace is the
    caller's)."""
    runtimes, profiles = tuple(runtimes), tuple(profiles)
    pods = {pod_name(r, p): (r, p) for r in runtimes for p in profiles}
    plain = {pod_name(r, "attach"): r for r in runtimes}
    started = time.monotonic()
    for runtime, profile in pods.values():
        apply(cluster, matrix_pod(runtime, profile, namespace, seconds))
    for runtime in runtimes:
        apply(cluster, attach_pod(runtime, namespace))
    ready, refused = wait_ready(cluster, namespace, [*pods, *plain], timeout=420)
    log(f"matrix: {len(ready)} pods ready in {time.monotonic() - started:.0f} s"
        + (f"; toolset refused by the node in {sorted(refused)}" if refused else ""))
    for name in pods:
        spec = cluster.kubectl_json("get", "pod", name, "-n", namespace)["spec"]
        toolset, app = spec["containers"][0], spec["containers"][1]
        assert toolset["name"] == podman_pod.SIDECAR, (name, toolset["name"])
        assert app["securityContext"]["runAsUser"] == 10001, (name, app)
    cells = [Cell(r, p, entry, error=refused[name])
             for name, (r, p) in pods.items() if name in refused
             for entry in ("injected", "scheduled")]
    running = {name: cell for name, cell in pods.items() if name not in refused}
    results = Results(cluster, workdir)
    try:
        with ThreadPoolExecutor(max_workers=parallel + 1) as pool:
            waiting = pool.submit(scheduled, cluster, results, namespace, running, ready,
                                  schedule_timeout)
            sessions = [pool.submit(injected, cluster, namespace, r, p, seconds, workdir)
                        for r, p in running.values()]
            cells += [future.result() for future in sessions]
            log(f"matrix: injected cells done at {time.monotonic() - started:.0f} s")
            attaches = [pool.submit(attached_cells, cluster, namespace, r, profiles, workdir)
                        for r in runtimes]
            cells += [cell for future in attaches for cell in future.result()]
            log(f"matrix: attached cells done at {time.monotonic() - started:.0f} s")
            cells += waiting.result()
            log(f"matrix: scheduled cells done at {time.monotonic() - started:.0f} s")
    finally:
        results.close()
    return cells


def as_json(cells: Iterable[Cell]) -> list[dict[str, Any]]:
    return [{k: v for k, v in asdict(cell).items() if k != "detail"} for cell in cells]
