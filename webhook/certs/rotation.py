"""The `self` certificates mode: rotation planning and the manager that applies it.

The TLS Secret is the source of truth. The chart creates it empty (so the webhook needs only
`get`/`update` on it by name, never `create`); the first replica fills it and every replica renews
through resourceVersion-conditional updates (a 409 means another replica already did: re-read
theirs), the CA is rolled with an overlap, and
the CA bundle is written into the `caBundle` of every entry of the webhook configurations (and
written again when something blanks it).

Secret layout (type kubernetes.io/tls, one object so that every change is one atomic,
resourceVersion-conditional update and the webhook needs RBAC on one name only):
  tls.crt       serving certificate (leaf), signed by the signing CA
  tls.key       its key
  ca.crt        trust bundle: every CA a client should trust right now (signing CA first)
  ca.key        the signing CA's key (the CA certificate is the bundle entry matching it)
  ca-next.key   only while the CA is rolled: the key of the CA being introduced
  results.crt, results.key
                with settings.results_service_name: the results service's serving pair, from
                the same CA (the results Deployment mounts these two and ca.crt, never ca.key;
                the toolsets trust ca.crt, which the webhook injects)"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime as dt
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography import x509

if TYPE_CHECKING:
    from webhook.config import Settings
from webhook.certs.pki import (
    DEFAULT_CA_VALIDITY,
    DEFAULT_RENEW_FRACTION,
    DEFAULT_SERVING_VALIDITY,
    KEY_CA_CRT,
    KEY_CA_KEY,
    KEY_CA_NEXT_KEY,
    KEY_RESULTS_CRT,
    KEY_RESULTS_KEY,
    KEY_TLS_CRT,
    KEY_TLS_KEY,
    CertificateError,
    KeyPair,
    PrivateKey,
    bundle_pem,
    generate_ca,
    generate_serving,
    is_expired,
    issued_at,
    issued_by,
    key_matches,
    load_certificates,
    load_private_key,
    needs_renewal,
    service_dns_names,
    subject_alt_names,
    utcnow,
)
from webhook.certs.tls import private_directory, write_private_file, write_serving_pair
from webhook.kube.secrets import (
    WEBHOOK_KINDS,
    ConflictError,
    KubernetesStore,
    SecretStore,
    StoreError,
)
from webhook.wire import constants

log = logging.getLogger(__name__)


DEFAULT_CA_OVERLAP = dt.timedelta(hours=1)


DEFAULT_RESYNC_SECONDS = 30.0


# Test and development knobs (not Settings fields: operators never need them).
ENV_RESYNC_SECONDS = "SIDECAR_DEBUG_CERTS_RESYNC_SECONDS"


ENV_CA_OVERLAP_SECONDS = "SIDECAR_DEBUG_CERTS_CA_OVERLAP_SECONDS"


ENV_EXTRA_SANS = "SIDECAR_DEBUG_CERTS_EXTRA_SANS"


ENV_POD_NAMESPACE = "POD_NAMESPACE"


SERVICE_ACCOUNT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass(frozen=True)
class RotationPolicy:
    ca_validity: dt.timedelta = DEFAULT_CA_VALIDITY
    serving_validity: dt.timedelta = DEFAULT_SERVING_VALIDITY
    renew_fraction: float = DEFAULT_RENEW_FRACTION
    # How long a new CA sits in the bundle before it signs, and how long a retired CA stays
    # in the bundle after the last certificate it signed was replaced. Replicas re-read the
    # Secret every resync (30 s), so an hour leaves a wide margin.
    ca_overlap: dt.timedelta = DEFAULT_CA_OVERLAP

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> RotationPolicy:
        environ = os.environ if environ is None else environ
        policy = cls()
        if environ.get(ENV_CA_OVERLAP_SECONDS):
            seconds = float(environ[ENV_CA_OVERLAP_SECONDS])
            policy = replace(policy, ca_overlap=dt.timedelta(seconds=seconds))
        return policy


@dataclass(frozen=True)
class TLSState:
    """What the Secret holds in `self` mode."""

    signer: KeyPair
    serving: KeyPair
    bundle: tuple[x509.Certificate, ...]
    next_ca: KeyPair | None = None
    results: KeyPair | None = None

    @property
    def bundle_pem(self) -> bytes:
        return bundle_pem(self.bundle)

    def to_secret_data(self) -> dict[str, str]:
        data = {
            KEY_TLS_CRT: self.serving.cert_pem,
            KEY_TLS_KEY: self.serving.key_pem,
            KEY_CA_CRT: self.bundle_pem,
            KEY_CA_KEY: self.signer.key_pem,
        }
        if self.next_ca is not None:
            data[KEY_CA_NEXT_KEY] = self.next_ca.key_pem
        if self.results is not None:
            data[KEY_RESULTS_CRT] = self.results.cert_pem
            data[KEY_RESULTS_KEY] = self.results.key_pem
        return {k: base64.b64encode(v).decode() for k, v in data.items()}

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str] | None) -> TLSState:
        """Parse a Secret's `data`; CertificateError when anything is missing or inconsistent."""
        raw: dict[str, bytes] = {}
        for key, value in (data or {}).items():
            try:
                raw[key] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise CertificateError(f"Secret key {key}: not base64") from exc
        missing = [k for k in (KEY_TLS_CRT, KEY_TLS_KEY, KEY_CA_CRT, KEY_CA_KEY) if not raw.get(k)]
        if missing:
            raise CertificateError(f"Secret lacks {', '.join(missing)}")
        bundle = tuple(load_certificates(raw[KEY_CA_CRT]))
        serving_certs = load_certificates(raw[KEY_TLS_CRT])
        serving = KeyPair(serving_certs[0], load_private_key(raw[KEY_TLS_KEY]))
        if not key_matches(serving.cert, serving.key):
            raise CertificateError("tls.key does not belong to tls.crt")
        signer = _pair_from_bundle(bundle, load_private_key(raw[KEY_CA_KEY]), KEY_CA_KEY)
        next_ca = None
        if raw.get(KEY_CA_NEXT_KEY):
            next_key = load_private_key(raw[KEY_CA_NEXT_KEY])
            next_ca = _pair_from_bundle(bundle, next_key, KEY_CA_NEXT_KEY)
        results = None
        if raw.get(KEY_RESULTS_CRT) and raw.get(KEY_RESULTS_KEY):
            pair = KeyPair(load_certificates(raw[KEY_RESULTS_CRT])[0],
                           load_private_key(raw[KEY_RESULTS_KEY]))
            results = pair if key_matches(pair.cert, pair.key) else None  # reissued below
        return cls(signer=signer, serving=serving, bundle=bundle, next_ca=next_ca,
                   results=results)


