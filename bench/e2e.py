"""Sections 4 and 5: pod creation through the real kube-apiserver (the harness's lite cluster),
in a namespace the webhook is called for against one it is not, as latency ratios.

The webhook runs as a local `sidecar-debug serve` bound to its Service's loopback ClusterIP
(lite mode: the apiserver dials the ClusterIP itself), as tests/e2e/test_local_webhook.py does.
Modes: `null` (bench.null_app answers: the apiserver's own cost of calling a webhook),
`fixed-patch` (bench.null_app answers with the webhook's patch at no review cost: what applying
the patch and storing the bigger pod costs the apiserver), `webhook` (default profile lttng: no
grant needed, no SubjectAccessReview), `rbac-cached` (default profile full: SubjectAccessReviews,
answers cached sarCacheSeconds=10) and `rbac-cold` (sarCacheSeconds=0: every review asks the
apiserver: two SubjectAccessReviews and a namespace GET).
"""

from __future__ import annotations

import http.client
import json
import ssl
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from bench import pods, servers
from bench.servers import ServerSpec
from webhook.wire import constants

Log = Callable[[str], None]
WEBHOOK_NAMESPACE = f"{constants.PRODUCT}-bench"
SERVICE = f"{constants.PRODUCT}-bench"
CONFIGURATION = f"{constants.PRODUCT}-bench"
STATUS_ANNOTATION = constants.ANNOTATION_STATUS
OPTED_IN = {constants.LABEL_DEBUG: constants.LABEL_VALUE_ENABLED}
MODES: dict[str, dict[str, str]] = {
    "null": {},  # bench.null_app: what calling any webhook at all costs the apiserver
    # bench.null_app answering with the webhook's patch: applying it and storing the bigger pod
    "fixed-patch": {"BENCH_FIXED_PATCH": "1", "SIDECAR_DEBUG_DEFAULT_PROFILE": "lttng"},
    "webhook": {"SIDECAR_DEBUG_DEFAULT_PROFILE": "lttng"},
    "rbac-cached": {"SIDECAR_DEBUG_DEFAULT_PROFILE": "full"},
    "rbac-cold": {"SIDECAR_DEBUG_DEFAULT_PROFILE": "full", "SIDECAR_DEBUG_SAR_CACHE_SECONDS": "0"},
}


def bench_cluster_dir() -> Path:
    from tests.cluster import binaries

    return binaries.cache_dir() / "bench-cluster"


@contextmanager
def lite_cluster(log: Log, reuse: bool = False) -> Iterator[Any]:
    """The bench's own lite cluster (its own state dir: never another helper's cluster)."""
    with bench_cluster("lite", log, reuse, bench_cluster_dir() / "lite") as cluster:
        yield cluster


@contextmanager
def bench_cluster(mode: str, log: Log, reuse: bool,
                  state_dir: Path | None = None) -> Iterator[Any]:
    """A cluster of `mode` in `state_dir` (None: the mode's default), started and stopped
    here; with `reuse`, the one already running there is used and left running."""
    from tests.cluster.cluster import Cluster

    if reuse:
        existing = Cluster.attach(mode, state_dir)
        if existing is not None:
            log(f"reusing the {mode} cluster" + (f" in {state_dir}" if state_dir else ""))
            yield existing
            return
    cluster = Cluster(mode, state_dir, log=lambda m: log(f"[cluster] {m}"))
    cluster.up()
    try:
        yield cluster
    finally:
        if not reuse:
            cluster.down(quiet=True)


class Api:
    """A keep-alive HTTPS connection to the apiserver as the admin user (what kubectl does,
    minus kubectl's start-up, which would drown the webhook's share in noise)."""

    def __init__(self, cluster: Any) -> None:
        url = urlparse(cluster.apiserver_url)
        self._host, self._port = url.hostname or "127.0.0.1", url.port or 443
        self._context = ssl.create_default_context(cafile=str(cluster.ca_file))
        self._token = cluster.token_for("admin")
        self._connection: http.client.HTTPSConnection | None = None

    def metric_sum_count(self, metric: str, must_contain: str = "") -> tuple[float, float]:
        """Sum and count of a histogram on the apiserver's /metrics (all matching series)."""
        return _sum_count(self.raw("/metrics"), metric, must_contain)

    def raw(self, path: str) -> str:
        return self._exchange("GET", path, None, {})[1].decode()

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        status, data = self._exchange(
            method, path, None if body is None else json.dumps(body),
            {"Content-Type": "application/json", "Accept": "application/json"})
        return status, (json.loads(data) if data else {})

    def _exchange(self, method: str, path: str, body: str | None,
                  headers: dict[str, str]) -> tuple[int, bytes]:
        """One request on the kept-alive connection, reopened once if the server closed it."""
        for attempt in (1, 2):
            if self._connection is None:
                self._connection = http.client.HTTPSConnection(
                    self._host, self._port, context=self._context, timeout=60)
            try:
                self._connection.request(
                    method, path, body=body,
                    headers={"Authorization": f"Bearer {self._token}", **headers})
                response = self._connection.getresponse()
                return response.status, response.read()
            except (http.client.HTTPException, OSError):
                self._connection.close()
                self._connection = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()


