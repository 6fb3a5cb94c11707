"""The `self` mode manager against an in-memory API with real resourceVersion semantics."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import logging
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from webhook.certs import pki, rotation, tls
from webhook.config import Settings
from webhook.kube import secrets

NS, SECRET, HOOK = "tools", "sidecar-debug-tls", "sidecar-debug"
NAMES = pki.service_dns_names("sidecar-debug", NS)


class FakeStore:
    """Secrets and webhook configurations as dicts; 409 on a stale resourceVersion. Like the
    webhook's RBAC, it can read and replace but not create: the chart creates the empty Secret
    (`with_secret=False`: a cluster without it)."""

    def __init__(self, with_secret: bool = True) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 0
        self.lock = threading.Lock()
        self.writes: list[tuple[str, str]] = []
        # Called between a read and the next write, to let a "other replica" act.
        self.before_write: list[Any] = []
        if with_secret:
            self.put("Secret", f"{NS}/{SECRET}", rotation.empty_secret(NS, SECRET))

    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        return copy.deepcopy(obj)

    def _hook(self) -> None:
        while self.before_write:
            self.before_write.pop(0)()

    def read_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.get(("Secret", f"{namespace}/{name}"))
            return copy.deepcopy(obj)

    def _replace(self, key: tuple[str, str], body: dict[str, Any]) -> dict[str, Any]:
        self._hook()
        with self.lock:
            current = self.objects.get(key)
            if current is None:
                raise secrets.ConflictError("gone")
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise secrets.ConflictError("stale resourceVersion")
            self.writes.append(key)
            self.objects[key] = copy.deepcopy(body)
            return self._bump(self.objects[key])

    def replace_secret(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._replace(("Secret", f"{namespace}/{name}"), body)

    def read_webhook_configuration(self, kind: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            return copy.deepcopy(self.objects.get((kind, name)))

    def replace_webhook_configuration(
        self, kind: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        return self._replace((kind, name), body)

    # helpers for tests
    def put(self, kind: str, name: str, obj: dict[str, Any]) -> None:
        with self.lock:
            self.objects[(kind, name)] = obj
            self._bump(obj)

    def ca_bundles(self, kind: str = "MutatingWebhookConfiguration") -> list[bytes]:
        obj = self.objects[(kind, HOOK)]
        return [
            base64.b64decode(w.get("clientConfig", {}).get("caBundle") or "")
            for w in obj["webhooks"]
        ]

    def secret_state(self) -> rotation.TLSState:
        data = self.objects[("Secret", f"{NS}/{SECRET}")]["data"]
        return rotation.TLSState.from_secret_data(data)


def _webhooks(n: int) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "metadata": {"name": HOOK},
        "webhooks": [
            {"name": f"w{i}.sidecar-debug.io",
             "clientConfig": {"service": {"name": "sidecar-debug", "namespace": NS}}}
            for i in range(n)
        ],
    }  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now


def _manager(store: FakeStore, clock: Clock | None = None, **policy: Any) -> rotation.SelfManager:
    return rotation.SelfManager(
        store, NS, SECRET, NAMES, HOOK,
        policy=rotation.RotationPolicy(**policy), clock=clock or pki.utcnow,
    )  # fmt: skip


def test_fills_the_charts_empty_secret_once_and_then_reads_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FakeStore()
    with caplog.at_level(logging.WARNING):
        state, reasons = _manager(store).ensure()
    assert not caplog.records, "the chart's empty Secret is expected, not a problem"
    assert reasons == ["created CA and serving certificate"]
    secret = store.objects[("Secret", f"{NS}/{SECRET}")]
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
    assert secret["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "sidecar-debug"
    again, reasons = _manager(store).ensure()
    assert reasons == [] and again == state
    assert len(store.writes) == 1


def test_fill_conflict_reads_the_winner() -> None:
    store = FakeStore()
    winner = _manager(store)
    won: list[rotation.TLSState] = []
    # Between our read (empty) and our write, another replica fills the Secret.
    store.before_write.append(lambda: won.append(winner.ensure()[0]))
    state, reasons = _manager(store).ensure()
    assert reasons == [] and state == won[0]
    assert store.secret_state() == won[0]


def test_replicas_started_at_once_agree_on_one_ca() -> None:
    store = FakeStore()
    barrier = threading.Barrier(6)
    results: list[rotation.TLSState] = []

    def replica() -> None:
        barrier.wait()
        results.append(_manager(store).ensure()[0])

    threads = [threading.Thread(target=replica) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 6
    assert {r.signer.cert for r in results} == {store.secret_state().signer.cert}
    assert len(store.writes) == 1


def test_renewal_is_conditional_and_concurrent_renewals_converge() -> None:
    store, clock = FakeStore(), Clock()
    first, _ = _manager(store, clock).ensure()
    clock.now += dt.timedelta(days=61)  # past 2/3 of 90 days
    other = _manager(store, clock)
    # Another replica renews between our read and our write: our write is stale (409),
    # we re-read, find a fresh certificate and leave it.
    store.before_write.append(lambda: other.ensure())
    state, reasons = _manager(store, clock).ensure()
    assert reasons == []
    assert state.serving != first.serving and state.signer == first.signer
    assert store.secret_state() == state
    assert len(store.writes) == 2  # fill + one renewal


def test_unusable_secret_is_regenerated_wrong_type_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FakeStore()
    junk = base64.b64encode(b"not a certificate").decode()
    broken = {"metadata": {"name": SECRET}, "type": "kubernetes.io/tls",
              "data": {"tls.crt": junk, "tls.key": junk}}  # fmt: skip
    store.put("Secret", f"{NS}/{SECRET}", broken)
    with caplog.at_level(logging.WARNING):
        state, reasons = _manager(store).ensure()
    assert reasons == ["created CA and serving certificate"]
    assert store.secret_state() == state
    assert "unusable" in caplog.text
    store.put("Secret", f"{NS}/{SECRET}", {"metadata": {"name": SECRET}, "type": "Opaque"})
    with pytest.raises(pki.CertificateError, match="Opaque"):
        _manager(store).ensure()


def test_missing_secret_is_an_error_that_says_how_to_recreate_it() -> None:
    """The webhook may not create Secrets (RBAC cannot limit `create` by name): a missing Secret
    is reported with the commands that recreate it, and nothing is written."""
    store = FakeStore(with_secret=False)
    with pytest.raises(pki.CertificateError) as caught:
        _manager(store).ensure()
    message = str(caught.value)
    assert f"Secret {NS}/{SECRET} does not exist" in message
    assert f"sidecar-debug certs ensure -n {NS} --secret {SECRET}" in message
    assert f"kubectl -n {NS} create secret generic {SECRET} --type=kubernetes.io/tls" in message
    assert store.writes == []


def test_empty_secret_matches_the_charts() -> None:
    templates = Path(__file__).resolve().parents[3] / "charts/sidecar-debug/templates"
    chart = templates / "webhook-tls-secret.yaml"
    text = chart.read_text()
    body = rotation.empty_secret(NS, SECRET)
    assert f"type: {body['type']}" in text
    for key in body["data"]:
        assert f'  {key}: ""' in text
    assert rotation.is_empty_secret(body)
    assert rotation.is_empty_secret({"data": None})
    assert not rotation.is_empty_secret({"data": {"tls.crt": "eA=="}})


def test_ca_bundle_is_written_into_every_entry_and_restored_when_blanked() -> None:
    store = FakeStore()
    store.put("MutatingWebhookConfiguration", HOOK, _webhooks(2))
    store.put("ValidatingWebhookConfiguration", HOOK, _webhooks(1))
    manager = _manager(store)
    state = manager.run_once()
    assert store.ca_bundles() == [state.bundle_pem, state.bundle_pem]
    assert store.ca_bundles("ValidatingWebhookConfiguration") == [state.bundle_pem]
    writes = len(store.writes)
    manager.run_once()
    assert len(store.writes) == writes  # nothing to do: no write

    blanked = store.objects[("MutatingWebhookConfiguration", HOOK)]
    blanked["webhooks"][1]["clientConfig"]["caBundle"] = ""
    assert manager.reconcile_ca_bundle(state.bundle_pem) == ["MutatingWebhookConfiguration"]
    assert store.ca_bundles() == [state.bundle_pem, state.bundle_pem]


def test_missing_webhook_configuration_is_not_an_error() -> None:
    store = FakeStore()
    manager = _manager(store)
    state = manager.run_once()
    assert manager.reconcile_ca_bundle(state.bundle_pem) == []


def test_ca_roll_through_the_manager_waits_for_the_published_bundle() -> None:
    store, clock = FakeStore(), Clock()
    store.put("MutatingWebhookConfiguration", HOOK, _webhooks(2))
    manager = _manager(store, clock, ca_overlap=dt.timedelta(minutes=10))
    old = manager.run_once()
    rolled, reasons = manager.ensure(force_ca=True)
    assert reasons == ["introduced next CA into the bundle"]
    assert rolled.next_ca is not None
    clock.now += dt.timedelta(minutes=11)
    # The overlap passed, but the caBundle has not been written yet: no promotion.
    _, reasons = manager.ensure()
    assert reasons == []
    manager.reconcile_ca_bundle(store.secret_state().bundle_pem)
    promoted, reasons = manager.ensure()
    assert reasons[0] == "promoted next CA to signer"
    assert promoted.signer == rolled.next_ca
    manager.reconcile_ca_bundle(promoted.bundle_pem)
    # Every apiserver bundle seen during the roll verifies every certificate served during it.
    for bundle in (old.bundle, rolled.bundle, promoted.bundle):
        for serving in (old.serving, promoted.serving):
            if bundle is old.bundle and serving is promoted.serving:
                continue  # never happens: promotion waits for the published bundle
            pki.verify_chain(serving.cert, list(bundle), now=clock.now)
    clock.now += dt.timedelta(minutes=11)
    final = manager.run_once()
    assert final.bundle == (promoted.signer.cert,)
    assert store.ca_bundles() == [final.bundle_pem] * 2


def test_prepare_serving_files_self_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FakeStore()
    monkeypatch.setattr(rotation, "KubernetesStore", lambda: store)
    monkeypatch.setattr(rotation, "private_directory", lambda: str(tmp_path / "priv"))
    (tmp_path / "priv").mkdir(mode=0o700)
    settings = Settings(certificates_mode="self", webhook_namespace=NS,
                        certificates_secret=SECRET, webhook_configuration=HOOK)  # fmt: skip
    cert_file, key_file = rotation.prepare_serving_files(settings)
    state = store.secret_state()
    assert Path(cert_file).read_bytes() == state.serving.cert_pem
    assert Path(key_file).read_bytes() == state.serving.key_pem
    assert stat.S_IMODE(Path(key_file).stat().st_mode) == 0o600
    assert stat.S_IMODE(Path(cert_file).stat().st_mode) == 0o600
    assert pki.subject_alt_names(state.serving.cert) == NAMES


def test_prepare_serving_files_other_modes() -> None:
    settings = Settings(certificates_mode="provided", tls_cert_file="/etc/x/tls.crt",
                        tls_key_file="/etc/x/tls.key")  # fmt: skip
    assert rotation.prepare_serving_files(settings) == ("/etc/x/tls.crt", "/etc/x/tls.key")
    with pytest.raises(pki.CertificateError, match="tlsCertFile"):
        rotation.prepare_serving_files(Settings(certificates_mode="certManager"))
    assert rotation.start_background_maintenance(settings, "a", "b") is None


def test_private_directory_is_private() -> None:
    directory = Path(tls.private_directory())
    try:
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    finally:
        directory.rmdir()


def test_extra_sans_and_namespace_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(rotation.ENV_EXTRA_SANS, "127.0.0.1, hook.example")
    settings = Settings(service_name="svc", cluster_domain="c.local")
    monkeypatch.setenv(rotation.ENV_POD_NAMESPACE, "from-pod")
    assert rotation.resolve_namespace(settings) == "from-pod"
    assert rotation.serving_names(settings, "ns")[-2:] == ["127.0.0.1", "hook.example"]
    monkeypatch.delenv(rotation.ENV_POD_NAMESPACE)
    monkeypatch.setattr(rotation, "SERVICE_ACCOUNT_NAMESPACE_FILE", "/nonexistent")
    with pytest.raises(pki.CertificateError, match="webhookNamespace"):
        rotation.resolve_namespace(settings)


def test_background_maintenance_restores_bundle_and_follows_rotation(tmp_path: Path) -> None:
    store = FakeStore()
    store.put("MutatingWebhookConfiguration", HOOK, _webhooks(1))
    manager = _manager(store)
    cert_file, key_file = str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")
    first = manager.run_once(cert_file, key_file)
    settings = Settings(certificates_mode="self", webhook_namespace=NS)
    thread = rotation.start_background_maintenance(
        settings, cert_file, key_file, manager=manager, interval=0.05
    )
    assert thread is not None and thread.is_alive()
    assert rotation.start_background_maintenance(settings, cert_file, key_file) is thread
    try:
        _follow_rotation(store, first, cert_file, key_file)
    finally:
        rotation.stop_background_maintenance()
    assert not thread.is_alive()


def _follow_rotation(
    store: FakeStore, first: rotation.TLSState, cert_file: str, key_file: str
) -> None:

    store.objects[("MutatingWebhookConfiguration", HOOK)]["webhooks"][0]["clientConfig"].pop(
        "caBundle"
    )
    # Another replica (or `certs rotate --force`) renews the serving certificate.
    rotated, _ = _manager(store).ensure(force_serving=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if (Path(cert_file).read_bytes() == rotated.serving.cert_pem
                and store.ca_bundles() == [first.bundle_pem]):  # fmt: skip
            break
        time.sleep(0.05)
    assert Path(cert_file).read_bytes() == rotated.serving.cert_pem
    assert Path(key_file).read_bytes() == rotated.serving.key_pem
    assert store.ca_bundles() == [first.bundle_pem]


def test_a_failing_kind_does_not_block_the_other() -> None:
    class ForbiddenValidating(FakeStore):
        def read_webhook_configuration(self, kind: str, name: str) -> dict[str, Any] | None:
            if kind == "ValidatingWebhookConfiguration":
                raise RuntimeError("403 Forbidden")
            return super().read_webhook_configuration(kind, name)

    store = ForbiddenValidating()
    store.put("MutatingWebhookConfiguration", HOOK, _webhooks(1))
    manager = _manager(store)
    state = manager.run_once()
    assert store.ca_bundles() == [state.bundle_pem]
    # Unknown publication state delays a CA switch rather than risking it.
    assert manager._next_ca_published(manager.ensure(force_ca=True)[0]) is False


def test_secret_is_owned_by_the_webhook_configuration_so_uninstall_removes_it() -> None:
    store = FakeStore()
    hook = _webhooks(1)
    hook["metadata"]["uid"] = "3f0c1c1e-0000-4000-8000-000000000001"
    store.put("MutatingWebhookConfiguration", HOOK, hook)
    _manager(store).ensure()
    secret = store.objects[("Secret", f"{NS}/{SECRET}")]
    assert secret["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "name": HOOK,
            "uid": "3f0c1c1e-0000-4000-8000-000000000001",
        }
    ]


def test_secret_without_a_webhook_configuration_has_no_owner() -> None:
    store = FakeStore()
    _manager(store).ensure()
    assert "ownerReferences" not in store.objects[("Secret", f"{NS}/{SECRET}")]["metadata"]


def test_an_api_failure_in_the_loop_is_one_warning_line_then_a_retry(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An apiserver that answers 500 or not at all (a loaded CI machine) is said in one line
    each round, not as a traceback, and the next round recovers."""
    failures: list[secrets.StoreError] = []

    class FlakyRead(FakeStore):
        def read_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
            if failures:
                raise failures.pop()
            return super().read_secret(namespace, name)

    store = FlakyRead()
    store.put("MutatingWebhookConfiguration", HOOK, _webhooks(1))
    manager = _manager(store)
    cert_file, key_file = str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")
    first = manager.run_once(cert_file, key_file)
    failures.append(
        secrets.StoreError("read_namespaced_secret x: HTTP 500 Internal Server Error"))
    settings = Settings(certificates_mode="self", webhook_namespace=NS)
    with caplog.at_level(logging.WARNING, logger="webhook.certs.rotation"):
        rotation.start_background_maintenance(
            settings, cert_file, key_file, manager=manager, interval=0.05
        )
        try:
            deadline = time.monotonic() + 10
            while failures and time.monotonic() < deadline:
                time.sleep(0.01)
            assert not failures, "the loop did not run"
            _follow_rotation(store, first, cert_file, key_file)
        finally:
            rotation.stop_background_maintenance()
    [warning] = [r for r in caplog.records if "HTTP 500" in r.getMessage()]
    assert warning.exc_info is None
    assert warning.getMessage().startswith("certificate maintenance: read_namespaced_secret")