def _pair_from_bundle(bundle: Sequence[x509.Certificate], key: PrivateKey, what: str) -> KeyPair:
    for cert in bundle:
        if key_matches(cert, key):
            return KeyPair(cert, key)
    raise CertificateError(f"no certificate in ca.crt matches {what}")


def _names_of(cert: x509.Certificate) -> set[str]:
    return set(subject_alt_names(cert))


def plan_rotation(
    state: TLSState | None,
    names: Sequence[str],
    policy: RotationPolicy = RotationPolicy(),  # noqa: B008 - frozen dataclass
    now: dt.datetime | None = None,
    *,
    force_serving: bool = False,
    force_ca: bool = False,
    next_ca_published: bool = True,
    results_names: Sequence[str] = (),
) -> tuple[TLSState, list[str]]:
    """Decide the next state. Returns (state, reasons); no reasons means nothing to change.

    The CA roll takes three steps so that clients always trust the certificate they are shown:
    1. a next CA is generated and added to the bundle (the old CA keeps signing);
    2. once it has been in the bundle for `ca_overlap` and every webhook configuration's
       caBundle carries it (`next_ca_published`), it becomes the signer and a new serving
       certificate is issued; the bundle still holds the old CA for replicas not yet reloaded;
    3. `ca_overlap` after that, the old CA leaves the bundle.

    `results_names`: also keep a serving pair for the results service (same CA, same renewal
    rules); empty: none.
    """
    now = now or utcnow()
    reasons: list[str] = []
    if state is None or is_expired(state.signer.cert, now):
        signer = generate_ca(validity=policy.ca_validity, now=now)
        serving = generate_serving(signer, names, policy.serving_validity, now)
        results = (generate_serving(signer, results_names, policy.serving_validity, now)
                   if results_names else None)
        why = "created CA and serving certificate" if state is None else "CA expired: replaced"
        return TLSState(signer=signer, serving=serving, bundle=(signer.cert,),
                        results=results), [why]

    signer, serving, next_ca = state.signer, state.serving, state.next_ca
    bundle = list(state.bundle)
    if next_ca is None and (force_ca or needs_renewal(signer.cert, now, policy.renew_fraction)):
        next_ca = generate_ca(validity=policy.ca_validity, now=now)
        bundle.append(next_ca.cert)
        reasons.append("introduced next CA into the bundle")
    elif (
        next_ca is not None
        and now >= issued_at(next_ca.cert) + policy.ca_overlap
        and (next_ca_published or is_expired(signer.cert, now + dt.timedelta(days=1)))
    ):
        signer, next_ca = next_ca, None
        reasons.append("promoted next CA to signer")

    serving_reason = _renewal_reason(serving, signer, names, policy, now, force_serving)
    if serving_reason:
        serving = generate_serving(signer, names, policy.serving_validity, now)
        reasons.append(serving_reason)
    results = state.results
    if not results_names:
        if results is not None:
            results = None
            reasons.append("results service certificate no longer wanted")
    else:
        results_reason = ("results service certificate missing" if results is None else
                          _renewal_reason(results, signer, results_names, policy, now,
                                          force_serving))
        if results_reason:
            results = generate_serving(signer, results_names, policy.serving_validity, now)
            reasons.append(results_reason.replace("serving certificate",
                                                  "results service certificate"))

    # Trust: the signer first (readers that take only one certificate get the right one),
    # the next CA, then retired CAs while a replica may still serve a certificate they signed.
    keep_retired_until = issued_at(serving.cert) + policy.ca_overlap
    retired = [
        c for c in bundle
        if c not in (signer.cert,) and (next_ca is None or c != next_ca.cert)
        and not is_expired(c, now) and now < keep_retired_until
    ]  # fmt: skip
    new_bundle = [signer.cert] + ([next_ca.cert] if next_ca else []) + retired
    deduped: list[x509.Certificate] = []
    for cert in new_bundle:
        if cert not in deduped:
            deduped.append(cert)
    if deduped != list(state.bundle) and not reasons:
        reasons.append("pruned retired CA from the bundle")
    new_state = TLSState(signer=signer, serving=serving, bundle=tuple(deduped), next_ca=next_ca,
                         results=results)
    return new_state, reasons


