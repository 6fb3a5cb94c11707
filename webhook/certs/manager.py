"""Certificates: a private CA and the webhook's serving certificate, made with `cryptography`.

Three parts, each usable alone:

* Generation, inspection and expiry maths (pure functions over `cryptography.x509`).
* The `self` mode manager: the TLS Secret is the source of truth. The first replica creates it
  (a 409 Conflict means another replica won: read theirs), every replica renews through
  resourceVersion-conditional updates (a 409 means someone else already did: re-read), the CA
  is rolled with an overlap, and the CA bundle is written into the `caBundle` of every entry of
  the webhook configurations (and written again when something blanks it).
* Serving with reload: `reloading_ssl_context` gives new handshakes the newest certificate
  files while established connections keep the certificate they were set up with.

Key type: ECDSA P-256. Generation takes well under a millisecond (RSA 2048 takes ~50 ms and
more on a busy 2-core machine, paid by every replica start and every test), handshakes are
cheaper, and every TLS client that calls a webhook (Go's crypto/tls in the apiserver since
Kubernetes 1.0, curl, Python) supports it. RSA keys are still accepted when loading
(`provided` mode, `inspect`).

Secret layout (type kubernetes.io/tls, one object so that every change is one atomic,
resourceVersion-conditional update and the webhook needs RBAC on one name only):
  tls.crt       serving certificate (leaf), signed by the signing CA
  tls.key       its key
  ca.crt        trust bundle: every CA a client should trust right now (signing CA first)
  ca.key        the signing CA's key (the CA certificate is the bundle entry matching it)
  ca-next.key   only while the CA is rolled: the key of the CA being introduced
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime as dt
import hashlib
import ipaddress
import json
import logging
import os
import secrets
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

if TYPE_CHECKING:
    from webhook.config import Settings

log = logging.getLogger(__name__)

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
# Certificates are dated this far into the past so that a node whose clock runs a little behind
# ours does not reject a certificate that was issued a moment ago.
BACKDATE = dt.timedelta(minutes=5)
CA_COMMON_NAME = "sidecar-debug-ca"
DEFAULT_CA_VALIDITY = dt.timedelta(days=3650)
DEFAULT_SERVING_VALIDITY = dt.timedelta(days=90)
DEFAULT_RENEW_FRACTION = 2 / 3
DEFAULT_CA_OVERLAP = dt.timedelta(hours=1)
DEFAULT_RESYNC_SECONDS = 30.0
# Test and development knobs (not Settings fields: operators never need them).
ENV_RESYNC_SECONDS = "SIDECAR_DEBUG_CERTS_RESYNC_SECONDS"
ENV_CA_OVERLAP_SECONDS = "SIDECAR_DEBUG_CERTS_CA_OVERLAP_SECONDS"
ENV_EXTRA_SANS = "SIDECAR_DEBUG_CERTS_EXTRA_SANS"
ENV_POD_NAMESPACE = "POD_NAMESPACE"
SERVICE_ACCOUNT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
SECRET_TYPE_TLS = "kubernetes.io/tls"  # noqa: S105 - a type name, not a password
KEY_TLS_CRT, KEY_TLS_KEY, KEY_CA_CRT, KEY_CA_KEY = "tls.crt", "tls.key", "ca.crt", "ca.key"
KEY_CA_NEXT_KEY = "ca-next.key"
MANAGED_BY_LABEL = ("app.kubernetes.io/managed-by", "sidecar-debug")


class CertificateError(RuntimeError):
    """Certificate material is missing, unreadable or does not fit together."""


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# --------------------------------------------------------------------------------------------
# Generation


@dataclass(frozen=True)
class KeyPair:
    """A certificate with its private key."""

    cert: x509.Certificate
    key: PrivateKey

    def __eq__(self, other: object) -> bool:
        # Key objects compare by identity; a certificate names exactly one public key, and
        # pairs are only built from matching halves, so the certificate decides.
        return isinstance(other, KeyPair) and self.cert == other.cert

    def __hash__(self) -> int:
        return hash(self.cert)

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def generate_private_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def service_dns_names(
    service: str, namespace: str, cluster_domain: str = "cluster.local"
) -> list[str]:
    """The names a client may use for a Service: short, namespaced, `.svc` and fully qualified."""
    names = [service, f"{service}.{namespace}", f"{service}.{namespace}.svc"]
    domain = cluster_domain.strip(".")
    if domain:
        names.append(f"{service}.{namespace}.svc.{domain}")
    return names


def _serial() -> int:
    # 159 random bits: positive, below the 20-octet limit of RFC 5280, unguessable.
    return secrets.randbits(159) | 1


def generate_ca(
    common_name: str = CA_COMMON_NAME,
    validity: dt.timedelta = DEFAULT_CA_VALIDITY,
    now: dt.datetime | None = None,
) -> KeyPair:
    """A self-signed CA that can sign end-entity certificates only (path length 0)."""
    now = now or utcnow()
    key = generate_private_key()
    # A unique suffix so that an old and a new CA are told apart in a bundle and in logs.
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, f"{common_name}@{int(now.timestamp())}"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sidecar-debug"),
        ]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(_serial())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert, key)


def _general_names(names: Iterable[str]) -> list[x509.GeneralName]:
    result: list[x509.GeneralName] = []
    for name in names:
        try:
            result.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            result.append(x509.DNSName(name))
    return result


def generate_serving(
    ca: KeyPair,
    names: Sequence[str],
    validity: dt.timedelta = DEFAULT_SERVING_VALIDITY,
    now: dt.datetime | None = None,
) -> KeyPair:
    """A TLS server certificate for `names` (DNS names or IP addresses), signed by `ca`.

    The first name is also the subject CN for humans; clients match the SANs only (Go ignores
    the CN since 1.15)."""
    if not names:
        raise CertificateError("a serving certificate needs at least one name")
    now = now or utcnow()
    key = generate_private_key()
    not_after = min(now + validity, ca.cert.not_valid_after_utc)
    ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(_serial())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                # ECDHE key exchange needs digitalSignature only; keyEncipherment is for RSA
                # key transport, which an EC key cannot do.
                digital_signature=True, key_encipherment=isinstance(key, rsa.RSAPrivateKey),
                content_commitment=False, data_encipherment=False, key_agreement=False,
                key_cert_sign=False, crl_sign=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(_general_names(names)), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .sign(ca.key, hashes.SHA256())
    )
    return KeyPair(cert, key)


# --------------------------------------------------------------------------------------------
# Loading, inspection, verification


def load_certificates(pem: bytes) -> list[x509.Certificate]:
    """Every certificate in a PEM bundle; CertificateError when there is none."""
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise CertificateError(f"not a PEM certificate bundle: {exc}") from exc
    return certs


def load_private_key(pem: bytes) -> PrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise CertificateError(f"not an unencrypted PEM private key: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise CertificateError(f"unsupported key type {type(key).__name__}; use EC or RSA")
    return key


def _public_der(public_key: Any) -> bytes:
    der: bytes = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return der


def key_matches(cert: x509.Certificate, key: PrivateKey) -> bool:
    return _public_der(cert.public_key()) == _public_der(key.public_key())


def key_description(public_key: Any) -> str:
    if isinstance(public_key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey):
        return f"ECDSA {public_key.curve.name}"
    if isinstance(public_key, rsa.RSAPublicKey | rsa.RSAPrivateKey):
        return f"RSA {public_key.key_size}"
    if isinstance(public_key, ed25519.Ed25519PublicKey | ed25519.Ed25519PrivateKey):
        return "Ed25519"
    return type(public_key).__name__


def subject_alt_names(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    names: list[str] = [str(n) for n in san.get_values_for_type(x509.DNSName)]
    names += [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    return names


def is_ca(cert: x509.Certificate) -> bool:
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return False


def days_left(cert: x509.Certificate, now: dt.datetime | None = None) -> float:
    now = now or utcnow()
    return (cert.not_valid_after_utc - now).total_seconds() / 86400


def issued_at(cert: x509.Certificate) -> dt.datetime:
    """When we issued `cert` (not-before is backdated by BACKDATE)."""
    return cert.not_valid_before_utc + BACKDATE


def lifetime(cert: x509.Certificate) -> dt.timedelta:
    return cert.not_valid_after_utc - cert.not_valid_before_utc


def renewal_time(cert: x509.Certificate, fraction: float = DEFAULT_RENEW_FRACTION) -> dt.datetime:
    """The moment `fraction` of the certificate's lifetime has passed."""
    return cert.not_valid_before_utc + lifetime(cert) * fraction


