"""The schedules pass of `sidecar-debug controller`: `tick(api, now, results_dir)`.

Each pass (the controller calls it while it holds the Lease, every --interval seconds):

1. reads the `sidecar-debug.io/schedule` annotations of namespaces and pods
   (webhook.schedules.spec; a bad annotation is logged once per value, with what is wrong);
2. finds the schedules that are due: the last cron minute at or before `now` is later than the
   one this schedule last fired for (kept in RESULTS/.schedules/state.json, so a new leader
   does not repeat what the old one ran). A schedule seen for the first time starts from now;
   a due minute older than STARTING_DEADLINE (the controller was down) is skipped, as a
   CronJob's startingDeadlineSeconds does;
3. picks the pods: the annotated pod, or the namespace's running pods that match the selector
   and have a toolset container (injected or attached), by name, at most maxPods;
4. runs the technique in each pod's toolset container through the Kubernetes API (pods/exec,
   webhook.sessions.session: the same container checks, exec and copy-back as
   `sidecar-debug flamegraph`), in background threads so that the controller's next pass is
   not held up by a recording;
5. stores the folded stacks in the results store (webhook.results.store) and applies the
   retention from the environment (SIDECAR_DEBUG_RESULTS_KEEP runs per pod, default 100;
   SIDECAR_DEBUG_RESULTS_MAX_AGE, default 30d).
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from webhook import constants
from webhook.policy.model import parse_duration
from webhook.results import export, folded
from webhook.results.store import Store, StoreError
from webhook.schedules.spec import Schedule, ScheduleError, parse

log = logging.getLogger(__name__)

STARTING_DEADLINE = timedelta(minutes=5)
STATE_DIR = ".schedules"
STATE_FILE = "state.json"
DEFAULT_KEEP = 100
DEFAULT_MAX_AGE = timedelta(days=30)
WORKERS = 4
EXEC_MARGIN = 300  # seconds beyond the recording for rendering and copying back


@dataclass(frozen=True)
class Profile:
    """What one recording brought back."""

    stacks: dict[folded.Stack, int]
    container: str
    summary: str = ""


class Cluster(Protocol):
    """What the runner needs from the Kubernetes API (ApiCluster; the tests pass a fake)."""

    def namespaces(self) -> list[dict[str, Any]]: ...

    def pods(self) -> list[dict[str, Any]]: ...

    def toolset_container(self, pod: Mapping[str, Any], schedule: Schedule) -> str | None:
        """The pod's toolset container, or None when it has none (it is then not picked)."""
        ...

    def profile(self, namespace: str, pod: str, schedule: Schedule, work: Path) -> Profile: ...


class ProfileError(Exception):
    """A recording failed; the message says where and why."""


# --- the Kubernetes side -------------------------------------------------------------------------

def bpftrace_command(duration: int, frequency: int) -> list[str]:
    """bpftrace's profile probe over the pod's PID namespace (the sidecar shares it with the
    app: its inode number selects the pod's tasks, as bpftrace's `pid` is the host's)."""
    program = (
        f"profile:hz:{frequency} /curtask->nsproxy->pid_ns_for_children->ns.inum == $NS && "
        'comm != \\"bpftrace\\"/ { @[kstack, ustack, comm] = count(); } '
        f"interval:s:{duration} {{ exit(); }}"
    )
    script = f'NS=$(stat -L -c %i /proc/self/ns/pid) && exec bpftrace -q -e "{program}"'
    return ["sh", "-c", script]


_OFFSET = re.compile(r"\+(0x[0-9a-f]+|\d+)$")
_ADDRESS = re.compile(r"^(0x)?[0-9a-f]+\s+")


def _frame(line: str, kernel: bool) -> str:
    name = _ADDRESS.sub("", line.strip()) if " " in line.strip() else line.strip()
    name = re.sub(r"\s+\([^()]*\)$", "", name)  # perf-mode module suffix
    name = _OFFSET.sub("", name)
    name = folded.clean_frame(name)
    return f"{name}_[k]" if kernel else name