def _renewal_reason(pair: KeyPair, signer: KeyPair, names: Sequence[str],
                    policy: RotationPolicy, now: dt.datetime, force: bool) -> str | None:
    """Why a serving pair must be issued again, or None."""
    if force:
        return "forced serving certificate renewal"
    if not issued_by(pair.cert, signer.cert):
        return "serving certificate not signed by the signing CA"
    if is_expired(pair.cert, now) or needs_renewal(pair.cert, now, policy.renew_fraction):
        return "serving certificate due for renewal"
    if _names_of(pair.cert) != set(names):
        return "serving certificate names changed"
    if pair.cert.not_valid_after_utc > signer.cert.not_valid_after_utc:
        return "serving certificate outlives its CA"
    return None


def resolve_namespace(settings: Settings) -> str:
    if settings.webhook_namespace:
        return settings.webhook_namespace
    if os.environ.get(ENV_POD_NAMESPACE):
        return os.environ[ENV_POD_NAMESPACE]
    try:
        return Path(SERVICE_ACCOUNT_NAMESPACE_FILE).read_text().strip()
    except OSError as exc:
        raise CertificateError(
            "certificatesMode self needs the webhook's namespace: set webhookNamespace "
            f"(SIDECAR_DEBUG_WEBHOOK_NAMESPACE) or {ENV_POD_NAMESPACE}"
        ) from exc


def serving_names(settings: Settings, namespace: str) -> list[str]:
    names = service_dns_names(settings.service_name, namespace, settings.cluster_domain)
    extra = [n.strip() for n in os.environ.get(ENV_EXTRA_SANS, "").split(",") if n.strip()]
    return names + [n for n in extra if n not in names]


def _decode_bundle(value: str | None) -> bytes:
    if not value:
        return b""
    try:
        return base64.b64decode(value)
    except (binascii.Error, ValueError):
        return b""