def needs_renewal(
    cert: x509.Certificate, now: dt.datetime | None = None, fraction: float = DEFAULT_RENEW_FRACTION
) -> bool:
    return (now or utcnow()) >= renewal_time(cert, fraction)


def is_expired(cert: x509.Certificate, now: dt.datetime | None = None) -> bool:
    now = now or utcnow()
    return not (cert.not_valid_before_utc <= now < cert.not_valid_after_utc)


def fingerprint(cert: x509.Certificate) -> str:
    return cert.fingerprint(hashes.SHA256()).hex(":")


def describe(cert: x509.Certificate, now: dt.datetime | None = None) -> dict[str, Any]:
    """What `certs inspect` prints, as data."""
    return {
        "subject": cert.subject.rfc4514_string(),
        "issuer": cert.issuer.rfc4514_string(),
        "sans": subject_alt_names(cert),
        "isCA": is_ca(cert),
        "notBefore": cert.not_valid_before_utc.isoformat(),
        "notAfter": cert.not_valid_after_utc.isoformat(),
        "daysLeft": round(days_left(cert, now), 2),
        "keyType": key_description(cert.public_key()),
        "serial": format(cert.serial_number, "x"),
        "sha256": fingerprint(cert),
    }


def verify_chain(
    leaf: x509.Certificate,
    cas: Sequence[x509.Certificate],
    name: str | None = None,
    now: dt.datetime | None = None,
) -> None:
    """Verify `leaf` as a TLS server certificate for `name` (default: its first SAN) against
    the trust anchors `cas`, with the same rules as a browser-grade client (RFC 5280 + CA/B
    baseline: key usage, EKU serverAuth, SAN match, validity). Raises CertificateError."""
    from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

    if name is None:
        sans = subject_alt_names(leaf)
        if not sans:
            raise CertificateError("certificate has no subjectAltName")
        name = sans[0]
    subject: x509.DNSName | x509.IPAddress = _general_names([name])[0]  # type: ignore[assignment]
    verifier = (
        PolicyBuilder()
        .store(Store(list(cas)))
        .time(now or utcnow())
        .build_server_verifier(subject)
    )
    try:
        verifier.verify(leaf, [])
    except VerificationError as exc:
        raise CertificateError(f"does not verify for {name}: {exc}") from exc


def issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def bundle_pem(certs: Iterable[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


# --------------------------------------------------------------------------------------------
# Files


def write_private_file(path: Path | str, data: bytes, mode: int = 0o600) -> None:
    """Write `data` atomically (temporary file + rename) with `mode` from the first byte on."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_bundle(
    directory: Path | str, ca: KeyPair, serving: KeyPair, write_ca_key: bool = False
) -> dict[str, Path]:
    """Write ca.crt, tls.crt, tls.key (and ca.key) into `directory`; keys are mode 0600."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        KEY_CA_CRT: (ca.cert_pem, 0o644),
        KEY_TLS_CRT: (serving.cert_pem, 0o644),
        KEY_TLS_KEY: (serving.key_pem, 0o600),
    }
    if write_ca_key:
        files[KEY_CA_KEY] = (ca.key_pem, 0o600)
    written: dict[str, Path] = {}
    for name, (data, mode) in files.items():
        write_private_file(directory / name, data, mode)
        written[name] = directory / name
    return written


def private_directory() -> str:
    """A fresh 0700 directory in memory (/dev/shm) when possible, else in $TMPDIR."""
    base = "/dev/shm"  # noqa: S108 - a private mkdtemp below, not a fixed name
    if not (os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK)):
        base = tempfile.gettempdir()
    return tempfile.mkdtemp(prefix="sidecar-debug-tls-", dir=base)


