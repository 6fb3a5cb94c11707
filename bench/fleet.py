"""Section `fleet`: the results service for a fleet of toolsets, on the real kube-apiserver.

N pods are created as the webhook injects them for results (the injector's own code, through
tests/e2e/test_results_service.py), in N/50 namespaces: half of the namespaces carry a
namespace schedule (every minute, 5 s, at most 2 pods), 2 % of the pods a pod schedule of their
own. They stay Pending (the lite cluster has no node): the service plans from the API objects.
Each pod gets a real token bound to it (TokenRequest with the service's audience, the pod as the
bound object), and a load generator runs one agent per pod with the toolset's own HTTP client
(toolset/bin/results-agent `Client`: a kept-alive TLS connection while calls follow each
other, closed before a wait over 30 s, re-opened when the service closes it, as in the pod): a
plan request, then the wait its `pollSeconds` says (once a minute for a pod with nothing due,
just after the next due minute for a scheduled one), the first polls spread over a minute; for
every run handed out a push of folded stacks after the run's seconds, then the wait, as
`Agent.once` does.

Per N it reports the service's CPU (its gunicorn master and worker, from /proc) and memory
(RSS), plan latency p50/p99 as the agents see it (TLS handshake included) and as the service
measures it, TokenReviews and SubjectAccessReviews per second reaching the apiserver (its own
`apiserver_request_total`), and the apiserver's CPU: in the first poll period (every token is
new: one review each) and in the steady state after it.
"""

from __future__ import annotations

import heapq
import json
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

Log = Callable[[str], None]
PODS_PER_NAMESPACE = 50
POD_SCHEDULE_SHARE = 0.02
NAMESPACE_SCHEDULE = {"cron": "* * * * *", "duration": "5s", "maxPods": 2,
                      "selector": {"matchLabels": {"tier": "web"}}}
