"""The results service against the real kube-apiserver (lite cluster, no node needed): it runs
as a host process with the chart's own ServiceAccount and RBAC (rendered from the chart), the
toolset agent's HTTP client talks to it over TLS with real projected-style tokens (TokenRequest
bound to each pod, with the service's audience), and readers use their own tokens.

Checked: Kubernetes 1.20 puts the bound pod into the TokenReview's user.extra; a second pod's
token cannot push runs for the first, nor can a token for another audience; a reader without
rights in a namespace sees none of its runs and gets 403 for its pages (and sees them once RBAC
allows); repeated requests always show the same runs (one writer); a poisoned annotation in one
namespace leaves the other namespaces' schedules planned, promptly."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.chart.helm import CHART
from tests.cluster.cluster import Cluster, free_port
from tests.e2e.conftest import wait_until
from tests.unit.results.fake_collector import GrpcCollector, decode, folded_of
from tests.unit.results.fake_sinks import FakeSink, go_pprof_raw, running
from tests.unit.toolset.conftest import LIB, load_script
from webhook.certs import pki
from webhook.certs.tls import write_bundle
from webhook.config import Settings, load_settings
from webhook.inject.sidecar import InjectionPlan, inject_pod
from webhook.kube import client as kube
from webhook.wire import constants

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

RELEASE = "rs"
SYSTEM = "results-system"
SA = f"{RELEASE}-sidecar-debug-results"
AUDIENCE = f"sidecar-debug.io/results/{SYSTEM}/{SA}"
TOOLSET = "localhost/sidecar-debug/toolset:0.1.0"
EVERY_MINUTE = json.dumps({"cron": "* * * * *", "duration": "3s"})
POISON = {
    "nested": "[" * 8000 + "]" * 8000,
    "superscript": '{"cron": "\u00b2 * * * *"}',
    "overflow": '{"cron": "* * * * *", "duration": "99999999999999999999h"}',
    "never-3270": "- &a {cron: '0 0 31 2 *'}\n" + "- *a\n" * 3269,
}


@dataclass
class Service:
    url: str  # https://127.0.0.1:PORT (toolsets, and readers through the Service)
    local: str  # http://127.0.0.1:PORT (the port-forward port)
    ca_pem: str
    log: Path
    directory: Path
    settings: Settings  # the webhook's settings the service plans with (the same file)
    metrics: str  # http://127.0.0.1:PORT (/metrics, /healthz)
    sinks: dict[str, FakeSink]  # results.export's Pyroscope and Parca, in this process


def chart_rbac(cluster: Cluster) -> None:
    """The chart's ServiceAccount, ClusterRole and binding of the results service, as rendered."""
    rendered = cluster.helm("template", RELEASE, str(CHART), "-n", SYSTEM,
                            "--set", "results.enabled=true").stdout
    wanted = {("ServiceAccount", SA), ("ClusterRole", SA), ("ClusterRoleBinding", SA),
              ("ClusterRole", f"{RELEASE}-sidecar-debug-results-reader")}
    documents = [d for d in yaml.safe_load_all(rendered) if isinstance(d, dict)]
    chosen = [d for d in documents if (d["kind"], d["metadata"]["name"]) in wanted]
    assert len(chosen) == len(wanted), [d["metadata"]["name"] for d in chosen]
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                           "items": chosen}))


def token_request(cluster: Cluster, namespace: str, account: str, *, audience: str | None = None,
                  pod: dict[str, Any] | None = None) -> str:
    """What the kubelet asks for a projected token (TokenRequest), bound to `pod` if given."""
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if audience:
        spec["audiences"] = [audience]
    if pod is not None:
        spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1",
                                  "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
    answer = kube.request(cluster.api_client(), "POST",
                          f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                          {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                           "spec": spec}, "application/json")
    return str(answer["status"]["token"])


def kubeconfig_with_token(cluster: Cluster, token: str, path: Path) -> Path:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": "results", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "results"
    path.write_text(yaml.safe_dump(config))
    return path