# --------------------------------------------------------------------------------------------
# Self mode: state, rotation decisions (pure)


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
        return cls(signer=signer, serving=serving, bundle=bundle, next_ca=next_ca)


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
) -> tuple[TLSState, list[str]]:
    """Decide the next state. Returns (state, reasons); no reasons means nothing to change.

    The CA roll takes three steps so that clients always trust the certificate they are shown:
    1. a next CA is generated and added to the bundle (the old CA keeps signing);
    2. once it has been in the bundle for `ca_overlap` and every webhook configuration's
       caBundle carries it (`next_ca_published`), it becomes the signer and a new serving
       certificate is issued; the bundle still holds the old CA for replicas not yet reloaded;
    3. `ca_overlap` after that, the old CA leaves the bundle.
    """
    now = now or utcnow()
    reasons: list[str] = []
    if state is None or is_expired(state.signer.cert, now):
        signer = generate_ca(validity=policy.ca_validity, now=now)
        serving = generate_serving(signer, names, policy.serving_validity, now)
        why = "created CA and serving certificate" if state is None else "CA expired: replaced"
        return TLSState(signer=signer, serving=serving, bundle=(signer.cert,)), [why]

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

    serving_reason = None
    if force_serving:
        serving_reason = "forced serving certificate renewal"
    elif not issued_by(serving.cert, signer.cert):
        serving_reason = "serving certificate not signed by the signing CA"
    elif is_expired(serving.cert, now) or needs_renewal(serving.cert, now, policy.renew_fraction):
        serving_reason = "serving certificate due for renewal"
    elif _names_of(serving.cert) != set(names):
        serving_reason = "serving certificate names changed"
    elif serving.cert.not_valid_after_utc > signer.cert.not_valid_after_utc:
        serving_reason = "serving certificate outlives its CA"
    if serving_reason:
        serving = generate_serving(signer, names, policy.serving_validity, now)
        reasons.append(serving_reason)

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
    new_state = TLSState(signer=signer, serving=serving, bundle=tuple(deduped), next_ca=next_ca)
    return new_state, reasons


# --------------------------------------------------------------------------------------------
# Self mode: the Kubernetes side


class ConflictError(RuntimeError):
    """Someone else changed the object first."""