def _sum_count(text: str, metric: str, must_contain: str = "") -> tuple[float, float]:
    total = count = 0.0
    for line in text.splitlines():
        if must_contain and must_contain not in line:
            continue
        if line.startswith(metric + "_sum"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith(metric + "_count"):
            count += float(line.rsplit(" ", 1)[1])
    return total, count


def _mean_ms(before: tuple[float, float], after: tuple[float, float]) -> float | None:
    calls = after[1] - before[1]
    return round((after[0] - before[0]) * 1000 / calls, 3) if calls else None


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def make_namespace(api: Api, name: str, labels: dict[str, str]) -> None:
    status, body = api.request("POST", "/api/v1/namespaces",
                               {"metadata": {"name": name, "labels": labels}})
    if status not in (200, 201, 409):
        raise RuntimeError(f"create namespace {name}: {status} {body}")

    def service_account_ready() -> bool:
        code, account = api.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")
        return code == 200 and bool(account.get("secrets"))

    _wait(service_account_ready, 60, f"service account default in {name}")


def create_pod(api: Api, namespace: str, name: str) -> tuple[float, dict[str, Any]]:
    manifest = pods.pod(containers=1, owner=False)
    metadata = manifest["metadata"]
    metadata.pop("generateName")
    metadata["name"] = name
    manifest.pop("status")
    for volume in manifest["spec"]["volumes"]:  # the ServiceAccount admission adds its own
        if volume["name"].startswith("default-token"):
            manifest["spec"]["volumes"].remove(volume)
            break
    for container in manifest["spec"]["containers"]:
        container["volumeMounts"] = [m for m in container["volumeMounts"]
                                     if not m["name"].startswith("default-token")]
    started = time.perf_counter()
    status, body = api.request("POST", f"/api/v1/namespaces/{namespace}/pods", manifest)
    elapsed = (time.perf_counter() - started) * 1000
    if status != 201:
        raise RuntimeError(f"create pod {namespace}/{name}: {status} {json.dumps(body)[:600]}")
    return elapsed, body


def delete_pods(api: Api, namespace: str) -> None:
    api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0")

    def empty() -> bool:
        code, listing = api.request("GET", f"/api/v1/namespaces/{namespace}/pods?limit=1")
        return code == 200 and not listing.get("items")

    _wait(empty, 120, f"pods in {namespace} to be deleted")


def _stats(latencies: Sequence[float]) -> dict[str, float]:
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(round(p / 100 * len(ordered))) - 1)], 3)

    return {"n": len(ordered), "p50_ms": round(statistics.median(ordered), 3),
            "p90_ms": pct(90), "p99_ms": pct(99), "mean_ms": round(statistics.fmean(ordered), 3),
            "max_ms": round(ordered[-1], 3)}


def _configuration(ca_pem: bytes, port: int) -> dict[str, Any]:
    from tests.cluster.webhooks import mutating_webhook_configuration

    return mutating_webhook_configuration(
        CONFIGURATION, service=SERVICE, namespace=WEBHOOK_NAMESPACE, ca_pem=ca_pem, port=port,
        failure_policy="Fail", timeout_seconds=10,
        namespace_selector={"matchLabels": OPTED_IN},
    )


def pod_creation(cluster: Any, workdir: Path, *, modes: Sequence[str], pods_per_run: int,
                 rounds: int, workers: int, threads: int, log: Log) -> dict[str, Any]:
    from tests.cluster.cluster import free_port
    from tests.cluster.webhooks import create_service

    api = Api(cluster)
    results: dict[str, Any] = {"pods_per_namespace": pods_per_run, "rounds": rounds, "modes": {}}
    try:
        make_namespace(api, WEBHOOK_NAMESPACE, {})
        port = free_port()
        cluster_ip = create_service(cluster, SERVICE, WEBHOOK_NAMESPACE, port=port)
        ca, cert, key = servers.make_certs(workdir / "e2e-certs", SERVICE, WEBHOOK_NAMESPACE)
        cluster.kubectl("apply", "-f", "-",
                        input=json.dumps(_configuration(ca.read_bytes(), port)))
        for mode in modes:
            spec = ServerSpec(app="null" if mode in ("null", "fixed-patch") else "webhook",
                              workers=workers, threads=threads,
                              env={**MODES[mode], "KUBECONFIG": str(cluster.kubeconfig),
                                   "SIDECAR_DEBUG_WEBHOOK_NAMESPACE": WEBHOOK_NAMESPACE})
            with servers.serve(spec, cert, key, workdir, host=cluster_ip, port=port) as server:
                time.sleep(2)  # the apiserver picks the webhook configuration up asynchronously
                results["modes"][mode] = _run_mode(api, server.url, mode, pods_per_run, rounds,
                                                   log)
    finally:
        cluster.kubectl("delete", "mutatingwebhookconfiguration", CONFIGURATION,
                        "--ignore-not-found", check=False)
        api.close()
    return results