def wait_for_account(cluster: Cluster, namespace: str, account: str = "default") -> None:
    """Until the account has its token Secret: on 1.20 the ServiceAccount admission plugin
    refuses a pod ("No API token found for service account") before the token controller made
    it, which under load (the fleet bench's 100 namespaces) comes after the account itself."""
    def ready() -> bool:
        found = cluster.kubectl("get", "serviceaccount", account, "-n", namespace,
                                "-o", "jsonpath={.secrets[0].name}", check=False)
        return found.returncode == 0 and bool(found.stdout.strip())

    wait_until(ready, 60, f"{namespace}/{account} and its token Secret")


@pytest.fixture(scope="module")
def sinks() -> Iterator[dict[str, FakeSink]]:
    with running(FakeSink()) as pyroscope, running(FakeSink()) as parca:
        yield {"pyroscope": pyroscope, "parca": parca}


@contextmanager
def running_service(cluster: Cluster, work: Path, env: dict[str, str] | None = None,
                    args: tuple[str, ...] = ()) -> Iterator[tuple[Service, int]]:
    """`sidecar-debug results service` as a host process with the chart's ServiceAccount and
    RBAC, TLS for 127.0.0.1, the webhook settings in `work`/config.yaml: (Service, its PID)."""
    cluster.kubectl("create", "namespace", SYSTEM, check=False)
    chart_rbac(cluster)
    wait_for_account(cluster, SYSTEM, SA)
    kubeconfig = kubeconfig_with_token(cluster, token_request(cluster, SYSTEM, SA),
                                       work / "sa.kubeconfig")
    ca = pki.generate_ca()
    files = write_bundle(work / "tls", ca, pki.generate_serving(ca, ["127.0.0.1", "localhost"]))
    port, local, metrics = free_port(), free_port(), free_port()
    (work / "config.yaml").write_text(yaml.safe_dump({
        "toolsetImage": TOOLSET, "resultsUrl": f"https://127.0.0.1:{port}",
        "resultsAudience": AUDIENCE}))
    store = work / "store"
    store.mkdir()
    log = work / "service.log"
    with open(log, "wb") as output:
        process = subprocess.Popen(
            [str(Path(sys.executable).with_name("sidecar-debug")), "results", "service",
             "--dir", str(store), "--audience", AUDIENCE, "--config", str(work / "config.yaml"),
             "--tls-cert-file", str(files["tls.crt"]), "--tls-key-file", str(files["tls.key"]),
             "--host", "127.0.0.1", "--port", str(port), "--local-port", str(local),
             "--metrics-port", str(metrics), "--kubeconfig", str(kubeconfig), *args],
            stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
            env={**{k: v for k, v in os.environ.items() if k != "KUBECONFIG"}, **(env or {})})
    try:
        def ready() -> bool:
            assert process.poll() is None, log.read_text()
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/healthz",  # noqa: S310
                                        timeout=2) as answer:
                return bool(answer.status == 200)

        wait_until(ready, 60, "the results service ready")
        yield Service(f"https://127.0.0.1:{port}", f"http://127.0.0.1:{local}",
                      files["ca.crt"].read_text(), log, store,
                      load_settings(str(work / "config.yaml"), environ={}),
                      f"http://127.0.0.1:{metrics}", {}), process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="module")
def collector() -> Iterator[GrpcCollector]:
    with GrpcCollector() as grpc_collector:
        yield grpc_collector


@pytest.fixture(scope="module")
def service(lite_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory,
            sinks: dict[str, FakeSink], collector: GrpcCollector) -> Iterator[Service]:
    work = tmp_path_factory.mktemp("results-service")
    export = {"SIDECAR_DEBUG_EXPORT": json.dumps({
        **{kind: {"url": sink.url} for kind, sink in sinks.items()},
        "otlp": {"url": collector.url, "protocol": "grpc"}})}
    with running_service(lite_cluster, work, export) as (started, _):
        started.sinks.update(sinks)
        try:
            yield started
        finally:
            print("\n--- results service log ---\n" + started.log.read_text()[-6000:])


@pytest.fixture(scope="module")
def agent() -> ModuleType:
    if str(LIB) not in sys.path:
        sys.path.insert(0, str(LIB))
    return load_script("results-agent")