POD_SCHEDULE = {"cron": "* * * * *", "duration": "5s"}
FOLDED = "node;main;uv_run;fibonacci 480\nnode;main;uv_run;epoll_wait 15\nnode;main 5\n"
CLK_TCK = os.sysconf("SC_CLK_TCK")
DEFAULT_POLL = 20.0  # the agent's own interval when a plan says none (results-agent)
KEEP_OPEN_SECONDS = 30.0  # results-agent keeps its connection for a next call within this


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of `pid` and its children alive now (gunicorn's master and worker)."""
    total = 0.0
    for task in [pid, *_children(pid)]:
        try:
            fields = Path(f"/proc/{task}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                found.append(int(entry.name))
    return found


def _memory_mib(pid: int, field: str, source: str = "smaps_rollup") -> float:
    """`field` (kB) summed over the service and its children. Rss counts the heap gunicorn's
    master shares copy-on-write with its worker twice; Pss splits each shared page among the
    processes that map it, so its sum is about what the container's cgroup is charged."""
    total = 0
    for task in [pid, *_children(pid)]:
        try:
            for line in Path(f"/proc/{task}/{source}").read_text().splitlines():
                if line.startswith(field + ":"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def _apiserver_counts(cluster: Any) -> dict[str, float]:
    """POSTs of TokenReviews and SubjectAccessReviews the apiserver answered, from its /metrics."""
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    counts = {"tokenreviews": 0.0, "subjectaccessreviews": 0.0}
    for line in str(text).splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        for resource in counts:
            if f'resource="{resource}"' in line and 'verb="POST"' in line:
                counts[resource] += float(line.rsplit(" ", 1)[1])
    return counts


class Agents:
    """One agent per pod on a shared pool of threads: each polls at its own phase."""

    def __init__(self, clients: list[Any], poll: float, threads: int = 48) -> None:
        self.clients = clients
        self.poll = poll
        self.pool = ThreadPoolExecutor(max_workers=threads)
        self.lock = threading.Lock()
        self.due: list[tuple[float, int, str, Any]] = []
        self.latencies: list[tuple[float, float]] = []  # (when, seconds) of plan calls
        self.codes: dict[int, int] = {}
        self.pushes: dict[int, int] = {}
        self.push_times: list[float] = []
        self.stop = threading.Event()
        start = time.monotonic()
        for index in range(len(clients)):
            self.due.append((start + poll * index / len(clients), index, "plan", None))
        heapq.heapify(self.due)

    def _at(self, when: float, index: int, kind: str, item: Any) -> None:
        with self.lock:
            heapq.heappush(self.due, (when, index, kind, item))

    def _plan(self, index: int) -> None:
        began = time.monotonic()
        try:
            status, answer = self.clients[index].call("GET", "/agent/v1/plan")
        except OSError:
            status, answer = 0, {}
        took = time.monotonic() - began
        with self.lock:
            self.latencies.append((began, took))
            self.codes[status] = self.codes.get(status, 0) + 1
        wait = answer.get("pollSeconds") if isinstance(answer, dict) else None
        wait = float(wait) if status == 200 and isinstance(wait, int | float) and \
            5 <= wait <= 600 else DEFAULT_POLL
        runs = answer.get("runs") if status == 200 and isinstance(answer, dict) else None
        if runs:  # recorded (its seconds), pushed, then the wait (Agent.once)
            item = dict(runs[0], wait=wait)
            self._at(time.monotonic() + float(item.get("seconds", 5)), index, "push", item)
        else:
            self._wait(index, wait)

    def _wait(self, index: int, wait: float) -> None:
        if wait > KEEP_OPEN_SECONDS:  # closed before a long wait, as Agent.run does
            self.clients[index].close()
        self._at(time.monotonic() + wait, index, "plan", None)

    def _push(self, index: int, item: dict[str, Any]) -> None:
        body = {"ticket": item["ticket"], "format": "folded", "stacks": FOLDED,
                "meta": {"samples": 500, "named_share": 1.0}, "summary": "fleet bench"}
        try:
            status, _ = self.clients[index].call("POST", "/agent/v1/runs", body)
        except OSError:
            status = 0
        with self.lock:
            self.pushes[status] = self.pushes.get(status, 0) + 1
            self.push_times.append(time.monotonic())
        self._wait(index, float(item["wait"]))

    def run(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                ready = []
                now = time.monotonic()
                while self.due and self.due[0][0] <= now:
                    ready.append(heapq.heappop(self.due))
                wait = (self.due[0][0] - now) if self.due else 0.1
            for _, index, kind, item in ready:
                if kind == "plan":
                    self.pool.submit(self._plan, index)
                else:
                    self.pool.submit(self._push, index, item)
            self.stop.wait(min(max(wait, 0.001), 0.1))

    def window(self, since: float, until: float) -> list[float]:
        with self.lock:
            return [took for when, took in self.latencies if since <= when < until]

    def pushed(self, since: float, until: float) -> int:
        with self.lock:
            return sum(1 for when in self.push_times if since <= when < until)

    def connections(self) -> int:
        """TLS connections the agents opened so far (handshakes the service did)."""
        return sum(int(getattr(client, "connections", 0)) for client in self.clients)


def _percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


@contextmanager
def _running(agents: Agents) -> Iterator[Agents]:
    thread = threading.Thread(target=agents.run, name="fleet-agents", daemon=True)
    thread.start()
    try:
        yield agents
    finally:
        agents.stop.set()
        thread.join(5)
        agents.pool.shutdown(wait=False, cancel_futures=True)


def _populate(cluster: Any, service: Any, size: int, run_id: str, log: Log
              ) -> list[tuple[str, dict[str, Any]]]:
    """N injected pods in N/50 namespaces, schedules mixed: (namespace, pod) each."""
    from tests.e2e import test_results_service as e2e
    from webhook.kube import client as kube
    from webhook.wire import constants

    namespaces = [f"fleet-{run_id}-{n}" for n in range(max(1, size // PODS_PER_NAMESPACE))]
    api = cluster.api_client()
    for number, name in enumerate(namespaces):
        annotations = {constants.ANNOTATION_SCHEDULE: json.dumps(NAMESPACE_SCHEDULE)} \
            if number % 2 == 0 else {}
        kube.request(api, "POST", "/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "annotations": annotations}}, "application/json")
    for name in namespaces:
        e2e.wait_for_account(cluster, name)
    every = max(1, round(1 / POD_SCHEDULE_SHARE))

    def create(index: int) -> tuple[str, dict[str, Any]]:
        namespace = namespaces[index % len(namespaces)]
        manifest = e2e.toolset_pod(service, f"web-{index}", namespace,
                                   schedule=json.dumps(POD_SCHEDULE) if index % every == 0
                                   else None)
        manifest["metadata"]["labels"]["tier"] = "web"
        return namespace, e2e.create(cluster, manifest)

    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=16) as pool:
        created = list(pool.map(create, range(size)))
    log(f"fleet: {size} pods in {len(namespaces)} namespaces in "
        f"{time.monotonic() - began:.0f} s")
    return created


def _tokens(cluster: Any, pods: list[tuple[str, dict[str, Any]]]) -> list[str]:
    from tests.e2e import test_results_service as e2e

    def token(entry: tuple[str, dict[str, Any]]) -> str:
        namespace, pod = entry
        return e2e.token_request(cluster, namespace, "default", audience=e2e.AUDIENCE, pod=pod)

    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(token, pods))


def _service_latency(service: Any) -> tuple[float, float]:
    """(sum, count) of the service's own plan-route histogram."""
    import urllib.request

    with urllib.request.urlopen(service.metrics + "/metrics", timeout=5) as answer:  # noqa: S310
        text = answer.read().decode()
    total = count = 0.0
    for line in text.splitlines():
        if 'route="plan"' not in line:
            continue
        if line.startswith("sidecar_debug_results_request_duration_seconds_sum"):
            total = float(line.rsplit(" ", 1)[1])
        elif line.startswith("sidecar_debug_results_request_duration_seconds_count"):
            count = float(line.rsplit(" ", 1)[1])
    return total, count


def measure(cluster: Any, workdir: Path, size: int, *, steady_seconds: float, poll: float,
            log: Log) -> dict[str, Any]:
    from tests.e2e import test_results_service as e2e
    from tests.unit.toolset.conftest import LIB, load_script

    if str(LIB) not in sys.path:
        sys.path.insert(0, str(LIB))
    agent = load_script("results-agent")
    run_id = uuid.uuid4().hex[:5]
    work = workdir / f"fleet-{size}-{run_id}"
    work.mkdir(parents=True)
    apiserver = int(cluster.state.pids["kube-apiserver"])
    with e2e.running_service(cluster, work) as (service, pid):
        pods = _populate(cluster, service, size, run_id, log)
        began = time.monotonic()
        tokens = _tokens(cluster, pods)
        log(f"fleet: {size} bound tokens in {time.monotonic() - began:.0f} s")
        clients = []
        for number, token in enumerate(tokens):
            path = work / f"token-{number}"
            path.write_text(token)
            clients.append(agent.Client(service.url, service.ca_pem, str(path), ""))
        time.sleep(5)  # the service's watch has every pod
        agents = Agents(clients, poll)
        result: dict[str, Any] = {"pods": size, "namespaces": max(1, size // PODS_PER_NAMESPACE),
                                  "poll_seconds": poll}
        with _running(agents):
            for phase, seconds in (("cold", poll), ("steady", steady_seconds)):
                start = time.monotonic()
                cpu, api_cpu = _cpu_seconds(pid), _cpu_seconds(apiserver)
                reviews = _apiserver_counts(cluster)
                own = _service_latency(service)
                opened = agents.connections()
                time.sleep(seconds)
                elapsed = time.monotonic() - start
                after = _apiserver_counts(cluster)
                own_after = _service_latency(service)
                latencies = agents.window(start, start + elapsed - 2)
                cpu_spent = _cpu_seconds(pid) - cpu
                requests = len(agents.window(start, start + elapsed)) + \
                    agents.pushed(start, start + elapsed)
                mean_own = ((own_after[0] - own[0]) / (own_after[1] - own[1])
                            if own_after[1] > own[1] else None)
                result[phase] = {
                    "seconds": round(elapsed, 1),
                    "service_cores": round(cpu_spent / elapsed, 3),
                    "service_cpu_ms_per_request": round(cpu_spent * 1000 / requests, 2)
                    if requests else None,
                    "load_average": [round(x, 2) for x in os.getloadavg()],
                    "tls_connections_opened": agents.connections() - opened,
                    "service_rss_mib": round(_memory_mib(pid, "VmRSS", "status"), 1),
                    "service_pss_mib": round(_memory_mib(pid, "Pss"), 1),
                    "apiserver_cores": round((_cpu_seconds(apiserver) - api_cpu) / elapsed, 3),
                    "plans": len(latencies),
                    "pushes": agents.pushed(start, start + elapsed),
                    "plans_per_second": round(len(latencies) / elapsed, 1),
                    "plan_p50_ms": _ms(_percentile(latencies, 0.5)),
                    "plan_p99_ms": _ms(_percentile(latencies, 0.99)),
                    "plan_mean_ms_in_service": _ms(mean_own),
                    "token_reviews_per_second": round(
                        (after["tokenreviews"] - reviews["tokenreviews"]) / elapsed, 2),
                    "access_reviews_per_second": round(
                        (after["subjectaccessreviews"] - reviews["subjectaccessreviews"])
                        / elapsed, 2),
                }
                log(f"fleet N={size} {phase}: {json.dumps(result[phase])}")
        result["codes"] = {str(k): v for k, v in sorted(agents.codes.items())}
        result["pushes"] = {str(k): v for k, v in sorted(agents.pushes.items())}
        result["mean_plan_ms"] = _ms(statistics.fmean([t for _, t in agents.latencies])
                                     if agents.latencies else None)
        for client in clients:
            client.close()
    _cleanup(cluster, run_id)
    return result


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _cleanup(cluster: Any, run_id: str) -> None:
    names = cluster.kubectl("get", "namespaces", "-o", "name").stdout.split()
    doomed = [n for n in names if n.startswith(f"namespace/fleet-{run_id}-")]
    if doomed:
        cluster.kubectl("delete", "--wait=false", *doomed, check=False)


def fleet(cluster: Any, workdir: Path, sizes: list[int], *, steady_seconds: float,
          poll: float, log: Log) -> dict[str, Any]:
    runs = [measure(cluster, workdir, size, steady_seconds=steady_seconds, poll=poll, log=log)
            for size in sizes]
    return {"runs": runs, "growth": _growth(runs)}


def _growth(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Cost per pod at each N: flat means linear in N."""
    per_pod: dict[str, list[float | None]] = {"service_cores": [], "apiserver_cores": [],
                                              "service_rss_mib": [], "service_pss_mib": []}
    for run in runs:
        steady = run.get("steady", {})
        for key in per_pod:
            value = steady.get(key)
            per_pod[key].append(None if value is None else round(value / run["pods"] * 1000, 4))
    return {"per_1000_pods": per_pod, "pods": [run["pods"] for run in runs]}