def collapse_bpftrace(text: str) -> dict[folded.Stack, int]:
    """bpftrace's printed map `@[kstack, ustack, comm]: count` -> folded stacks
    (comm;user frames root first;kernel frames root first, kernel frames marked _[k]).
    Each entry is `@[` + the frames of each stack, elements separated by lines that start
    with `,` (`@[, ` when the kernel stack is empty), ending with `, comm]: count`."""
    stacks: dict[folded.Stack, int] = {}
    elements: list[list[str]] = []
    inside = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if not inside:
            if not line.startswith("@[") or re.match(r"^@\[.*\]:\s*\d+$", line):
                continue  # not a stack entry (or a one-line entry of another map)
            inside = True
            elements = [[]]
            line = line[2:]
            if not line.strip():
                continue
        end = re.match(r"^(,?)\s*(.*)\]:\s*(\d+)$", line)
        if end:
            if end.group(1) or end.group(2):
                elements.append([end.group(2)] if end.group(2) else [])
            inside = False
            kernel = elements[0] if len(elements) > 2 else []
            user = elements[1] if len(elements) > 2 else elements[0]
            comm = elements[-1][0] if len(elements) > 1 and elements[-1] else "?"
            frames = [folded.clean_frame(comm)]
            frames += [_frame(f, False) for f in reversed(user) if f.strip()]
            frames += [_frame(f, True) for f in reversed(kernel) if f.strip()]
            key = tuple(frames)
            stacks[key] = stacks.get(key, 0) + int(end.group(3))
            continue
        if line.lstrip().startswith(","):
            elements.append([])
            rest = line.lstrip()[1:].strip()
            if rest:
                elements[-1].append(rest)
        elif line.strip():
            elements[-1].append(line)
    return stacks


class ApiCluster:
    """Cluster over a kubernetes.client.ApiClient: lists through webhook.kube.client's raw
    requests, records through webhook.sessions.session.Session."""

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    def _items(self, path: str) -> list[dict[str, Any]]:
        from webhook.kube import client as kube

        answer = kube.request(self.api_client, "GET", path, None, None)
        items = answer.get("items") if isinstance(answer, dict) else None
        return [item for item in items or [] if isinstance(item, dict)]

    def namespaces(self) -> list[dict[str, Any]]:
        return self._items("/api/v1/namespaces")

    def pods(self) -> list[dict[str, Any]]:
        return self._items("/api/v1/pods")

    def _session(self, namespace: str, pod: str, schedule: Schedule) -> Any:
        from webhook.sessions.session import Session

        return Session(api_client=self.api_client, pod=pod, namespace=namespace,
                       container=schedule.container, err=io.StringIO())

    def toolset_container(self, pod: Mapping[str, Any], schedule: Schedule) -> str | None:
        from webhook.sessions.session import SessionError, find_toolset_container

        try:
            return find_toolset_container(dict(pod), schedule.container,
                                          constants.DEFAULT_SIDECAR_NAME)
        except SessionError:
            return None

    def profile(self, namespace: str, pod: str, schedule: Schedule, work: Path) -> Profile:
        from webhook.sessions.session import SessionError, remote_dir

        session = self._session(namespace, pod, schedule)
        try:
            container = session.toolset_container()
            timeout = schedule.duration + EXEC_MARGIN
            if schedule.technique == constants.TECHNIQUE_PERF:
                out = remote_dir("schedule")
                command = ["flamegraph", "--seconds", str(schedule.duration), "--frequency",
                           str(schedule.frequency), "--out", out]
                result = session.exec(command, container=container, timeout=timeout)
                if result.returncode != 0:
                    raise ProfileError(_failure(command, result.returncode, result.stderr))
                contents = session.fetch(out, {"stacks.folded": work / "stacks.folded"},
                                         read=["summary.txt"], container=container)
                session.remove_remote(out, container=container)
                text = (work / "stacks.folded").read_text(encoding="utf-8", errors="replace")
                stacks = folded.parse(text)
                summary = contents["summary.txt"].decode(errors="replace")
            else:
                command = bpftrace_command(schedule.duration, schedule.frequency)
                result = session.exec(command, container=container, timeout=timeout)
                if result.returncode != 0:
                    raise ProfileError(_failure(["bpftrace"], result.returncode, result.stderr))
                stacks = collapse_bpftrace(result.stdout)
                summary = ""
        except SessionError as error:
            raise ProfileError(str(error)) from error
        except folded.FoldedError as error:
            raise ProfileError(f"the stacks that came back are not folded stacks: "
                               f"{error}") from error
        if not stacks:
            raise ProfileError("no samples (was the app on CPU?)")
        return Profile(stacks=stacks, container=container, summary=summary)