def toolset_pod(service: Service, name: str, namespace: str, *,
                schedule: str | None = EVERY_MINUTE, profile: str = "perf") -> dict[str, Any]:
    """The pod as the webhook injects it with the results wiring (its pipeline's own code): the
    service verifies the toolset exactly as the guard does."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {"app": name}}
    if schedule is not None:
        metadata["annotations"] = {constants.ANNOTATION_SCHEDULE: schedule}
    app = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
           "spec": {"containers": [{"name": "app", "image": "app:1"}]}}
    injected, _ = inject_pod(app, InjectionPlan(profile=service.settings.profiles[profile],
                                                results_ca=service.ca_pem, grant="e2e"),
                             service.settings)
    return dict(injected)


def create(cluster: Cluster, manifest: dict[str, Any]) -> dict[str, Any]:
    namespace = manifest["metadata"]["namespace"]
    answer = kube.request(cluster.api_client(), "POST", f"/api/v1/namespaces/{namespace}/pods",
                          manifest, "application/json")
    return dict(answer)


def new_namespace(cluster: Cluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    wait_for_account(cluster, name)
    return name


def client(agent: ModuleType, service: Service, token: str, tmp_path: Path,
           pod: str = "") -> Any:
    token_file = tmp_path / f"token-{uuid.uuid4().hex[:6]}"
    token_file.write_text(token)
    return agent.Client(service.url, service.ca_pem, str(token_file), pod)


def toolset_in_new_namespace(cluster: Cluster, service: Service, agent: ModuleType,
                             tmp_path: Path, prefix: str) -> tuple[str, Any]:
    """A new namespace with the injected pod `web`, and the agent's client with that pod's
    bound token: (namespace, client)."""
    namespace = new_namespace(cluster, prefix)
    pod = create(cluster, toolset_pod(service, "web", namespace))
    return namespace, client(agent, service, token_request(cluster, namespace, "default",
                                                           audience=AUDIENCE, pod=pod), tmp_path)


def plan_for(agent_client: Any, timeout: float = 30) -> list[dict[str, Any]]:
    """Ask until the service's watch has the pod (it sees it within a moment)."""
    def runs() -> list[dict[str, Any]] | None:
        status, answer = agent_client.call("GET", "/agent/v1/plan")
        return list(answer["runs"]) if status == 200 and answer["runs"] else None

    return list(wait_until(runs, timeout, "a plan with a run", interval=0.5))


def reader_get(service: Service, path: str, token: str | None, *, local: bool = True
               ) -> tuple[int, str]:
    base = service.local if local else service.url
    request = urllib.request.Request(base + path)  # noqa: S310 - the test's own URLs
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cadata=service.ca_pem)
    try:
        with urllib.request.urlopen(request, timeout=10,  # noqa: S310 - the test's own URLs
                                    context=None if local else context) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_kubernetes_1_20_binds_the_token_to_the_pod_in_the_token_review(
        lite_cluster: Cluster, service: Service) -> None:
    namespace = new_namespace(lite_cluster, "bound")
    pod = create(lite_cluster, toolset_pod(service, "p", namespace))
    token = token_request(lite_cluster, namespace, "default", audience=AUDIENCE, pod=pod)
    review = kube.request(lite_cluster.api_client(), "POST",
                          "/apis/authentication.k8s.io/v1/tokenreviews",
                          {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                           "spec": {"token": token, "audiences": [AUDIENCE]}},
                          "application/json")["status"]
    print(json.dumps(review, indent=1))
    assert review["authenticated"] and review["audiences"] == [AUDIENCE]
    assert review["user"]["extra"][constants.EXTRA_POD_NAME] == ["p"]
    assert review["user"]["extra"][constants.EXTRA_POD_UID] == [pod["metadata"]["uid"]]