def empty_secret(namespace: str, name: str) -> dict[str, Any]:
    """The Secret the chart creates for `self` mode (templates/webhook-tls-secret.yaml): the
    type and the keys a kubernetes.io/tls Secret must have, all empty, for the webhook to fill."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": constants.SECRET_TYPE_TLS,
        "data": {KEY_TLS_CRT: "", KEY_TLS_KEY: "", KEY_CA_CRT: ""},
    }


def is_empty_secret(secret: Mapping[str, Any]) -> bool:
    """True for a Secret with no data or only empty values (the chart's, before the first fill)."""
    return not any((secret.get("data") or {}).values())


def missing_secret_message(namespace: str, name: str) -> str:
    return (
        f"Secret {namespace}/{name} does not exist: the chart creates it empty at install and "
        "the webhook fills it (it may only get and update it). Recreate it with "
        f"`sidecar-debug certs ensure -n {namespace} --secret {name}`, or "
        f"`kubectl -n {namespace} create secret generic {name} --type={constants.SECRET_TYPE_TLS}"
        " --from-literal=tls.crt= --from-literal=tls.key=`"
    )


class SelfManager:
    """Keeps the Secret, the webhook configurations' caBundle and local files in step.

    Leader-less: every replica runs the same loop; all writes are conditional on the
    resourceVersion that was read, so concurrent replicas converge (the loser re-reads)."""

    def __init__(
        self,
        store: SecretStore,
        namespace: str,
        secret_name: str,
        names: Sequence[str],
        webhook_configuration: str,
        policy: RotationPolicy | None = None,
        clock: Callable[[], dt.datetime] = utcnow,
        results_names: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.secret_name = secret_name
        self.names = list(names)
        self.webhook_configuration = webhook_configuration
        self.policy = policy or RotationPolicy()
        self.clock = clock
        self.results_names = list(results_names)

    @classmethod
    def from_settings(cls, settings: Settings, store: SecretStore | None = None) -> SelfManager:
        namespace = resolve_namespace(settings)
        return cls(
            store=store or KubernetesStore(),
            namespace=namespace,
            secret_name=settings.certificates_secret,
            names=serving_names(settings, namespace),
            webhook_configuration=settings.webhook_configuration,
            policy=RotationPolicy.from_environment(),
            results_names=service_dns_names(settings.results_service_name, namespace,
                                            settings.cluster_domain)
            if settings.results_service_name else (),
        )

    # -- Secret

    def _secret_body(self, state: TLSState, previous: dict[str, Any] | None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.secret_name, "namespace": self.namespace}
        if previous is not None:
            metadata = dict(previous.get("metadata") or {}) | metadata
        labels = dict(metadata.get("labels") or {})
        labels.setdefault(constants.LABEL_MANAGED_BY, constants.MANAGED_BY_VALUE)
        metadata["labels"] = labels
        owner = self._owner_reference()
        references = list(metadata.get("ownerReferences") or [])
        if owner is not None and not any(r.get("uid") == owner["uid"] for r in references):
            metadata["ownerReferences"] = [*references, owner]
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata,
            "type": constants.SECRET_TYPE_TLS,
            "data": state.to_secret_data(),
        }

    def _owner_reference(self) -> dict[str, Any] | None:
        """The webhook configuration as the Secret's owner: Helm created the Secret as an
        install hook and never deletes it, so `helm uninstall` deleting the configuration lets
        the garbage collector remove the Secret. No blockOwnerDeletion: it needs finalizer
        rights."""
        kind = WEBHOOK_KINDS[0]
        try:
            obj = self.store.read_webhook_configuration(kind, self.webhook_configuration)
        except Exception as exc:  # noqa: BLE001 - an owner is a nicety; never block the Secret
            log.debug("no owner for the Secret: cannot read %s: %s", kind, exc)
            return None
        uid = ((obj or {}).get("metadata") or {}).get("uid")
        if not uid:
            return None
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "name": self.webhook_configuration,
            "uid": uid,
        }

    def _next_ca_published(self, state: TLSState) -> bool:
        """True when every webhook entry that exists already trusts the next CA."""
        if state.next_ca is None:
            return True
        wanted = state.next_ca.cert
        for kind in WEBHOOK_KINDS:
            try:
                obj = self.store.read_webhook_configuration(kind, self.webhook_configuration)
            except Exception as exc:  # noqa: BLE001 - unknown means not yet: delay the switch
                log.warning("cannot read %s %s: %s", kind, self.webhook_configuration, exc)
                return False
            for entry in (obj or {}).get("webhooks") or []:
                raw = _decode_bundle((entry.get("clientConfig") or {}).get("caBundle"))
                try:
                    trusted = load_certificates(raw) if raw else []
                except CertificateError:
                    trusted = []
                if wanted not in trusted:
                    return False
        return True

    def ensure(
        self, *, force_serving: bool = False, force_ca: bool = False, attempts: int = 8
    ) -> tuple[TLSState, list[str]]:
        """Fill the empty Secret, rotate what is due, and return the stored state."""
        for _ in range(attempts):
            current = self.store.read_secret(self.namespace, self.secret_name)
            if current is None:
                raise CertificateError(missing_secret_message(self.namespace, self.secret_name))
            if current.get("type") != constants.SECRET_TYPE_TLS:
                raise CertificateError(
                    f"Secret {self.namespace}/{self.secret_name} has type "
                    f"{current.get('type')!r}, not {constants.SECRET_TYPE_TLS}: "
                    "delete it or choose another certificatesSecret"
                )
            state: TLSState | None = None
            if not is_empty_secret(current):
                try:
                    state = TLSState.from_secret_data(current.get("data"))
                except CertificateError as exc:
                    log.warning("Secret %s/%s is unusable (%s): regenerating",
                                self.namespace, self.secret_name, exc)  # fmt: skip
            published = True
            if state is not None and state.next_ca is not None:
                published = self._next_ca_published(state)
            new_state, reasons = plan_rotation(
                state, self.names, self.policy, self.clock(),
                force_serving=force_serving, force_ca=force_ca, next_ca_published=published,
                results_names=self.results_names,
            )  # fmt: skip
            if not reasons:
                assert state is not None  # noqa: S101 - plan_rotation always acts on None
                return state, []
            try:
                body = self._secret_body(new_state, current)
                self.store.replace_secret(self.namespace, self.secret_name, body)
            except ConflictError:
                # Another replica filled or changed it first: theirs wins, decide again.
                log.info("Secret %s/%s changed concurrently; re-reading",
                         self.namespace, self.secret_name)  # fmt: skip
                continue
            log.info("Secret %s/%s updated: %s",
                     self.namespace, self.secret_name, "; ".join(reasons))  # fmt: skip
            return new_state, reasons
        raise CertificateError(
            f"Secret {self.namespace}/{self.secret_name}: gave up after {attempts} conflicts"
        )

    # -- caBundle

    def reconcile_ca_bundle(self, bundle: bytes) -> list[str]:
        """Write `bundle` into every entry of the webhook configurations that exist.

        Returns the kinds that were patched. A conflict is left for the next round."""
        wanted = base64.b64encode(bundle).decode()
        patched: list[str] = []
        for kind in WEBHOOK_KINDS:
            try:
                if self._write_ca_bundle(kind, wanted):
                    patched.append(kind)
            except ConflictError:
                log.info("%s %s changed concurrently; will retry", kind, self.webhook_configuration)
            except Exception as exc:  # noqa: BLE001 - one kind failing must not block the other
                log.warning("cannot write the caBundle of %s %s: %s",
                            kind, self.webhook_configuration, exc)  # fmt: skip
        return patched

    def _write_ca_bundle(self, kind: str, wanted: str) -> bool:
        obj = self.store.read_webhook_configuration(kind, self.webhook_configuration)
        if obj is None:
            return False
        changed = False
        for entry in obj.get("webhooks") or []:
            client_config = entry.setdefault("clientConfig", {})
            if client_config.get("caBundle") != wanted:
                client_config["caBundle"] = wanted
                changed = True
        if not changed:
            return False
        self.store.replace_webhook_configuration(kind, self.webhook_configuration, obj)
        log.info("%s %s: caBundle written", kind, self.webhook_configuration)
        return True

    def run_once(
        self, cert_file: str | None = None, key_file: str | None = None, **force: bool
    ) -> TLSState:
        """One maintenance round: Secret, then local files, then caBundle."""
        state, _ = self.ensure(**force)
        if cert_file and key_file:
            write_serving_pair(cert_file, key_file, state.serving)
            # The trust bundle beside them: the webhook injects it into toolsets that push to
            # the results service (webhook.certs.tls.results_ca_file).
            ca_file = os.path.join(os.path.dirname(cert_file), KEY_CA_CRT)
            current = b""
            with contextlib.suppress(OSError):
                current = Path(ca_file).read_bytes()
            if current != state.bundle_pem:
                write_private_file(ca_file, state.bundle_pem, 0o644)
        self.reconcile_ca_bundle(state.bundle_pem)
        return state


