"""End-to-end fixtures: project images on the node, the chart installed, test namespaces.

The cluster fixtures (`lite_cluster`, `full_cluster`) come from tests/cluster/pytest_plugin.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.cluster import Cluster

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "sidecar-debug"
VERSION = "0.1.0"
WEBHOOK_IMAGE = f"localhost/sidecar-debug/webhook:{VERSION}"
TOOLSET_IMAGE = f"localhost/sidecar-debug/toolset:{VERSION}"
RELEASE = "sidecar-debug"
RELEASE_NAMESPACE = "sidecar-debug"
SIDECAR = "debug-toolset"
STATUS_ANNOTATION = "sidecar-debug.io/status"
NODE_IMAGE = "localhost/sidecar-debug/sample-node:0.1.0"


def wait_until(predicate: Callable[[], Any], timeout: float, what: str,
               interval: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except Exception as error:  # noqa: BLE001 - keep polling, report the last error
            last = error
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


@contextlib.contextmanager
def local_webhook_server(
    cluster: Cluster,
    workdir: Path,
    *,
    service: str,
    namespace: str,
    env: dict[str, str],
    configuration: Callable[[bytes], dict[str, Any]],
) -> Iterator[tuple[str, Path]]:
    """`sidecar-debug serve` (one worker) as a host process behind a new Service in a new
    namespace of the lite cluster, answering on the Service's loopback ClusterIP, with the
    MutatingWebhookConfiguration `configuration(ca_pem)` applied once it is ready. Yields
    (ClusterIP, log file); removes the configuration, the process and the namespace after."""
    import ssl
    import urllib.request

    from tests.cluster.webhooks import create_service, serving_cert

    cluster.kubectl("create", "namespace", namespace)
    cluster_ip = create_service(cluster, service, namespace, port=443)
    ca_pem, cert, key = serving_cert(workdir, service, namespace)
    log_path = workdir / "serve.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed in finally, after the process
    command = [
        str(Path(sys.executable).with_name("sidecar-debug")),
        "serve",
        *("--tls-cert-file", str(cert), "--tls-key-file", str(key)),
        *("--bind-address", cluster_ip, "--port", "443", "--workers", "1"),
    ]
    server = subprocess.Popen(
        command,
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig), **env},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    manifest = configuration(ca_pem)
    try:
        context = ssl.create_default_context(cafile=str(workdir / "ca.crt"))
        context.check_hostname = False  # the certificate names the Service; we dial its IP

        def healthy() -> bool:
            assert server.poll() is None, log_path.read_text()
            url = f"https://{cluster_ip}:443/readyz"
            with urllib.request.urlopen(url, context=context, timeout=2) as response:  # noqa: S310
                return bool(response.status == 200)

        wait_until(healthy, 30, "sidecar-debug serve /readyz", interval=0.3)
        cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
        time.sleep(2)  # the apiserver loads webhook configurations asynchronously
        yield cluster_ip, log_path
    finally:
        cluster.kubectl(
            "delete",
            "mutatingwebhookconfiguration",
            manifest["metadata"]["name"],
            "--ignore-not-found",
            check=False,
        )
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def build_images(*targets: str) -> None:
    """scripts/images.sh (the toolset helper's script): skips images whose inputs are unchanged."""
    subprocess.run(["bash", str(REPO / "scripts" / "images.sh"), *targets], check=True)


@pytest.fixture(scope="session")
def node_images(full_cluster: Cluster) -> dict[str, str]:
    """The webhook and toolset images built from this checkout and imported into containerd."""
    if os.environ.get("SIDECAR_DEBUG_SKIP_IMAGE_BUILD") != "1":
        build_images("webhook")
        build_images("toolset")
    for image in (WEBHOOK_IMAGE, TOOLSET_IMAGE):
        full_cluster.load_image(image)
    return {"webhook": WEBHOOK_IMAGE, "toolset": TOOLSET_IMAGE}


@pytest.fixture(scope="session")
def node_sample(full_cluster: Cluster) -> str:
    """The Node.js sample app's image (a hot `fibonacci`), built and imported into containerd."""
    if os.environ.get("SIDECAR_DEBUG_SKIP_IMAGE_BUILD") != "1":
        build_images("samples")
    full_cluster.load_image(NODE_IMAGE)
    return NODE_IMAGE


def helm_values(*extra: str) -> list[str]:
    return [
        "-f", str(CHART / "ci" / "local-images-values.yaml"),
        "--set", f"webhook.image.tag={VERSION}", "--set", f"toolset.image.tag={VERSION}",
        *extra,
    ]


def upgrade_release(cluster: Cluster, release: str, *extra: str, check: bool = True) -> None:
    """`helm upgrade --wait` of the session's release with `extra` values, then wait until the
    replaced pods are gone: until their processes exit, old webhook pods still answer reviews
    with the old settings (the apiserver keeps its connections to them alive)."""
    cluster.helm("upgrade", release, str(CHART), "-n", RELEASE_NAMESPACE, "--wait",
                 "--timeout", "8m", *helm_values(*extra), timeout=600, check=check)
    selector = f"app.kubernetes.io/instance={release}"
    wait_until(lambda: not any(map(being_deleted, pods_of(cluster, RELEASE_NAMESPACE, selector))),
               180, f"the pods {release}'s upgrade replaced to be gone")  # fmt: skip


def install_chart(cluster: Cluster, release: str, namespace: str, *extra: str) -> None:
    # A namespace still terminating from an earlier run refuses new objects.
    cluster.kubectl("wait", "--for=delete", f"namespace/{namespace}", "--timeout=120s",
                    check=False, timeout=150)
    cluster.helm("install", release, str(CHART), "-n", namespace, "--create-namespace",
                 "--wait", "--timeout", "5m", *helm_values(*extra), timeout=400)


@pytest.fixture(scope="session")
def chart_release(full_cluster: Cluster, node_images: dict[str, str]) -> Iterator[str]:
    """The chart installed as `sidecar-debug` in namespace `sidecar-debug` (2 replicas)."""
    install_chart(full_cluster, RELEASE, RELEASE_NAMESPACE)
    wait_for_webhook_ready(full_cluster, RELEASE_NAMESPACE)
    yield RELEASE
    full_cluster.helm("uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait", check=False)


def wait_for_webhook_ready(cluster: Cluster, namespace: str, timeout: float = 180) -> None:
    def ready() -> bool:
        deployments = cluster.kubectl_json("get", "deployments", "-n", namespace)["items"]
        if not deployments:
            return False
        for deployment in deployments:
            wanted = deployment["spec"].get("replicas", 1)
            if deployment.get("status", {}).get("readyReplicas", 0) < wanted:
                return False
        configurations = cluster.kubectl_json("get", "mutatingwebhookconfigurations")["items"]
        # The webhook writes its CA into the configuration itself in `self` mode.
        return any(hook.get("clientConfig", {}).get("caBundle")
                   for configuration in configurations
                   for hook in configuration.get("webhooks", []))

    wait_until(ready, timeout, f"webhook Deployment Ready in {namespace}")


@pytest.fixture
def make_namespace(full_cluster: Cluster) -> Iterator[Callable[..., str]]:
    """Create namespaces (optionally labelled); all are deleted after the test."""
    created: list[str] = []

    def make(prefix: str = "e2e", labels: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        full_cluster.kubectl("create", "namespace", name)
        for key, value in (labels or {}).items():
            full_cluster.kubectl("label", "namespace", name, f"{key}={value}")
        created.append(name)
        return name

    yield make
    for name in created:
        full_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def app_container(name: str = "app") -> dict[str, Any]:
    """A long-running app built on the webhook image (python3): writes to /tmp, then idles."""
    return {
        "name": name,
        "image": WEBHOOK_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["python3", "-c",
                    "import pathlib, time\n"
                    "pathlib.Path('/tmp/app-was-here').write_text('hello')\n"
                    "while True: time.sleep(1)\n"],
        "resources": {"requests": {"cpu": "5m", "memory": "16Mi"}},
    }


def pod_manifest(name: str, namespace: str, labels: dict[str, str] | None = None,
                 annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"app": name},
                     "annotations": annotations or {}},
        "spec": {"containers": [app_container()], "terminationGracePeriodSeconds": 1},
    }