class SecretStore(Protocol):
    """The few calls the manager makes; plain dicts in and out (tests use an in-memory fake)."""

    def read_secret(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def create_secret(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def replace_secret(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def read_webhook_configuration(self, kind: str, name: str) -> dict[str, Any] | None: ...

    def replace_webhook_configuration(
        self, kind: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any]: ...


WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


class KubernetesStore:
    """SecretStore over the official client, keeping objects as plain dicts.

    Raises ConflictError on 409 (create of an existing object, or a stale resourceVersion)."""

    def __init__(self, api_client: Any = None) -> None:
        from kubernetes import client

        if api_client is None:
            api_client = new_api_client()
        self._core = client.CoreV1Api(api_client)
        self._admission = client.AdmissionregistrationV1Api(api_client)

    @staticmethod
    def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            response = fn(*args, _preload_content=False, **kwargs)
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 409:
                raise ConflictError(str(exc.reason)) from exc
            raise
        body: dict[str, Any] = json.loads(response.data)
        return body

    def _must(self, result: dict[str, Any] | None, what: str) -> dict[str, Any]:
        if result is None:
            raise ConflictError(f"{what} disappeared")
        return result

    def read_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._call(self._core.read_namespaced_secret, name, namespace)

    def create_secret(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        result = self._call(self._core.create_namespaced_secret, namespace, body)
        return self._must(result, "Secret")

    def replace_secret(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        result = self._call(self._core.replace_namespaced_secret, name, namespace, body)
        return self._must(result, "Secret")

    def _webhook_calls(self, kind: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
        if kind == "MutatingWebhookConfiguration":
            return (
                self._admission.read_mutating_webhook_configuration,
                self._admission.replace_mutating_webhook_configuration,
            )
        return (
            self._admission.read_validating_webhook_configuration,
            self._admission.replace_validating_webhook_configuration,
        )

    def read_webhook_configuration(self, kind: str, name: str) -> dict[str, Any] | None:
        return self._call(self._webhook_calls(kind)[0], name)

    def replace_webhook_configuration(
        self, kind: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        return self._must(self._call(self._webhook_calls(kind)[1], name, body), kind)


def new_api_client() -> Any:
    """In-cluster configuration when running in a pod, else KUBECONFIG / ~/.kube/config."""
    from webhook.kube.client import api_client

    return api_client()


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
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.secret_name = secret_name
        self.names = list(names)
        self.webhook_configuration = webhook_configuration
        self.policy = policy or RotationPolicy()
        self.clock = clock

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
        )

    # -- Secret

    def _secret_body(self, state: TLSState, previous: dict[str, Any] | None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.secret_name, "namespace": self.namespace}
        if previous is not None:
            metadata = dict(previous.get("metadata") or {}) | metadata
        labels = dict(metadata.get("labels") or {})
        labels.setdefault(*MANAGED_BY_LABEL)
        metadata["labels"] = labels
        owner = self._owner_reference()
        references = list(metadata.get("ownerReferences") or [])
        if owner is not None and not any(r.get("uid") == owner["uid"] for r in references):
            metadata["ownerReferences"] = [*references, owner]
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata,
            "type": SECRET_TYPE_TLS,
            "data": state.to_secret_data(),
        }

    def _owner_reference(self) -> dict[str, Any] | None:
        """The webhook configuration as the Secret's owner: Helm does not know the Secret (the
        webhook made it), so `helm uninstall` deleting the configuration lets the garbage
        collector remove the Secret too. No blockOwnerDeletion: it needs finalizer rights."""
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
        """Create the Secret if absent, rotate what is due, and return the stored state."""
        for _ in range(attempts):
            current = self.store.read_secret(self.namespace, self.secret_name)
            state: TLSState | None = None
            if current is not None:
                if current.get("type") != SECRET_TYPE_TLS:
                    raise CertificateError(
                        f"Secret {self.namespace}/{self.secret_name} has type "
                        f"{current.get('type')!r}, not {SECRET_TYPE_TLS}: delete it or choose "
                        "another certificatesSecret"
                    )
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
            )  # fmt: skip
            if not reasons:
                assert state is not None  # noqa: S101 - plan_rotation always acts on None
                return state, []
            try:
                if current is None:
                    self.store.create_secret(self.namespace, self._secret_body(new_state, None))
                else:
                    body = self._secret_body(new_state, current)
                    self.store.replace_secret(self.namespace, self.secret_name, body)
            except ConflictError:
                # Another replica created or changed it first: theirs wins, decide again.
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
        self.reconcile_ca_bundle(state.bundle_pem)
        return state


def write_serving_pair(cert_file: str, key_file: str, serving: KeyPair) -> bool:
    """Write the pair when it differs from what is on disk; True when something was written.

    The key goes first: the reloader only accepts a cert and key that match, so a reader that
    sees the new key with the old certificate retries on its next poll."""
    cert_pem, key_pem = serving.cert_pem, serving.key_pem
    with contextlib.suppress(OSError):
        if Path(cert_file).read_bytes() == cert_pem and Path(key_file).read_bytes() == key_pem:
            return False
    write_private_file(key_file, key_pem)
    write_private_file(cert_file, cert_pem)
    return True


# --------------------------------------------------------------------------------------------
# Serving integration (used by serve_cli / gunicorn_conf)


def _ensure_logging(settings: Settings) -> None:
    # The CLI process and gunicorn's master have no root handler (the app configures logging
    # in the workers); certificate events must still reach the log.
    if not logging.getLogger().handlers:
        from webhook import logs

        logs.configure(settings.log_level)


def prepare_serving_files(settings: Settings) -> tuple[str, str]:
    """The certificate and key files the server should load.

    `self` mode: make sure the Secret exists (create it or read the winner's), write its pair
    into a private in-memory directory (0600) and return those paths. Other modes: the
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
            f"certificatesMode self: cannot read or create Secret {settings.certificates_secret}"
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


def _file_signature(*paths: str) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A plain server context for one certificate pair (TLS 1.2+)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


@dataclass
class CertificateReloader:
    """Holds the newest fully loaded SSLContext for a cert/key file pair.

    A fresh context is built for every change and the reference swapped in one step, so a
    handshake never sees a half-loaded context (loading into a live context sets the
    certificate and the key in two calls). Files are compared by content, which also covers
    kubelet's symlink swap of mounted Secrets."""

    cert_file: str
    key_file: str
    poll_seconds: float = 1.0
    configure: Callable[[ssl.SSLContext], None] | None = None
    _signature: str = ""
    _context: ssl.SSLContext | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    _pid: int = 0
    _outer: ssl.SSLContext | None = None
    reloads: int = 0

    def _build(self) -> ssl.SSLContext:
        context = server_context(self.cert_file, self.key_file)
        if self.configure is not None:
            self.configure(context)
        return context

    def check(self) -> bool:
        """Reload when the files changed and load cleanly; True when a new context is live."""
        try:
            before = _file_signature(self.cert_file, self.key_file)
            if before == self._signature:
                return False
            context = self._build()
            # A writer may have replaced a file between reading and loading: only accept a
            # context whose files did not move underneath it.
            if _file_signature(self.cert_file, self.key_file) != before:
                return False
        except (OSError, ssl.SSLError) as exc:
            # Half-written pair (new key, old cert) or a missing file: keep the current one.
            log.debug("certificate reload deferred: %s", exc)
            return False
        with self._lock:
            first = self._context is None
            self._context, self._signature = context, before
            if not first:
                self.reloads += 1
        if not first:
            log.info("serving certificate reloaded from %s", self.cert_file)
        return True

    def current(self) -> ssl.SSLContext:
        self._ensure_watching()
        with self._lock:
            context = self._context
        if context is None:
            # The first load must succeed: fail loudly rather than serve nothing.
            context = self._build()
            with self._lock:
                self._context = context
                self._signature = _file_signature(self.cert_file, self.key_file)
        return context

    def _ensure_watching(self) -> None:
        # Threads do not survive fork (gunicorn workers): start one per process, lazily.
        if self._thread is not None and self._pid == os.getpid() and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is not None and self._pid == os.getpid() and self._thread.is_alive():
                return
            self._pid = os.getpid()
            self._thread = threading.Thread(
                target=self._watch, name="sidecar-debug-tls-reload", daemon=True
            )
            self._thread.start()

    def _watch(self) -> None:
        while True:
            time.sleep(self.poll_seconds)
            self.check()

    def ssl_context(self) -> ssl.SSLContext:
        """A server context whose handshakes switch to the newest loaded certificate.

        The outer context carries the initial certificate; its SNI callback (run by OpenSSL
        for every ClientHello, with or without SNI) moves the connection to the current
        context before the certificate is chosen. Established connections keep theirs."""
        if self._outer is not None:
            return self._outer
        self.current()  # first load (raises if the files are unusable) and the watcher
        outer = self._build()

        def switch(sock: Any, server_name: str | None, _ctx: ssl.SSLContext) -> None:
            newest = self.current()
            if sock.context is not newest:
                sock.context = newest

        outer.sni_callback = switch
        self._outer = outer
        return outer


_reloaders: dict[tuple[str, str], CertificateReloader] = {}
_reloaders_lock = threading.Lock()


def certificate_reloader(cert_file: str, key_file: str) -> CertificateReloader:
    """One reloader per file pair and process."""
    with _reloaders_lock:
        reloader = _reloaders.get((cert_file, key_file))
        if reloader is None:
            reloader = CertificateReloader(cert_file, key_file)
            reloader.check()
            _reloaders[(cert_file, key_file)] = reloader
        return reloader


def reloading_ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server SSLContext that picks up new certificate files without a restart."""
    return certificate_reloader(cert_file, key_file).ssl_context()