def _ensure_logging(settings: Settings) -> None:
    # The CLI process and gunicorn's master have no root handler (the app configures logging
    # in the workers); certificate events must still reach the log.
    if not logging.getLogger().handlers:
        from webhook import logs

        logs.configure(settings.log_level)


def prepare_serving_files(settings: Settings) -> tuple[str, str]:
    """The certificate and key files the server should load.

    `self` mode: make sure the Secret holds a pair (fill it or read the winner's), write that
    pair into a private in-memory directory (0600) and return those paths. Other modes: the
    configured files (the chart mounts the Secret at /etc/sidecar-debug/tls/)."""
    if settings.certificates_mode != "self":
        if not (settings.tls_cert_file and settings.tls_key_file):
            raise CertificateError(
                f"certificatesMode {settings.certificates_mode} needs tlsCertFile and tlsKeyFile"
            )
        return settings.tls_cert_file, settings.tls_key_file
    _ensure_logging(settings)
    directory = private_directory()
    cert_file = os.path.join(directory, KEY_TLS_CRT)
    key_file = os.path.join(directory, KEY_TLS_KEY)
    try:
        manager = SelfManager.from_settings(settings)
        manager.run_once(cert_file, key_file)
    except CertificateError:
        raise
    except Exception as exc:  # noqa: BLE001 - API/config errors: one clear line, not a traceback
        raise CertificateError(
            f"certificatesMode self: cannot read or update Secret {settings.certificates_secret}"
            f": {type(exc).__name__}: {exc}"
        ) from exc
    return cert_file, key_file


