"""Certificates and keys for the test control plane, made with `cryptography`.

One CA signs the apiserver's serving certificate and the client certificate the apiserver
uses towards the kubelet; a separate RSA key pair signs service-account tokens.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=30)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: object) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )


def make_pki(directory: Path, *, ip_sans: list[str], dns_sans: list[str]) -> dict[str, Path]:
    """Write ca.{crt,key}, apiserver.{crt,key}, kubelet-client.{crt,key}, sa.{key,pub}."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("sidecar-debug-test-ca")
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = {
        "ca.crt": directory / "ca.crt",
        "ca.key": directory / "ca.key",
    }
    _write_cert(paths["ca.crt"], ca_cert)
    _write_key(paths["ca.key"], ca_key)

    def issue(stem: str, subject: x509.Name, usage: x509.ObjectIdentifier,
              sans: list[x509.GeneralName] | None = None) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = _builder(subject, ca_name, key.public_key()).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        paths[f"{stem}.crt"] = directory / f"{stem}.crt"
        paths[f"{stem}.key"] = directory / f"{stem}.key"
        _write_cert(paths[f"{stem}.crt"], cert)
        _write_key(paths[f"{stem}.key"], key)

    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_sans]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_sans]
    issue("apiserver", _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, sans)
    # The apiserver authenticates to the kubelet (exec, logs) with this one.
    issue("kubelet-client", _name("kube-apiserver-kubelet-client", "system:masters"),
          ExtendedKeyUsageOID.CLIENT_AUTH)

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    paths["sa.key"] = directory / "sa.key"
    paths["sa.pub"] = directory / "sa.pub"
    _write_key(paths["sa.key"], sa_key)
    paths["sa.pub"].write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return paths