def test_a_pods_token_pushes_only_its_own_runs(lite_cluster: Cluster, service: Service,
                                               agent: ModuleType, tmp_path: Path) -> None:
    namespace = new_namespace(lite_cluster, "push")
    first = create(lite_cluster, toolset_pod(service, "first", namespace))
    second = create(lite_cluster, toolset_pod(service, "second", namespace))
    first_token = token_request(lite_cluster, namespace, "default", audience=AUDIENCE, pod=first)
    second_token = token_request(lite_cluster, namespace, "default", audience=AUDIENCE,
                                 pod=second)
    as_first = client(agent, service, first_token, tmp_path)
    as_second = client(agent, service, second_token, tmp_path)
    [run] = plan_for(as_first)
    assert (run["technique"], run["seconds"], run["schedule"]) == (
        "perf", 3, f"pod/{namespace}/first#0")
    push = {"ticket": run["ticket"], "format": "folded", "stacks": "node;main;fibonacci 97\n"}

    status, answer = as_second.call("POST", "/agent/v1/runs", push)
    assert status == 403 and f"planned for pod {namespace}/first" in answer["error"]
    # Claiming to be the other pod does not help: the token says which pod it is.
    status, answer = client(agent, service, second_token, tmp_path, "first").call(
        "POST", "/agent/v1/runs", push)
    assert status == 403 and "bound to pod" in answer["error"]
    # A token of the right pod for another audience (the apiserver's own) is refused.
    apiserver_token = token_request(lite_cluster, namespace, "default", pod=first)
    status, answer = client(agent, service, apiserver_token, tmp_path).call(
        "POST", "/agent/v1/runs", push)
    assert status == 401 and "not accepted" in answer["error"]
    status, answer = client(agent, service, "garbage", tmp_path).call("GET", "/agent/v1/plan")
    assert status == 401

    status, answer = as_first.call("POST", "/agent/v1/runs", push)
    assert status == 201, answer
    assert answer["run"].startswith(f"{namespace}/first/") and answer["samples"] == 97
    stored = list((service.directory / namespace).iterdir())
    assert [p.name for p in stored] == ["first"]
    meta = json.loads(next((stored[0]).iterdir()).joinpath("meta.json").read_text())
    assert meta["schedule"] == f"pod/{namespace}/first#0" and meta["trigger"] == "schedule"
    # The ticket is spent: a replay is refused.
    assert as_first.call("POST", "/agent/v1/runs", push)[0] == 409


def test_readers_see_only_what_rbac_lets_them_read(lite_cluster: Cluster, service: Service,
                                                   agent: ModuleType, tmp_path: Path) -> None:
    namespace, as_pod = toolset_in_new_namespace(lite_cluster, service, agent, tmp_path,
                                                 "readers")
    [run] = plan_for(as_pod)
    status, answer = as_pod.call("POST", "/agent/v1/runs", {
        "ticket": run["ticket"], "stacks": "main;secret_sauce 5\n"})
    assert status == 201
    run_id = answer["run"]

    assert reader_get(service, "/", None)[0] == 401
    alice = lite_cluster.token_for("alice")
    status, page = reader_get(service, "/", alice)
    assert status == 200 and namespace not in page and "secret_sauce" not in page
    status, listed = reader_get(service, "/api/runs", alice)
    assert status == 200 and not [r for r in json.loads(listed) if r["namespace"] == namespace]
    for path in (f"/runs/{run_id}/", f"/runs/{run_id}/stacks.folded",
                 f"/runs/{namespace}/web/20000101T000000Z-perf/",  # absent: 403 all the same
                 f"/diff?a={run_id}&b={run_id}"):
        status, body = reader_get(service, path, alice)
        assert status == 403, (path, status, body)
        assert "debugresults.sidecar-debug.io" in body and "secret_sauce" not in body

    admin = lite_cluster.token_for("admin")
    status, page = reader_get(service, f"/runs/{run_id}/stacks.folded", admin, local=False)
    assert status == 200 and "secret_sauce" in page  # through the TLS port too

    lite_cluster.kubectl("create", "rolebinding", "alice-reads", "-n", namespace,
                         f"--clusterrole={RELEASE}-sidecar-debug-results-reader", "--user=alice")

    def sees() -> bool:
        status, body = reader_get(service, f"/runs/{run_id}/stacks.folded", alice)
        return status == 200 and "secret_sauce" in body

    wait_until(sees, 30, "alice reads the run once RBAC allows it (answers cached 10 s)")


def reader_pages(service: Service, path: str, token: str) -> list[list[str]]:
    """Follow /api/runs's Link rel="next" from `path`: the run ids of each page."""
    pages = []
    while path:
        request = urllib.request.Request(service.local + path)  # noqa: S310 - the test's URL
        request.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
            pages.append([run["id"] for run in json.loads(answer.read())])
            link = answer.headers.get("Link") or ""
        path = link[1:link.index(">")] if link else ""
    return pages


