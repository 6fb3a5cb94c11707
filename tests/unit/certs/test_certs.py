"""Certificate generation, inspection, verification, expiry maths and rotation decisions."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from webhook.certs import pki, rotation

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
NAMES = pki.service_dns_names("sidecar-debug", "tools", "cluster.local")


@pytest.fixture(scope="module")
def ca() -> pki.KeyPair:
    return pki.generate_ca(now=NOW)


@pytest.fixture(scope="module")
def serving(ca: pki.KeyPair) -> pki.KeyPair:
    return pki.generate_serving(ca, NAMES, dt.timedelta(days=90), now=NOW)


def test_service_dns_names_cover_every_form_a_client_uses() -> None:
    assert pki.service_dns_names("svc", "ns", "example.org.") == [
        "svc", "svc.ns", "svc.ns.svc", "svc.ns.svc.example.org",
    ]  # fmt: skip
    assert pki.service_dns_names("svc", "ns", "") == ["svc", "svc.ns", "svc.ns.svc"]


def test_serving_certificate_sans(serving: pki.KeyPair) -> None:
    assert pki.subject_alt_names(serving.cert) == [
        "sidecar-debug",
        "sidecar-debug.tools",
        "sidecar-debug.tools.svc",
        "sidecar-debug.tools.svc.cluster.local",
    ]


def test_ip_sans_are_ip_addresses(ca: pki.KeyPair) -> None:
    pair = pki.generate_serving(ca, ["localhost", "127.0.0.1", "::1"], now=NOW)
    san = pair.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    pki.verify_chain(pair.cert, [ca.cert], "127.0.0.1", now=NOW)


def test_ca_extensions(ca: pki.KeyPair) -> None:
    ext = ca.cert.extensions
    bc = ext.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca and bc.value.path_length == 0
    ku = ext.get_extension_for_class(x509.KeyUsage)
    assert ku.critical and ku.value.key_cert_sign and ku.value.crl_sign
    assert ca.cert.issuer == ca.cert.subject
    assert isinstance(ca.key, ec.EllipticCurvePrivateKey) and ca.key.curve.name == "secp256r1"


def test_serving_extensions(serving: pki.KeyPair, ca: pki.KeyPair) -> None:
    ext = serving.cert.extensions
    assert ext.get_extension_for_class(x509.BasicConstraints).value.ca is False
    ku = ext.get_extension_for_class(x509.KeyUsage)
    assert ku.critical and ku.value.digital_signature
    assert not ku.value.key_cert_sign and not ku.value.key_encipherment  # EC: no key transport
    eku = ext.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    aki = ext.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert aki.key_identifier == ski.digest
    assert serving.cert.issuer == ca.cert.subject
    assert pki.key_matches(serving.cert, serving.key)
    assert not pki.key_matches(serving.cert, ca.key)


def test_validity_is_backdated_and_capped_by_the_ca(ca: pki.KeyPair) -> None:
    pair = pki.generate_serving(ca, NAMES, dt.timedelta(days=90), now=NOW)
    assert pair.cert.not_valid_before_utc == NOW - pki.BACKDATE
    assert pair.cert.not_valid_after_utc == NOW + dt.timedelta(days=90)
    assert pki.issued_at(pair.cert) == NOW
    long = pki.generate_serving(ca, NAMES, dt.timedelta(days=100000), now=NOW)
    assert long.cert.not_valid_after_utc == ca.cert.not_valid_after_utc


def test_chain_verifies_for_every_san(serving: pki.KeyPair, ca: pki.KeyPair) -> None:
    for name in NAMES:
        pki.verify_chain(serving.cert, [ca.cert], name, now=NOW)


def test_chain_rejects_wrong_name_other_ca_and_expiry(
    serving: pki.KeyPair, ca: pki.KeyPair
) -> None:
    with pytest.raises(pki.CertificateError, match="subjectAltName"):
        pki.verify_chain(serving.cert, [ca.cert], "evil.tools.svc", now=NOW)
    other = pki.generate_ca(now=NOW)
    with pytest.raises(pki.CertificateError):
        pki.verify_chain(serving.cert, [other.cert], now=NOW)
    # A bundle holding the old and a new CA still verifies (the CA roll overlap).
    pki.verify_chain(serving.cert, [other.cert, ca.cert], now=NOW)
    with pytest.raises(pki.CertificateError):
        pki.verify_chain(serving.cert, [ca.cert], now=NOW + dt.timedelta(days=91))
    assert pki.issued_by(serving.cert, ca.cert)
    assert not pki.issued_by(serving.cert, other.cert)


def test_expiry_maths(serving: pki.KeyPair) -> None:
    cert = serving.cert
    assert pki.lifetime(cert) == dt.timedelta(days=90) + pki.BACKDATE
    assert pki.days_left(cert, NOW) == pytest.approx(90)
    assert pki.days_left(cert, NOW + dt.timedelta(days=100)) == pytest.approx(-10)
    renew = pki.renewal_time(cert)
    assert renew == cert.not_valid_before_utc + (dt.timedelta(days=90) + pki.BACKDATE) * 2 / 3
    assert not pki.needs_renewal(cert, renew - dt.timedelta(seconds=1))
    assert pki.needs_renewal(cert, renew)
    assert pki.needs_renewal(cert, NOW + dt.timedelta(days=31), fraction=1 / 3)
    assert not pki.is_expired(cert, NOW)
    assert pki.is_expired(cert, NOW - dt.timedelta(hours=1))  # before not-before
    assert pki.is_expired(cert, cert.not_valid_after_utc)


def test_describe(serving: pki.KeyPair) -> None:
    info = pki.describe(serving.cert, NOW)
    assert info["subject"] == "CN=sidecar-debug"
    assert info["issuer"].endswith(f"CN={pki.CA_COMMON_NAME}@{int(NOW.timestamp())}")
    assert info["keyType"] == "ECDSA secp256r1"
    assert info["daysLeft"] == 90.0 and info["isCA"] is False
    assert info["sans"] == NAMES


def test_rsa_keys_are_accepted_when_loading() -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(65537, 2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    assert pki.key_description(pki.load_private_key(pem)) == "RSA 2048"
    with pytest.raises(pki.CertificateError):
        pki.load_private_key(b"not a key")
    with pytest.raises(pki.CertificateError):
        pki.load_certificates(b"")


# ---- rotation decisions (pure)

POLICY = rotation.RotationPolicy(
    ca_validity=dt.timedelta(days=3650),
    serving_validity=dt.timedelta(days=90),
    ca_overlap=dt.timedelta(hours=1),
)


def _fresh() -> rotation.TLSState:
    state, reasons = rotation.plan_rotation(None, NAMES, POLICY, NOW)
    assert reasons == ["created CA and serving certificate"]
    return state


def test_plan_creates_then_is_stable_and_round_trips_through_secret_data() -> None:
    state = _fresh()
    assert state.bundle == (state.signer.cert,)
    parsed = rotation.TLSState.from_secret_data(state.to_secret_data())
    assert parsed == state
    same, reasons = rotation.plan_rotation(parsed, NAMES, POLICY, NOW + dt.timedelta(days=59))
    assert reasons == [] and same == parsed


def test_plan_renews_serving_at_two_thirds_keeping_the_ca() -> None:
    state = _fresh()
    later = pki.renewal_time(state.serving.cert)
    new, reasons = rotation.plan_rotation(state, NAMES, POLICY, later)
    assert reasons == ["serving certificate due for renewal"]
    assert new.signer == state.signer and new.bundle == state.bundle
    assert new.serving.cert != state.serving.cert
    pki.verify_chain(new.serving.cert, list(new.bundle), now=later)


def test_plan_forced_and_name_change() -> None:
    state = _fresh()
    _, reasons = rotation.plan_rotation(state, NAMES, POLICY, NOW, force_serving=True)
    assert reasons == ["forced serving certificate renewal"]
    renamed, reasons = rotation.plan_rotation(state, [*NAMES, "127.0.0.1"], POLICY, NOW)
    assert reasons == ["serving certificate names changed"]
    assert "127.0.0.1" in pki.subject_alt_names(renamed.serving.cert)


RESULTS_NAMES = ["sd-results", "sd-results.sidecar-debug.svc"]


def test_the_results_service_pair_comes_from_the_same_ca_and_follows_it() -> None:
    """Issue 19: the webhook issues the results service's serving pair into its Secret
    (results.crt/results.key); renewed like its own, replaced when the CA is, and dropped
    when no longer wanted."""
    state = _fresh()
    added, reasons = rotation.plan_rotation(state, NAMES, POLICY, NOW,
                                            results_names=RESULTS_NAMES)
    assert reasons == ["results service certificate missing"]
    assert added.results is not None and added.serving == state.serving
    assert sorted(pki.subject_alt_names(added.results.cert)) == sorted(RESULTS_NAMES)
    pki.verify_chain(added.results.cert, list(added.bundle), now=NOW)
    data = added.to_secret_data()
    assert {"results.crt", "results.key"} <= set(data)
    assert rotation.TLSState.from_secret_data(data) == added
    stable, reasons = rotation.plan_rotation(added, NAMES, POLICY, NOW + dt.timedelta(days=1),
                                             results_names=RESULTS_NAMES)
    assert reasons == [] and stable == added
    due = pki.renewal_time(added.results.cert)
    renewed, reasons = rotation.plan_rotation(added, NAMES, POLICY, due,
                                              results_names=RESULTS_NAMES)
    assert "results service certificate due for renewal" in reasons
    assert renewed.results is not None and renewed.results.cert != added.results.cert
    dropped, reasons = rotation.plan_rotation(added, NAMES, POLICY, NOW)
    assert reasons == ["results service certificate no longer wanted"]
    assert dropped.results is None and "results.crt" not in dropped.to_secret_data()


def test_ca_roll_keeps_every_step_verifying() -> None:
    """Introduce -> (overlap) -> promote -> (overlap) -> prune; at each step every certificate
    a replica may still serve verifies against the bundle the apiserver may still hold."""
    state = _fresh()
    old_ca, old_serving = state.signer, state.serving
    t1 = pki.renewal_time(old_ca.cert)  # 2/3 of ten years
    # The serving certificate would also be due by then; renew it first as the loop would have.
    state = rotation.plan_rotation(state, NAMES, POLICY, t1 - dt.timedelta(days=1))[0]

    step1, reasons = rotation.plan_rotation(state, NAMES, POLICY, t1)
    assert reasons == ["introduced next CA into the bundle"]
    assert step1.next_ca is not None and step1.signer == old_ca
    assert step1.bundle == (old_ca.cert, step1.next_ca.cert)
    assert step1.serving == state.serving
    assert rotation.TLSState.from_secret_data(step1.to_secret_data()) == step1

    # Not yet: the overlap has not passed.
    waiting, reasons = rotation.plan_rotation(step1, NAMES, POLICY, t1 + dt.timedelta(minutes=30))
    assert reasons == [] and waiting == step1
    # Not yet: the overlap passed but a webhook configuration does not carry the new CA.
    t2 = t1 + dt.timedelta(hours=1, minutes=1)
    _, reasons = rotation.plan_rotation(step1, NAMES, POLICY, t2, next_ca_published=False)
    assert reasons == []

    step2, reasons = rotation.plan_rotation(step1, NAMES, POLICY, t2)
    assert reasons == [
        "promoted next CA to signer",
        "serving certificate not signed by the signing CA",
    ]
    assert step2.signer == step1.next_ca and step2.next_ca is None
    assert step2.bundle == (step1.next_ca.cert, old_ca.cert)
    # A client with the step-1 bundle trusts the new serving cert; the step-2 bundle trusts
    # the old serving cert a slow replica still serves.
    pki.verify_chain(step2.serving.cert, list(step1.bundle), now=t2)
    pki.verify_chain(state.serving.cert, list(step2.bundle), now=t2)
    assert old_serving != state.serving

    # Still within the overlap after promotion: the old CA stays.
    _, reasons = rotation.plan_rotation(step2, NAMES, POLICY, t2 + dt.timedelta(minutes=59))
    assert reasons == []
    step3, reasons = rotation.plan_rotation(step2, NAMES, POLICY, t2 + dt.timedelta(hours=2))
    assert reasons == ["pruned retired CA from the bundle"]
    assert step3.bundle == (step2.signer.cert,)


def test_forced_ca_roll_and_expired_ca() -> None:
    state = _fresh()
    rolled, reasons = rotation.plan_rotation(state, NAMES, POLICY, NOW, force_ca=True)
    assert reasons == ["introduced next CA into the bundle"]
    again, reasons = rotation.plan_rotation(rolled, NAMES, POLICY, NOW, force_ca=True)
    assert reasons == [] and again == rolled  # one roll at a time
    dead, reasons = rotation.plan_rotation(state, NAMES, POLICY, NOW + dt.timedelta(days=4000))
    assert reasons == ["CA expired: replaced"] and dead.signer != state.signer


def test_secret_data_errors() -> None:
    state = _fresh()
    data = state.to_secret_data()
    with pytest.raises(pki.CertificateError, match="lacks ca.key"):
        rotation.TLSState.from_secret_data({k: v for k, v in data.items() if k != "ca.key"})
    swapped = dict(data, **{"tls.key": data["ca.key"]})
    with pytest.raises(pki.CertificateError, match="does not belong"):
        rotation.TLSState.from_secret_data(swapped)
    with pytest.raises(pki.CertificateError, match="not base64"):
        rotation.TLSState.from_secret_data(dict(data, **{"ca.crt": "!!"}))
    other = pki.generate_ca(now=NOW)
    with pytest.raises(pki.CertificateError, match="matches ca.key"):
        rotation.TLSState.from_secret_data(
            dict(data, **{"ca.key": rotation.TLSState(other, state.serving, (other.cert,))
                          .to_secret_data()["ca.key"], "ca.crt": data["ca.crt"]})
        )