def deployment_manifest(name: str, namespace: str, replicas: int = 1,
                        pod_labels: dict[str, str] | None = None) -> dict[str, Any]:
    labels = {"app": name, **(pod_labels or {})}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": labels},
                         "spec": {"containers": [app_container()],
                                  "terminationGracePeriodSeconds": 1}},
        },
    }


def apply(cluster: Cluster, manifest: dict[str, Any], user: str = "admin") -> None:
    cluster.kubectl("apply", "-f", "-", user=user, input=json.dumps(manifest))


def container_names(pod: dict[str, Any]) -> list[str]:
    return [container["name"] for container in pod["spec"]["containers"]]


def is_injected(pod: dict[str, Any]) -> bool:
    return STATUS_ANNOTATION in pod["metadata"].get("annotations", {})


def pods_of(cluster: Cluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    return list(cluster.kubectl_json("get", "pods", "-n", namespace, "-l", selector)["items"])


def pods_staying(cluster: Cluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    """The pods of `selector` not being deleted: an upgrade's old pods are going away, and
    their containers may already be gone when a test execs into them or reads their logs."""
    return [pod for pod in pods_of(cluster, namespace, selector) if not being_deleted(pod)]


def being_deleted(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def wait_pod_running(cluster: Cluster, namespace: str, name: str,
                     timeout: float = 180) -> dict[str, Any]:
    def running() -> dict[str, Any] | None:
        pod = cluster.kubectl_json("get", "pod", name, "-n", namespace)
        statuses = pod.get("status", {}).get("containerStatuses", [])
        if pod["status"].get("phase") == "Running" and statuses and all(
                status.get("ready") for status in statuses):
            return dict(pod)
        return None

    return dict(wait_until(running, timeout, f"pod {namespace}/{name} running and ready"))


@contextlib.contextmanager
def results_volume(cluster: Cluster) -> Iterator[str]:
    """A PersistentVolume of no class for the chart's default results claim to bind (the
    one-node cluster has no provisioner and no default StorageClass, as many on-premises
    clusters); removed after."""
    name = f"results-{uuid.uuid4().hex[:6]}"
    path = Path("/tmp") / f"sidecar-debug-{name}"  # noqa: S108 - the node's own disk
    path.mkdir(mode=0o777)
    path.chmod(0o777)  # the service runs as uid 10001; fsGroup does not apply to hostPath
    apply(cluster, {"apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": {"name": name},
                    "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"],
                             "persistentVolumeReclaimPolicy": "Retain",
                             "storageClassName": "",
                             "hostPath": {"path": str(path), "type": "Directory"}}})
    try:
        yield name
    finally:
        cluster.kubectl("delete", "pv", name, "--wait=false", check=False)
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def local_volume(full_cluster: Cluster) -> Iterator[str]:
    """The results service's volume (results_volume) for one test."""
    with results_volume(full_cluster) as name:
        yield name