def test_readers_page_through_runs_of_the_namespaces_they_may_read(
        lite_cluster: Cluster, service: Service) -> None:
    """Runs stored by another process (an index shared through the volume) page through the
    real service: pages chain newest first without repeats, filters hold across pages, a
    reader pages only through the namespaces RBAC lets them read, bad input is a 400."""
    from datetime import UTC, datetime, timedelta

    from webhook.results.store import Store

    mine, other = new_namespace(lite_cluster, "pages"), new_namespace(lite_cluster, "hidden")
    store, start = Store(service.directory), datetime.now(UTC) - timedelta(days=2)
    stored = [store.save(mine, f"web-{i % 3}", "perf" if i % 2 else "py-spy",
                         {("main", f"f{i}"): i + 1}, started=start + timedelta(minutes=i)).id
              for i in range(25)]
    for i in range(5):
        store.save(other, "db", "perf", {("main",): 1}, started=start + timedelta(minutes=i))
    newest_first = list(reversed(stored))
    admin, alice = lite_cluster.token_for("admin"), lite_cluster.token_for("alice")
    pages = reader_pages(service, f"/api/runs?limit=10&namespace={mine}", admin)
    assert [len(page) for page in pages] == [10, 10, 5]
    assert [run for page in pages for run in page] == newest_first
    perf = reader_pages(service, f"/api/runs?limit=4&namespace={mine}&technique=perf&pod=web-1",
                        admin)
    assert [run for page in perf for run in page] == [
        run for run in newest_first if run.endswith("-perf") and "/web-1/" in run]

    lite_cluster.kubectl("create", "rolebinding", "alice-pages", "-n", mine,
                         f"--clusterrole={RELEASE}-sidecar-debug-results-reader", "--user=alice")

    def alices() -> list[str] | None:
        found = [run for page in reader_pages(service, "/api/runs?limit=7", alice)
                 for run in page]
        return found if set(newest_first) <= set(found) else None

    seen = wait_until(alices, 30, "alice pages through her namespace's runs (SAR cached 10 s)")
    assert not [run for run in seen if run.startswith(f"{other}/")]
    status, body = reader_get(service, f"/api/runs?namespace={other}", alice)
    assert status == 403 and "debugresults.sidecar-debug.io" in body
    status, body = reader_get(service, "/api/runs?page=not-a-token", admin)
    assert status == 400 and "page token" in json.loads(body)["error"]
    status, body = reader_get(service, "/api/runs?limit=100000", admin, local=False)
    assert status == 400 and "limit" in json.loads(body)["error"]


def test_repeated_requests_always_show_the_same_runs(lite_cluster: Cluster,
                                                    service: Service) -> None:
    """One service, one store: no request lands on a replica with a store of its own (the
    issue's split brain: 3 of 6 requests showed no runs)."""
    admin = lite_cluster.token_for("admin")
    answers = set()
    for _ in range(8):
        status, body = reader_get(service, "/api/runs", admin, local=False)
        assert status == 200
        answers.add(json.dumps(sorted(r["id"] for r in json.loads(body))))
    assert len(answers) == 1


def test_a_poisoned_namespace_leaves_the_others_schedules_running(
        lite_cluster: Cluster, service: Service, agent: ModuleType, tmp_path: Path) -> None:
    poisoned = new_namespace(lite_cluster, "poisoned")
    for index, text in enumerate(POISON.values()):
        create(lite_cluster, toolset_pod(service, f"bad-{index}", poisoned, schedule=text))
    lite_cluster.kubectl("annotate", "namespace", poisoned,
                         f"{constants.ANNOTATION_SCHEDULE}={POISON['never-3270']}")
    healthy = new_namespace(lite_cluster, "healthy")
    pod = create(lite_cluster, toolset_pod(service, "web", healthy))
    as_pod = client(agent, service, token_request(lite_cluster, healthy, "default",
                                                  audience=AUDIENCE, pod=pod), tmp_path)
    bad = create(lite_cluster, toolset_pod(service, "victim", poisoned, schedule=None))
    as_bad = client(agent, service, token_request(lite_cluster, poisoned, "default",
                                                  audience=AUDIENCE, pod=bad), tmp_path)
    time.sleep(2)  # the service's watch has every pod and annotation now
    timings = []
    for _ in range(3):  # the poisoned namespace's pods ask too, every poll
        started = time.monotonic()
        status, answer = as_bad.call("GET", "/agent/v1/plan")
        timings.append(time.monotonic() - started)
        assert status == 200 and answer["runs"] == []
    started = time.monotonic()
    [run] = plan_for(as_pod)
    timings.append(time.monotonic() - started)
    print(f"plan requests took {', '.join(f'{t * 1000:.0f} ms' for t in timings)}")
    assert run["schedule"] == f"pod/{healthy}/web#0"
    assert max(timings) < 2.0, timings  # the old parser: 10.8 s per pass, or every pass lost
    log = service.log.read_text()
    assert "schedule ignored" in log and "Traceback" not in log