class _ApiCall:
    """A typed-client method as KubernetesStore calls it, raising `error` or answering `data`."""

    __name__ = "read_namespaced_secret"

    def __init__(self, error: BaseException | None = None, data: bytes = b"{}") -> None:
        self.error, self.data = error, data
        self.kwargs: dict[str, Any] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.kwargs = kwargs
        if self.error is not None:
            raise self.error
        return type("Answer", (), {"data": self.data})()


def _api_exception(status: int, reason: str, body: str = "") -> Exception:
    from kubernetes.client.exceptions import ApiException

    error = ApiException(status=status, reason=reason)
    error.body = body
    return error


def test_the_store_turns_api_failures_into_one_line_errors() -> None:
    from urllib3 import HTTPSConnectionPool
    from urllib3.exceptions import ReadTimeoutError

    call = secrets.KubernetesStore._call  # noqa: SLF001 - the one place errors are mapped
    answered = _ApiCall(data=b'{"kind": "Secret"}')
    assert call(answered, "tls", NS) == {"kind": "Secret"}
    assert answered.kwargs["_request_timeout"] == secrets.CALL_TIMEOUT_SECONDS
    assert call(_ApiCall(_api_exception(404, "Not Found")), "tls", NS) is None
    with pytest.raises(secrets.ConflictError):
        call(_ApiCall(_api_exception(409, "Conflict")), "tls", NS)
    forbidden = _api_exception(403, "Forbidden", '{"kind": "Status", "message": "secrets '
                               '\\"tls\\" is forbidden: User \\"x\\" cannot get"}')  # fmt: skip
    with pytest.raises(secrets.StoreError) as refused:
        call(_ApiCall(forbidden), "tls", NS)
    assert str(refused.value) == (
        'read_namespaced_secret tls: HTTP 403 Forbidden: secrets "tls" is forbidden: '
        'User "x" cannot get')
    timeout = ReadTimeoutError(HTTPSConnectionPool("kubernetes.default.svc", 443),
                               "/api/v1/namespaces/tools/secrets/tls",
                               "Read timed out. (read timeout=15.0)")
    for error in (timeout, ConnectionRefusedError(111, "Connection refused")):
        with pytest.raises(secrets.StoreError) as failed:
            call(_ApiCall(error), "tls", NS)
        assert "\n" not in str(failed.value) and str(failed.value).startswith(
            "read_namespaced_secret tls: ")
    with pytest.raises(secrets.StoreError, match="read_namespaced_secret tls: "):
        call(_ApiCall(data=b"<html>proxy error</html>"), "tls", NS)