_maintenance_lock = threading.Lock()


_maintenance_threads: dict[tuple[str, str], tuple[threading.Thread, threading.Event]] = {}


def resync_seconds(environ: Mapping[str, str] | None = None) -> float:
    environ = os.environ if environ is None else environ
    value = environ.get(ENV_RESYNC_SECONDS)
    return float(value) if value else DEFAULT_RESYNC_SECONDS


def start_background_maintenance(
    settings: Settings,
    cert_file: str,
    key_file: str,
    manager: SelfManager | None = None,
    interval: float | None = None,
) -> threading.Thread | None:
    """`self` mode: a daemon thread that every `interval` seconds renews what is due, rewrites
    the local files from the Secret and restores a blanked caBundle. Idempotent per process and
    file pair. Other modes: nothing to do (the reloading context watches the mounted files)."""
    if settings.certificates_mode != "self":
        return None
    _ensure_logging(settings)
    with _maintenance_lock:
        existing = _maintenance_threads.get((cert_file, key_file))
        if existing is not None and existing[0].is_alive():
            return existing[0]
        the_manager = manager or SelfManager.from_settings(settings)
        period = resync_seconds() if interval is None else interval
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(period):
                try:
                    the_manager.run_once(cert_file, key_file)
                except (CertificateError, StoreError) as exc:  # one line says it all
                    log.warning("certificate maintenance: %s; retrying in %ss", exc, period)
                except Exception:  # noqa: BLE001 - keep serving; the next round retries
                    log.exception("certificate maintenance failed; retrying in %ss", period)

        thread = threading.Thread(target=loop, name="sidecar-debug-certs", daemon=True)
        thread.start()
        _maintenance_threads[(cert_file, key_file)] = (thread, stop)
        return thread


def stop_background_maintenance(timeout: float = 5.0) -> None:
    """Stop every maintenance thread of this process (tests; shutdown)."""
    with _maintenance_lock:
        entries = list(_maintenance_threads.values())
        _maintenance_threads.clear()
    for thread, stop in entries:
        stop.set()
        thread.join(timeout)