def metric(service: Service, name: str, labels: dict[str, str]) -> float:
    url = service.metrics + "/metrics"
    with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - loopback
        text = answer.read().decode()
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and line.split("}")[0][len(name) + 1:] == wanted:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def gauge(service: Service, name: str) -> float:
    """A metric without labels."""
    with urllib.request.urlopen(service.metrics + "/metrics", timeout=5) as answer:  # noqa: S310
        for line in answer.read().decode().splitlines():
            if line.startswith(f"{name} "):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_the_agent_loop_pushes_a_failed_recording_with_its_reason(
        lite_cluster: Cluster, service: Service, agent: ModuleType, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The toolset's own loop (`Agent.once`): plan, record, push. Here the recorder cannot run
    (no pod to record on this host: `flamegraph` is not there), which is what the service must
    hear: a failure with its reason, counted, and the ticket spent."""
    monkeypatch.setenv("SIDECAR_DEBUG_PRIVATE_DIR", str(tmp_path / "private"))
    namespace, as_pod = toolset_in_new_namespace(lite_cluster, service, agent, tmp_path,
                                                 "agent")
    labels = {"technique": "perf", "outcome": "failed", "reason": "no-output"}
    before = metric(service, "sidecar_debug_results_runs_total", labels)
    loop = agent.Agent(as_pod, 20.0)

    def pushed() -> bool:
        loop.once()
        return metric(service, "sidecar_debug_results_runs_total", labels) == before + 1

    wait_until(pushed, 60, "the failed recording pushed", interval=1)
    assert "recording failed (no-output)" in service.log.read_text()
    [failed] = [json.loads((run / "meta.json").read_text())
                for run in (service.directory / namespace / "web").iterdir()]
    assert (failed["outcome"], failed["reason"]) == ("failed", "no-output")


def pod_events(cluster: Cluster, namespace: str, uid: str) -> list[dict[str, Any]]:
    answer = kube.request(cluster.api_client(), "GET",
                          f"/api/v1/namespaces/{namespace}/events"
                          f"?fieldSelector=involvedObject.uid={uid}", None, None)
    return [e for e in answer["items"] if e["source"].get("component") == "sidecar-debug-results"]


def test_a_failed_recording_is_an_event_on_the_pod_and_a_failed_run_for_its_readers(
        lite_cluster: Cluster, service: Service, agent: ModuleType, tmp_path: Path) -> None:
    """Issue 23 item 7: the owner learns that and why, through the API they read (the pod's
    Events, with the service's own RBAC) and the results page (for readers of the namespace
    only); the message an app could have written stays one line of text."""
    namespace = new_namespace(lite_cluster, "failing")
    pod = create(lite_cluster, toolset_pod(service, "web", namespace))
    uid = pod["metadata"]["uid"]
    as_pod = client(agent, service, token_request(lite_cluster, namespace, "default",
                                                  audience=AUDIENCE, pod=pod), tmp_path)
    [run] = plan_for(as_pod)
    hostile = ("flamegraph exited 4: perf may not open events\n[results] forged\x1b[2J "
               "<img src=x onerror=alert(1)>" + "x" * 5000)
    # A report the service cannot take is refused saying why, and leaves the ticket usable.
    status, answer = as_pod.call("POST", "/agent/v1/failures",
                                 {"ticket": run["ticket"], "reason": "Not Possible",
                                  "message": "m"})
    assert status == 400 and "reason" in answer["error"]
    status, answer = as_pod.call("POST", "/agent/v1/failures",
                                 {"ticket": run["ticket"], "reason": "not-possible",
                                  "message": hostile})
    assert status == 200 and (answer["failures"], answer["suspended"]) == (1, False), answer
    run_id = answer["run"]

    [event] = wait_until(lambda: pod_events(lite_cluster, namespace, uid) or None, 30,
                         "the RecordingFailed Event on the pod")
    print(json.dumps(event, indent=1))
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "web",
                                       "namespace": namespace, "uid": uid}
    assert (event["reason"], event["type"], event["count"]) == ("RecordingFailed", "Warning", 1)
    message = event["message"]
    assert message.startswith(f"scheduled perf recording of schedule pod/{namespace}/web#0 (due ")
    assert "failed (not-possible): flamegraph exited 4: perf may not open events [results] " \
        "forged [2J <img" in message
    assert message.isprintable() and len(message) <= 1024  # the cut message and our words
    assert "2 more with this reason" in message

    admin, alice = lite_cluster.token_for("admin"), lite_cluster.token_for("alice")
    lite_cluster.kubectl("create", "rolebinding", "carol-reads", "-n", namespace,
                         f"--clusterrole={RELEASE}-sidecar-debug-results-reader", "--user=carol")
    for reader in (admin, lite_cluster.token_for("carol")):
        def listed(reader: str = reader) -> list[dict[str, Any]] | None:
            status, body = reader_get(service, "/api/runs", reader)
            assert status == 200, body
            return [r for r in json.loads(body) if r["namespace"] == namespace] or None

        [shown] = wait_until(listed, 30, "the failed run on /api/runs (answers cached 10 s)")
        assert (shown["id"], shown["outcome"], shown["reason"], shown["technique"]) == (
            run_id, "failed", "not-possible", "perf")
        assert shown["message"].startswith("flamegraph exited 4: perf may not open events "
                                           "[results] forged [2J <img")
        assert len(shown["message"]) == 300
        status, page = reader_get(service, "/", reader)
        assert status == 200 and "&lt;img src=x onerror=alert(1)&gt;" in page
        assert "<img src=x" not in page
    status, body = reader_get(service, "/api/runs", alice)
    assert status == 200 and not [r for r in json.loads(body) if r["namespace"] == namespace]
    status, body = reader_get(service, f"/runs/{run_id}/", alice)
    assert status == 403 and "perf may not" not in body
    # Metrics keep counting what the Events do not repeat.
    assert metric(service, "sidecar_debug_results_events_total",
                  {"reason": "RecordingFailed", "outcome": "posted"}) >= 1


def test_a_pushed_run_is_exported_to_pyroscope_parca_and_otlp(
        lite_cluster: Cluster, service: Service, collector: GrpcCollector, agent: ModuleType,
        tmp_path: Path) -> None:
    """results.export: once stored, the run goes on to every sink (local fakes here: none of the
    servers can be installed; the OTLP one is a real gRPC server on the official bindings),
    labelled by what the service knows from the apiserver, not by what the pod said."""
    namespace = new_namespace(lite_cluster, "export")
    pod = create(lite_cluster, toolset_pod(service, "web", namespace))
    as_pod = client(agent, service, token_request(lite_cluster, namespace, "default",
                                                  audience=AUDIENCE, pod=pod), tmp_path)
    [run] = plan_for(as_pod)
    status, answer = as_pod.call("POST", "/agent/v1/runs", {
        "ticket": run["ticket"], "stacks": "node;main;fibonacci 90\nnode;main;gc 7\n",
        "meta": {"container": "forged", "namespace": "other"}})
    assert status == 201, answer

    def exported(kind: str) -> Any:
        return next((r for r in service.sinks[kind].received
                     if f"namespace={namespace}" in r.query.get("name", [""])[0]
                     or namespace.encode() in r.body), None)

    pyroscope = wait_until(lambda: exported("pyroscope"), 30, "the run at Pyroscope")
    parca = wait_until(lambda: exported("parca"), 30, "the run at Parca")
    name = pyroscope.query["name"][0]
    assert name == (f"sidecar-debug.cpu{{container=debug-toolset,namespace={namespace},pod=web,"
                    f"schedule=pod/{namespace}/web#0,technique=perf}}")
    assert (pyroscope.path, pyroscope.query["sampleRate"]) == ("/ingest", [str(run["frequency"])])
    assert pyroscope.body == b"node;main;fibonacci 90\nnode;main;gc 7\n"
    body = json.loads(parca.body)
    labels = {label["name"]: label["value"] for label in body["series"][0]["labels"]["labels"]}
    assert labels == {"__name__": "process_cpu", "container": "debug-toolset",
                      "namespace": namespace, "pod": "web",
                      "schedule": f"pod/{namespace}/web#0", "technique": "perf"}
    raw = base64.b64decode(body["series"][0]["samples"][0]["rawProfile"])
    assert go_pprof_raw(raw, tmp_path).stacks == {("node", "main", "fibonacci"): 90,
                                                 ("node", "main", "gc"): 7}
    # Each sink counts its send when its answer is in: the gRPC one may come after the others.
    for sink in ("pyroscope", "parca", "otlp"):
        wait_until(lambda: metric(service, "sidecar_debug_exports_total",
                                  {"sink": sink, "outcome": "sent"}) >= 1,  # noqa: B023
                   30, f"the export to {sink} counted as sent")

    def at_collector() -> Any:
        for received in collector.received:
            request = decode(received.body)
            [resource] = request.resource_profiles
            found = {a.key: a.value.string_value for a in resource.resource.attributes}
            if found.get("k8s.namespace.name") == namespace:
                return found, request
        return None

    attributes, request = wait_until(at_collector, 30, "the run at the OTLP collector")
    assert attributes == {"k8s.namespace.name": namespace, "k8s.pod.name": "web",
                          "k8s.container.name": "app", "k8s.pod.uid": pod["metadata"]["uid"],
                          "service.name": "web"}
    assert folded_of(request, 1) == {("node", "main", "fibonacci"): 90,
                                     ("node", "main", "gc"): 7}


def test_a_pods_token_is_reviewed_once_and_forgotten_with_its_pod(
        lite_cluster: Cluster, service: Service, agent: ModuleType, tmp_path: Path) -> None:
    """Issue 25: a toolset polling every 20 s costs one TokenReview per token, not per poll;
    the service's pod watch drops the identity when the pod goes, and a new pod of the same
    name is a new caller that has to be reviewed on its own token."""
    namespace = new_namespace(lite_cluster, "tokens")
    pod = create(lite_cluster, toolset_pod(service, "web", namespace, schedule=None))
    token = token_request(lite_cluster, namespace, "default", audience=AUDIENCE, pod=pod)
    as_pod = client(agent, service, token, tmp_path)
    wait_until(lambda: as_pod.call("GET", "/agent/v1/plan")[0] == 200, 30,
               "the service to see the pod")
    reviews = metric(service, "sidecar_debug_results_token_reviews_total", {"caller": "agent"})
    for _ in range(15):
        status, answer = as_pod.call("GET", "/agent/v1/plan")
        assert status == 200, answer
    assert metric(service, "sidecar_debug_results_token_reviews_total",
                  {"caller": "agent"}) == reviews

    held = gauge(service, "sidecar_debug_results_agent_identities")
    assert held >= 1
    lite_cluster.kubectl("delete", "pod", "web", "-n", namespace, "--wait=false",
                         "--grace-period=0", "--force")
    # The watch saw the pod go: its reviewed token is dropped from memory at once.
    wait_until(lambda: gauge(service, "sidecar_debug_results_agent_identities") == held - 1,
               30, "the deleted pod's identity dropped")
    # The old token speaks for no pod any more.
    status, answer = as_pod.call("GET", "/agent/v1/plan")
    assert status in (401, 403), answer
    again = create(lite_cluster, toolset_pod(service, "web", namespace, schedule=None))
    assert again["metadata"]["uid"] != pod["metadata"]["uid"]
    status, answer = as_pod.call("GET", "/agent/v1/plan")
    assert status in (401, 403), answer  # the old pod's token gets nothing of the new pod
    new_token = token_request(lite_cluster, namespace, "default", audience=AUDIENCE, pod=again)
    as_new = client(agent, service, new_token, tmp_path)
    before = metric(service, "sidecar_debug_results_token_reviews_total", {"caller": "agent"})
    wait_until(lambda: as_new.call("GET", "/agent/v1/plan")[0] == 200, 30,
               "the new pod's own token accepted")
    assert metric(service, "sidecar_debug_results_token_reviews_total",
                  {"caller": "agent"}) > before