def _failure(command: list[str], code: int, stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return f"{command[0]} exited {code}: {lines[-1] if lines else 'no message'}"


# --- state ---------------------------------------------------------------------------------------

class State:
    """When each schedule last fired: RESULTS/.schedules/state.json, read at every pass (another
    replica may have led meanwhile) and replaced atomically. `reported` (the annotation values
    already logged as bad) is this process's own memory, shared across passes."""

    def __init__(self, results_dir: Path, reported: dict[str, str] | None = None) -> None:
        self.path = results_dir / STATE_DIR / STATE_FILE
        self.fired: dict[str, datetime] = {}
        self.reported: dict[str, str] = {} if reported is None else reported
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        for key, value in (data.get("fired") or {}).items() if isinstance(data, dict) else ():
            try:
                self.fired[str(key)] = datetime.fromisoformat(str(value)).astimezone(UTC)
            except ValueError:
                continue

    def save(self, keys: Iterable[str]) -> None:
        """Write the state of the schedules that still exist."""
        keep = set(keys)
        data = {"fired": {key: moment.isoformat() for key, moment in sorted(self.fired.items())
                          if key in keep}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".state-")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=1)
        os.replace(temporary, self.path)


# --- the pass ------------------------------------------------------------------------------------

def _annotation(obj: Mapping[str, Any]) -> str | None:
    metadata = obj.get("metadata") or {}
    value = (metadata.get("annotations") or {}).get(constants.ANNOTATION_SCHEDULE)
    return value if isinstance(value, str) else None


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def _running(pod: Mapping[str, Any]) -> bool:
    metadata = pod.get("metadata") or {}
    return ((pod.get("status") or {}).get("phase") == "Running"
            and not metadata.get("deletionTimestamp"))


def schedules_of(namespaces: list[dict[str, Any]], pods: list[dict[str, Any]],
                 state: State) -> list[Schedule]:
    """Every valid schedule; a bad annotation is logged once per value."""
    found: list[Schedule] = []
    sources: list[tuple[str, str | None, str | None]] = [
        (_name(ns), None, _annotation(ns)) for ns in namespaces]
    sources += [(str((p.get("metadata") or {}).get("namespace") or ""), _name(p), _annotation(p))
                for p in pods]
    for namespace, pod, text in sources:
        if text is None:
            continue
        where = f"{namespace}/{pod}" if pod else namespace
        try:
            found.extend(parse(text, namespace=namespace, pod=pod))
        except ScheduleError as error:
            if state.reported.get(where) != text:
                log.warning("schedule ignored: %s", error)
                state.reported[where] = text
    return found


def due(schedule: Schedule, now: datetime, state: State) -> datetime | None:
    """The cron minute this schedule should fire for now, or None."""
    last_minute = schedule.cron.previous(now)
    fired = state.fired.get(schedule.key)
    if fired is None:
        state.fired[schedule.key] = now.replace(second=0, microsecond=0)
        if last_minute == now.replace(second=0, microsecond=0):
            return last_minute  # first seen exactly in its minute: run it
        return None
    if last_minute is None or last_minute <= fired:
        return None
    state.fired[schedule.key] = last_minute
    if now - last_minute > STARTING_DEADLINE:
        log.warning("schedule %s: the run due at %s was missed (more than %s ago); waiting for "
                    "the next one", schedule.key, last_minute.isoformat(), STARTING_DEADLINE)
        return None
    return last_minute


def pick_pods(schedule: Schedule, pods: list[dict[str, Any]], cluster: Cluster
              ) -> list[tuple[str, str]]:
    chosen = []
    for pod in sorted(pods, key=_name):
        metadata = pod.get("metadata") or {}
        if metadata.get("namespace") != schedule.namespace or not _running(pod):
            continue
        if schedule.pod is not None:
            if _name(pod) != schedule.pod:
                continue
        elif not schedule.selector.matches(_labels(pod)):
            continue
        if cluster.toolset_container(pod, schedule) is None:
            if schedule.pod is not None:
                log.warning("schedule %s: pod %s/%s has no toolset container; label it (or its "
                            "namespace) debug=enabled and recreate it, or attach one",
                            schedule.key, schedule.namespace, schedule.pod)
            continue
        chosen.append((schedule.namespace, _name(pod)))
        if len(chosen) >= schedule.max_pods:
            break
    if not chosen and schedule.pod is None:
        log.warning("schedule %s: no running pod with a toolset container matches %s",
                    schedule.key, schedule.selector.describe())
    return chosen


