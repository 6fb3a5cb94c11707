"""Certificates and keys for the test control plane.

The CA and the apiserver's serving certificate come from the webhook's own generator
(webhook.certs.pki: ECDSA P-256, SANs, key identifiers); only what the webhook never
issues is built here: the client certificate the apiserver presents to the kubelet, and the RSA
key pair that signs service-account tokens.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.certs import pki, tls

_VALIDITY = datetime.timedelta(days=30)


def _client_certificate(ca: pki.KeyPair, common_name: str, organization: str) -> pki.KeyPair:
    """A TLS client certificate; Kubernetes reads the user from CN and a group from O."""
    now = pki.utcnow()
    key = pki.generate_private_key()
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - pki.BACKDATE)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return pki.KeyPair(cert, key)


def make_pki(directory: Path, *, ip_sans: list[str], dns_sans: list[str]) -> dict[str, Path]:
    """Write ca.{crt,key}, apiserver.{crt,key}, kubelet-client.{crt,key}, sa.{key,pub}."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = pki.generate_ca("sidecar-debug-test-ca", validity=_VALIDITY)
    pairs = {
        "ca": ca,
        "apiserver": pki.generate_serving(ca, [*dns_sans, *ip_sans], validity=_VALIDITY),
        # The apiserver authenticates to the kubelet (exec, logs) with this one.
        "kubelet-client": _client_certificate(
            ca, "kube-apiserver-kubelet-client", "system:masters"
        ),
    }
    paths: dict[str, Path] = {}
    for stem, pair in pairs.items():
        paths[f"{stem}.crt"] = directory / f"{stem}.crt"
        paths[f"{stem}.key"] = directory / f"{stem}.key"
        paths[f"{stem}.crt"].write_bytes(pair.cert_pem)
        tls.write_private_file(paths[f"{stem}.key"], pair.key_pem)

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    paths["sa.key"] = directory / "sa.key"
    paths["sa.pub"] = directory / "sa.pub"
    tls.write_private_file(
        paths["sa.key"],
        sa_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    paths["sa.pub"].write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return paths