APISERVER_WEBHOOK_METRIC = "apiserver_admission_webhook_admission_duration_seconds"
WEBHOOK_METRIC = "sidecar_debug_review_duration_seconds"


def _webhook_metrics(url: str) -> tuple[float, float]:
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", context=servers._context(),  # noqa: S310
                                timeout=10) as response:
        return _sum_count(response.read().decode(), WEBHOOK_METRIC)


def _run_mode(api: Api, url: str, mode: str, pods_per_run: int, rounds: int,
              log: Log) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:5]
    labelled, plain = f"bench-{mode}-on-{tag}", f"bench-{mode}-off-{tag}"
    make_namespace(api, labelled, OPTED_IN)
    make_namespace(api, plain, {})
    # Warm-up (not counted): connections, the webhook's first SubjectAccessReview, caches.
    for namespace in (labelled, plain):
        for i in range(10):
            create_pod(api, namespace, f"warm-{i}")
    _, sample = create_pod(api, labelled, "check")
    if mode != "null" and STATUS_ANNOTATION not in (sample["metadata"].get("annotations") or {}):
        raise RuntimeError(f"{mode}: the labelled namespace's pod was not injected")
    for namespace in (labelled, plain):
        delete_pods(api, namespace)
    latencies: dict[str, list[float]] = {"with_webhook": [], "without_webhook": []}
    injected = 0
    per_round = max(1, pods_per_run // rounds)
    started_load = servers.load_average()
    apiserver_before = api.metric_sum_count(APISERVER_WEBHOOK_METRIC, CONFIGURATION)
    webhook_before = _webhook_metrics(url)
    for round_index in range(rounds):
        # Interleaved rounds: a load spike from elsewhere hits both sides alike.
        for key, namespace in (("without_webhook", plain), ("with_webhook", labelled)):
            for i in range(per_round):
                elapsed, pod = create_pod(api, namespace, f"p-{round_index}-{i}")
                latencies[key].append(elapsed)
                if STATUS_ANNOTATION in (pod["metadata"].get("annotations") or {}):
                    injected += 1
            delete_pods(api, namespace)
    apiserver_after = api.metric_sum_count(APISERVER_WEBHOOK_METRIC, CONFIGURATION)
    webhook_after = _webhook_metrics(url)
    with_hook, without = _stats(latencies["with_webhook"]), _stats(latencies["without_webhook"])
    result = {
        "with_webhook": with_hook, "without_webhook": without, "injected": injected,
        # The webhook call as the apiserver times it (dial/TLS/HTTP included), and the review
        # as the webhook times it (parse to response): the difference is the transport.
        "apiserver_webhook_call_mean_ms": _mean_ms(apiserver_before, apiserver_after),
        "webhook_review_mean_ms": _mean_ms(webhook_before, webhook_after),
        "p50_ratio": round(with_hook["p50_ms"] / without["p50_ms"], 3),
        "p99_ratio": round(with_hook["p99_ms"] / without["p99_ms"], 3),
        "p50_delta_ms": round(with_hook["p50_ms"] - without["p50_ms"], 3),
        "load_average": [started_load, servers.load_average()],
    }
    log(f"e2e {mode:12} with {with_hook['p50_ms']:.2f}/{with_hook['p99_ms']:.2f} ms, without "
        f"{without['p50_ms']:.2f}/{without['p99_ms']:.2f} ms (p50/p99); ratio p50 "
        f"{result['p50_ratio']} p99 {result['p99_ratio']}; injected {injected}; webhook call "
        f"{result['apiserver_webhook_call_mean_ms']} ms (apiserver), review "
        f"{result['webhook_review_mean_ms']} ms (webhook)")
    for namespace in (labelled, plain):
        api.request("DELETE", f"/api/v1/namespaces/{namespace}")
    return result


def decode_status(pod: dict[str, Any]) -> dict[str, Any] | None:
    raw = (pod.get("metadata") or {}).get("annotations", {}).get(STATUS_ANNOTATION)
    return json.loads(raw) if raw else None