def record(cluster: Cluster, store: Store, schedule: Schedule, namespace: str, pod: str,
           fired: datetime) -> None:
    """One recording of one pod, stored; failures are logged on one line."""
    incoming = store.root / STATE_DIR / "incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=incoming))
    started = datetime.now(UTC)
    try:
        profile = cluster.profile(namespace, pod, schedule, work)
        run = store.save(namespace, pod, schedule.technique, profile.stacks, started=started,
                         meta={"duration": schedule.duration, "frequency": schedule.frequency,
                               "schedule": schedule.key, "cron": schedule.cron.expression,
                               "due": fired.isoformat(), "container": profile.container,
                               "trigger": "schedule", "summary": profile.summary})
        log.info("schedule %s: stored %s (%d samples)", schedule.key, run.id, run.samples)
        exporters = export.installed()
        if exporters:
            exporters.export(run)
    except (ProfileError, StoreError, OSError) as error:
        log.error("schedule %s: %s/%s: %s", schedule.key, namespace, pod, error)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def retention(environ: Mapping[str, str]) -> tuple[int | None, timedelta | None]:
    """(runs kept per pod, maximum age) from the environment: unset gives the defaults;
    "0" and "" (the chart's way to say so) mean no limit."""
    keep: int | None = DEFAULT_KEEP
    max_age: timedelta | None = DEFAULT_MAX_AGE
    keep_text = environ.get(constants.ENV_RESULTS_KEEP)
    if keep_text is not None:
        if keep_text.strip().isdigit():
            keep = int(keep_text) or None
        elif keep_text.strip():
            log.warning("%s=%r is not a number; keeping %d runs per pod",
                        constants.ENV_RESULTS_KEEP, keep_text, DEFAULT_KEEP)
        else:
            keep = None
    age_text = environ.get(constants.ENV_RESULTS_MAX_AGE)
    if age_text is not None:
        if re.fullmatch(r"([0-9]+[dhms])+", age_text.strip()):
            max_age = parse_duration(age_text.strip()) or None
        elif age_text.strip():
            log.warning("%s=%r is not a duration like 30d; keeping runs for %s",
                        constants.ENV_RESULTS_MAX_AGE, age_text, DEFAULT_MAX_AGE)
        else:
            max_age = None
    return keep, max_age


class Runner:
    """The schedules' memory across passes: state, recordings in flight, the worker threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight: dict[tuple[str, str, str], Future[None]] = {}
        self.executor: ThreadPoolExecutor | None = None
        self.reported: dict[str, str] = {}

    def submit(self, key: tuple[str, str, str], background: bool, *args: Any) -> None:
        with self.lock:
            running = self.in_flight.get(key)
            if running is not None and not running.done():
                log.warning("schedule %s: %s/%s is still being recorded; this run is skipped",
                            *key)
                return
            if not background:
                record(*args)
                return
            if self.executor is None:
                self.executor = ThreadPoolExecutor(WORKERS, thread_name_prefix="schedule")
            self.in_flight[key] = self.executor.submit(record, *args)

    def tick(self, cluster: Cluster, now: datetime, results_dir: Path, *,
             background: bool = True, environ: Mapping[str, str] | None = None) -> None:
        now = now.astimezone(UTC)
        state = State(results_dir, self.reported)
        store = Store(results_dir)
        pods = cluster.pods()
        schedules = schedules_of(cluster.namespaces(), pods, state)
        for schedule in schedules:
            fired = due(schedule, now, state)
            if fired is None:
                continue
            targets = pick_pods(schedule, pods, cluster)
            log.info("schedule %s due at %s: %s; pods: %s", schedule.key, fired.isoformat(),
                     schedule.describe(), ", ".join(p for _, p in targets) or "none")
            for namespace, pod in targets:
                self.submit((schedule.key, namespace, pod), background, cluster, store,
                            schedule, namespace, pod, fired)
        state.save(s.key for s in schedules)
        keep, max_age = retention(os.environ if environ is None else environ)
        for run in store.prune(keep=keep, max_age=max_age, now=now):
            log.info("retention: removed %s", run.id)


_RUNNER = Runner()


def tick(api: Any, now: datetime, results_dir: Path, *, cluster: Cluster | None = None,
         background: bool = True, environ: Mapping[str, str] | None = None) -> None:
    """One schedules pass (see the module doc). `api` is the controller's
    kubernetes.client.ApiClient; `cluster` replaces it in tests."""
    _RUNNER.tick(cluster or ApiCluster(api), now, Path(results_dir), background=background,
                 environ=environ)
