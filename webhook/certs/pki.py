"""Keys and certificates, made and inspected with `cryptography` (pure functions).

Key type: ECDSA P-256. Generation takes well under a millisecond (RSA 2048 takes ~50 ms and
more on a busy 2-core machine, paid by every replica start and every test), handshakes are
cheaper, and every TLS client that calls a webhook (Go's crypto/tls in the apiserver since
Kubernetes 1.0, curl, Python) supports it. RSA keys are still accepted when loading
(`provided` mode, `inspect`)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.wire import constants

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


# Certificates are dated this far into the past so that a node whose clock runs a little behind
# ours does not reject a certificate that was issued a moment ago.
BACKDATE = dt.timedelta(minutes=5)


# Data keys of the TLS Secret, and the file names of the same PEMs on disk.
KEY_TLS_CRT, KEY_TLS_KEY, KEY_CA_CRT, KEY_CA_KEY = "tls.crt", "tls.key", "ca.crt", "ca.key"
KEY_CA_NEXT_KEY = "ca-next.key"
# The results service's serving pair, issued by the same CA (settings.results_service_name).
KEY_RESULTS_CRT, KEY_RESULTS_KEY = "results.crt", "results.key"

CA_COMMON_NAME = constants.CA_COMMON_NAME


DEFAULT_CA_VALIDITY = dt.timedelta(days=3650)


DEFAULT_SERVING_VALIDITY = dt.timedelta(days=90)


DEFAULT_RENEW_FRACTION = 2 / 3


class CertificateError(RuntimeError):
    """Certificate material is missing, unreadable or does not fit together."""


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


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


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def dns_label(name: str) -> bool:
    """A DNS-1123 label, as Kubernetes names Services and namespaces."""
    return isinstance(name, str) and _DNS_LABEL.fullmatch(name) is not None


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def is_dns_name(name: str) -> bool:
    """A DNS-1123 subdomain (dot-separated labels, 253 characters at most)."""
    return len(name) <= 253 and all(_DNS_LABEL.fullmatch(label) for label in name.split("."))


def check_name(name: str) -> str:
    """`name` when a certificate may carry it as a subjectAltName: an IP address, or a DNS name
    as Kubernetes spells names (RFC 1123: lower-case letters, digits and '-', labels of 1 to
    63 characters that start and end with a letter or digit, 253 characters in all), with
    an optional leading `*.` wildcard. Else CertificateError saying what is allowed."""
    if is_ip(name) or is_dns_name(name.removeprefix("*.")):
        return name
    raise CertificateError(
        f"{name[:100]!r} is neither a DNS name nor an IP address: a DNS name (RFC 1123) is "
        "lower-case letters, digits, '-' and '.', each dot-separated label 1 to 63 characters "
        "that start and end with a letter or digit (e.g. webhook.default.svc)")


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
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, constants.PRODUCT),
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
    key: PrivateKey | None = None,
) -> KeyPair:
    """A TLS server certificate for `names` (DNS names or IP addresses, checked by
    check_name), signed by `ca`, for `key` (default: a new ECDSA P-256 key).

    The first name is also the subject CN for humans; clients match the SANs only (Go ignores
    the CN since 1.15)."""
    if not names:
        raise CertificateError("a serving certificate needs at least one name")
    for name in names:
        check_name(name)
    now = now or utcnow()
    key = key or generate_private_key()
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
