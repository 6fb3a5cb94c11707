"""Certificates end to end on the real apiserver (lite cluster), mode `self`.

Two `sidecar-debug serve` processes stand in for two replicas: both bind the Service's ClusterIP
(loopback in lite mode) with SO_REUSEPORT, as two pods behind one Service would share the
traffic, and each also binds a private port so a test can talk to one replica directly.
The webhook configuration uses failurePolicy Fail, so a TLS failure shows up as a refused pod
rather than as a pod that silently went without its sidecar.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from tests.cluster.cluster import Cluster, free_port
from tests.cluster.webhooks import create_service, mutating_webhook_configuration
from tests.e2e.conftest import wait_until
from webhook.certs import pki, rotation

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

# The e2e polling helper, faster: rotation is observed as it happens.
_wait = functools.partial(wait_until, interval=0.2)

HOOK_NS = "certs-e2e"
APPS_NS = "certs-e2e-apps"
SERVICE = "sidecar-debug"
SECRET = "certs-e2e-tls"
CONFIG = "certs-e2e"
PORT = 9444  # uncommon: other lite clusters on this host share 127.96.0.0/24
SERVER_NAME = f"{SERVICE}.{HOOK_NS}.svc"
RESYNC_SECONDS = 1
CA_OVERLAP_SECONDS = 4


@dataclass
class Replica:
    process: subprocess.Popen[bytes]
    direct_port: int
    log: Path


@dataclass
class Env:
    cluster: Cluster
    cluster_ip: str
    replicas: list[Replica]
    process_env: dict[str, str]
    pods: list[str] = field(default_factory=list)




def _secret_data(cluster: Cluster) -> dict[str, bytes]:
    secret = cluster.kubectl_json("get", "secret", SECRET, "-n", HOOK_NS)
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def _webhook_bundles(cluster: Cluster) -> list[bytes]:
    config = cluster.kubectl_json("get", "mutatingwebhookconfiguration", CONFIG)
    return [
        base64.b64decode(w["clientConfig"].get("caBundle") or "") for w in config["webhooks"]
    ]


def _tls(port: int, bundle: bytes, name: str = SERVER_NAME) -> ssl.SSLSocket:
    context = ssl.create_default_context(cadata=bundle.decode())
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return context.wrap_socket(raw, server_hostname=name)


def _served(port: int, bundle: bytes) -> x509.Certificate:
    with _tls(port, bundle) as sock:
        der = sock.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def _request(port: int, bundle: bytes, method: str, path: str, body: bytes = b"",
             name: str = SERVER_NAME) -> tuple[int, bytes]:  # fmt: skip
    """One HTTP/1.1 request to one replica (by its private port): the status and the body."""
    head = (f"{method} {path} HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    answer = b""
    with _tls(port, bundle, name) as sock:
        sock.sendall(head.encode() + body)
        while chunk := sock.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def _get(port: int, bundle: bytes, path: str, name: str = SERVER_NAME) -> int:
    return _request(port, bundle, "GET", path, name=name)[0]


def _start_replica(process_env: dict[str, str], cluster_ip: str, logs: Path, n: int) -> Replica:
    direct = free_port()
    env = dict(process_env)
    # One gunicorn per replica; both share the Service address like pods behind a Service.
    env["GUNICORN_CMD_ARGS"] = f"--reuse-port --bind {cluster_ip}:{PORT} --bind 127.0.0.1:{direct}"
    log = logs / f"replica-{n}.log"
    handle = log.open("wb")
    process = subprocess.Popen(  # noqa: S603 - our own CLI
        [sys.executable, "-m", "webhook.commands.cli", "serve"],
        env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    return Replica(process, direct, log)


def _stop(replica: Replica) -> None:
    if replica.process.poll() is None:
        os.killpg(replica.process.pid, signal.SIGTERM)
        try:
            replica.process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(replica.process.pid, signal.SIGKILL)
            replica.process.wait(10)


def _apply(cluster: Cluster, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))


@pytest.fixture(scope="module")
def env(lite_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    cluster = lite_cluster
    logs = tmp_path_factory.mktemp("certs-e2e")
    for ns, labels in ((HOOK_NS, {}), (APPS_NS, {"certs-e2e": "apps"})):
        _apply(cluster, {"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": ns, "labels": labels}})  # fmt: skip
    cluster.kubectl("delete", "secret", SECRET, "-n", HOOK_NS, "--ignore-not-found")
    # The empty Secret the chart creates at install (the webhook may not create Secrets).
    _apply(cluster, rotation.empty_secret(HOOK_NS, SECRET))
    sa_args = ("get", "serviceaccount", "default", "-n", APPS_NS)
    _wait(lambda: cluster.kubectl(*sa_args, check=False).returncode == 0, 60, "default SA")
    cluster_ip = create_service(cluster, SERVICE, HOOK_NS, port=PORT)

    config = mutating_webhook_configuration(
        CONFIG, service=SERVICE, namespace=HOOK_NS, ca_pem=b"", port=PORT,
        failure_policy="Fail", timeout_seconds=10,
        namespace_selector={"matchLabels": {"certs-e2e": "apps"}},
    )  # fmt: skip
    # A second entry that never matches: "every entry" gets the caBundle.
    second = json.loads(json.dumps(config["webhooks"][0]))
    second["name"] = f"second.{CONFIG}.sidecar-debug.io"
    second["objectSelector"] = {"matchLabels": {"certs-e2e-never": "yes"}}
    config["webhooks"].append(second)
    for entry in config["webhooks"]:
        entry["clientConfig"].pop("caBundle", None)
    cluster.kubectl("delete", "mutatingwebhookconfiguration", CONFIG, "--ignore-not-found")
    _apply(cluster, config)

    process_env = cluster.env()
    process_env.pop("SIDECAR_DEBUG_CONFIG", None)
    process_env.update({
        "SIDECAR_DEBUG_CERTIFICATES_MODE": "self",
        "SIDECAR_DEBUG_WEBHOOK_NAMESPACE": HOOK_NS,
        "SIDECAR_DEBUG_SERVICE_NAME": SERVICE,
        "SIDECAR_DEBUG_CERTIFICATES_SECRET": SECRET,
        "SIDECAR_DEBUG_WEBHOOK_CONFIGURATION": CONFIG,
        "SIDECAR_DEBUG_WORKERS": "2",
        "SIDECAR_DEBUG_LOG_LEVEL": "INFO",
        rotation.ENV_RESYNC_SECONDS: str(RESYNC_SECONDS),
        rotation.ENV_CA_OVERLAP_SECONDS: str(CA_OVERLAP_SECONDS),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    })  # fmt: skip
    # Started together, so both race to fill the Secret.
    replicas = [_start_replica(process_env, cluster_ip, logs, n) for n in (1, 2)]
    context = Env(cluster, cluster_ip, replicas, process_env)
    try:
        bundle = _wait(lambda: _secret_data(cluster).get("ca.crt"), 90, "the TLS Secret")

        def ready(replica: Replica) -> bool:
            return (replica.process.poll() is None
                    and _get(replica.direct_port, bundle, "/readyz") == 200)

        for replica in replicas:
            _wait(functools.partial(ready, replica), 90,
                  f"replica on port {replica.direct_port} ready")  # fmt: skip
        yield context
    finally:
        for replica in replicas:
            _stop(replica)
        cluster.kubectl("delete", "mutatingwebhookconfiguration", CONFIG, "--ignore-not-found")
        cluster.kubectl("delete", "namespace", APPS_NS, "--wait=false", "--ignore-not-found")
        cluster.kubectl("delete", "namespace", HOOK_NS, "--wait=false", "--ignore-not-found")
        for replica in replicas:
            tail = replica.log.read_text().splitlines()[-40:]
            print(f"--- {replica.log.name}\n" + "\n".join(tail))


def _create_pod(api: Any, name: str) -> dict[str, Any]:
    body = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"debug": "enabled"},
                     "annotations": {"sidecar-debug.io/profile": "lttng"}},
        "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]},
    }  # fmt: skip
    response = api.create_namespaced_pod(APPS_NS, body, _preload_content=False)
    pod: dict[str, Any] = json.loads(response.data)
    return pod


def _injected(pod: dict[str, Any]) -> bool:
    return any(c["name"] == "debug-toolset" for c in pod["spec"]["containers"])


@pytest.fixture(scope="module")
def core_api(env: Env) -> Any:
    from kubernetes import client

    return client.CoreV1Api(env.cluster.api_client())


def test_two_replicas_one_ca_both_serve_bundle_patched_pods_injected(
    env: Env, core_api: Any
) -> None:
    data = _secret_data(env.cluster)
    cas = pki.load_certificates(data["ca.crt"])
    assert len(cas) == 1, "exactly one CA"
    assert set(data) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
    served = [_served(r.direct_port, data["ca.crt"]) for r in env.replicas]
    assert served[0] == served[1] == pki.load_certificates(data["tls.crt"])[0]
    pki.verify_chain(served[0], cas, SERVER_NAME)
    assert sorted(pki.subject_alt_names(served[0])) == sorted(
        pki.service_dns_names(SERVICE, HOOK_NS))
    # Both replicas wrote (or found) the same bundle into both entries.
    _wait(lambda: _webhook_bundles(env.cluster) == [data["ca.crt"]] * 2, 30, "caBundle patched")
    # And the apiserver trusts it: the pod comes back with the sidecar.
    pod = _create_pod(core_api, "first")
    assert _injected(pod), pod["spec"]["containers"]
    created = [line for r in env.replicas for line in r.log.read_text().splitlines()
               if "created CA and serving certificate" in line]  # fmt: skip
    assert len(created) == 1, created


def test_blanked_ca_bundle_is_restored(env: Env, core_api: Any) -> None:
    bundle = _secret_data(env.cluster)["ca.crt"]
    env.cluster.kubectl(
        "patch", "mutatingwebhookconfiguration", CONFIG, "--type=json", "-p",
        json.dumps([
            {"op": "remove", "path": "/webhooks/0/clientConfig/caBundle"},
            {"op": "replace", "path": "/webhooks/1/clientConfig/caBundle", "value": ""},
        ]),
    )  # fmt: skip
    started = time.monotonic()
    _wait(lambda: _webhook_bundles(env.cluster) == [bundle] * 2, 30, "caBundle restored")
    assert time.monotonic() - started < 10 * RESYNC_SECONDS + 5
    assert _injected(_create_pod(core_api, "after-blank"))


def _rotate(env: Env, *flags: str) -> None:
    done = subprocess.run(  # noqa: S603 - our own CLI
        [sys.executable, "-m", "webhook.commands.cli", "certs", "rotate", *flags],
        env=env.process_env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout


def test_rotation_while_pods_are_created_has_zero_tls_failures(env: Env, core_api: Any) -> None:
    before = _secret_data(env.cluster)
    old_ca = pki.load_certificates(before["ca.crt"])[0]
    old_serving = pki.load_certificates(before["tls.crt"])[0]
    results: list[tuple[str, bool, str]] = []
    stop = threading.Event()

    def create_loop() -> None:
        n = 0
        while not stop.is_set():
            name = f"rot-{n}"
            n += 1
            try:
                pod = _create_pod(core_api, name)
            except Exception as exc:  # noqa: BLE001 - every failure is counted and shown
                results.append((name, False, str(exc)[:500]))
            else:
                results.append((name, _injected(pod), ""))
            time.sleep(0.02)  # steady load, without starving the rotating replicas of CPU

    worker = threading.Thread(target=create_loop, daemon=True)
    worker.start()
    try:
        time.sleep(2)
        _rotate(env, "--force")  # a new serving certificate from the same CA
        _wait(lambda: all(_served(r.direct_port, before["ca.crt"]) != old_serving
                          for r in env.replicas), 30, "renewed certificate served")  # fmt: skip
        time.sleep(2)
        _rotate(env, "--ca")  # introduce a CA; promoted after the overlap, then pruned
        final = _wait(
            lambda: (lambda cas: len(cas) == 1 and cas[0] != old_ca and cas)(
                pki.load_certificates(_secret_data(env.cluster)["ca.crt"])),
            90, "the CA roll to complete",
        )  # fmt: skip
        new_bundle = pki.bundle_pem(final)
        _wait(lambda: all(_served(r.direct_port, new_bundle).issuer == final[0].subject
                          for r in env.replicas), 30, "serving from the new CA")  # fmt: skip
        _wait(lambda: _webhook_bundles(env.cluster) == [new_bundle] * 2, 30, "new caBundle")
        time.sleep(3)
    finally:
        stop.set()
        worker.join(60)
    failures = [r for r in results if not r[1]]
    assert len(results) >= 20, f"only {len(results)} pods created"
    assert failures == [], f"{len(failures)}/{len(results)} pods failed or went without sidecar"
    print(f"{len(results)} pods created during the rotations, 0 failures")


def assert_log_is_clean(text: str, where: str) -> None:
    """The webhook's own log (issue 12, item 10): no traceback and no `--- Logging error ---`
    (every gunicorn worker used to write one: `%d format: ... NoneType`)."""
    for bad in ("Traceback", "Logging error"):
        if bad in text:
            at = text.index(bad)
            raise AssertionError(f"{bad!r} in {where}:\n{text[max(0, at - 1500):at + 1500]}")


USER_POD_REVIEW = Path(__file__).resolve().parents[1] / "fixtures" / "admission" / "user-pod.json"


def test_the_webhook_log_has_no_traceback_after_reviews_and_rotations(env: Env) -> None:
    """Runs after the tests above: Secret created, pods reviewed, a blanked caBundle restored,
    a serving-certificate renewal and a CA roll while pods were created. The apiserver's
    kept-alive connections may all have gone to one replica: each is also sent a recorded
    review directly, so that both logs hold reviews."""
    bundle = _secret_data(env.cluster)["ca.crt"]
    for replica in env.replicas:
        status, body = _request(replica.direct_port, bundle, "POST", "/mutate",
                                USER_POD_REVIEW.read_bytes())  # fmt: skip
        assert status == 200 and json.loads(body)["response"]["allowed"] is True, body[:500]
    for replica in env.replicas:
        text = replica.log.read_text(errors="replace")
        assert "webhook.admission.mutate" in text, "no review was logged"
        assert_log_is_clean(text, replica.log.name)


CHART = Path(__file__).resolve().parents[2] / "charts" / "sidecar-debug"
RELEASE, RELEASE_NS = "sdcerts", "certs-e2e-helm"


@pytest.mark.chart
def test_helm_upgrade_twice_keeps_the_ca(lite_cluster: Cluster, tmp_path: Path) -> None:
    """Install the chart (mode self); two host processes play its Deployment's replicas, bound
    to the chart's Service ClusterIP with the chart's own settings. Two upgrades later the CA is
    the same and every caBundle entry still carries it."""
    import yaml

    cluster = lite_cluster
    cluster.helm("uninstall", RELEASE, "-n", RELEASE_NS, "--ignore-not-found", check=False)
    cluster.kubectl("delete", "namespace", RELEASE_NS, "--ignore-not-found", "--wait=true",
                    timeout=180)  # fmt: skip
    install = ("upgrade", "--install", RELEASE, str(CHART), "-n", RELEASE_NS,
               "--create-namespace", "--set", "certificates.mode=self",
               "--set", "service.port=9443")  # fmt: skip
    cluster.helm(*install)
    manifest = cluster.helm("get", "manifest", RELEASE, "-n", RELEASE_NS).stdout
    objects = [o for o in yaml.safe_load_all(manifest) if o]
    config_map = next(o for o in objects if o["kind"] == "ConfigMap"
                      and "config.yaml" in (o.get("data") or {}))  # fmt: skip
    settings = yaml.safe_load(config_map["data"]["config.yaml"])
    secret_name = settings["certificatesSecret"]
    hook_name = settings["webhookConfiguration"]
    # The chart creates the Secret as a pre-install hook: not in the release's manifest, so no
    # upgrade touches what the webhook wrote.
    assert not [o for o in objects if o["kind"] == "Secret"
                and o["metadata"]["name"] == secret_name], "Helm must not own the self Secret"
    service = next(o for o in objects if o["kind"] == "Service")
    svc_name = f"{service['metadata']['name']}.{RELEASE_NS}.svc"
    port = service["spec"]["ports"][0]["port"]
    cluster_ip = cluster.kubectl_json("get", "service", service["metadata"]["name"],
                                      "-n", RELEASE_NS)["spec"]["clusterIP"]  # fmt: skip
    # The chart's settings, minus the files only the pod has.
    for mounted in ("policyPath", "profilesFile", "tlsCertFile", "tlsKeyFile"):
        settings.pop(mounted, None)
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(settings))

    process_env = cluster.env()
    process_env.update({
        "SIDECAR_DEBUG_CONFIG": str(config_file),
        "SIDECAR_DEBUG_WEBHOOK_NAMESPACE": RELEASE_NS,  # in a pod: the service-account file
        "SIDECAR_DEBUG_WORKERS": "1",
        rotation.ENV_RESYNC_SECONDS: "1",
    })  # fmt: skip
    replicas = []
    for n in (1, 2):
        direct = free_port()
        env = dict(process_env)
        env["GUNICORN_CMD_ARGS"] = (f"--reuse-port --bind {cluster_ip}:{port} "
                                    f"--bind 127.0.0.1:{direct}")  # fmt: skip
        log = tmp_path / f"helm-replica-{n}.log"
        replicas.append(Replica(subprocess.Popen(  # noqa: S603 - our own CLI
            [sys.executable, "-m", "webhook.commands.cli", "serve"], env=env, stdout=log.open("wb"),
            stderr=subprocess.STDOUT, start_new_session=True), direct, log))  # fmt: skip

    def secret_ca() -> bytes:
        secret = cluster.kubectl_json("get", "secret", secret_name, "-n", RELEASE_NS)
        return base64.b64decode(secret["data"]["ca.crt"])

    def bundles() -> list[bytes]:
        found = []
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            got = cluster.kubectl("get", kind, hook_name, "-o", "json", check=False)
            if got.returncode == 0:
                found += [base64.b64decode(w["clientConfig"].get("caBundle") or "")
                          for w in json.loads(got.stdout)["webhooks"]]  # fmt: skip
        return found

    try:
        ca = _wait(secret_ca, 90, "the webhook to fill its Secret")
        _wait(lambda: bundles() and set(bundles()) == {ca}, 60, "caBundle in every entry")

        def ready(replica: Replica) -> bool:
            return _get(replica.direct_port, ca, "/readyz", svc_name) == 200

        for replica in replicas:
            _wait(functools.partial(ready, replica), 60, "ready")
        for timeout in ("7", "9"):  # two upgrades, each changing the webhook configurations
            cluster.helm(*install, "--set", f"webhook.timeoutSeconds={timeout}")
            assert secret_ca() == ca, "helm upgrade changed the CA"
            _wait(lambda: bundles() and set(bundles()) == {ca}, 30, "caBundle after upgrade")
        config = cluster.kubectl_json("get", "mutatingwebhookconfiguration", hook_name)
        assert {w["timeoutSeconds"] for w in config["webhooks"]} == {9}
        assert all(r.process.poll() is None for r in replicas)
    finally:
        for replica in replicas:
            _stop(replica)
        cluster.helm("uninstall", RELEASE, "-n", RELEASE_NS, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "namespace", RELEASE_NS, "--wait=false", "--ignore-not-found")
