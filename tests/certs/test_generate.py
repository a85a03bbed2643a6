"""Generation: CA and serving certificate contents, parsed back with cryptography."""

from __future__ import annotations

import ipaddress
from datetime import datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import VerificationError

from tests.certs.certs_testkit import T0, verify_like_apiserver
from vgpu_guard.certs import (
    DEFAULT_POLICY,
    CertificateError,
    InvalidBundle,
    KeyPair,
    ServingSpec,
    generate_ca,
    issue_serving_certificate,
)


def _pair(spec: ServingSpec, now: datetime = T0) -> tuple[KeyPair, KeyPair]:
    ca = generate_ca(now=now, validity=DEFAULT_POLICY.ca_validity)
    return ca, issue_serving_certificate(ca, spec, now=now, validity=DEFAULT_POLICY.serving_validity)


def test_ca_is_a_self_signed_p256_ca_limited_to_signing_leaves() -> None:
    ca = generate_ca(now=T0, validity=timedelta(days=3650))
    cert = ca.certificate
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert cert.public_key().curve.name == "secp256r1"  # type: ignore[union-attr]
    bc = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca and bc.value.path_length == 0
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert ku.critical and ku.value.key_cert_sign and ku.value.crl_sign
    assert cert.issuer == cert.subject
    cert.verify_directly_issued_by(cert)
    assert cert.not_valid_before_utc == T0 - timedelta(hours=1)
    assert cert.not_valid_after_utc == T0 + timedelta(days=3650)
    ca.check()


def test_serving_certificate_names_the_service_in_every_form(spec: ServingSpec) -> None:
    _, serving = _pair(spec)
    cert = serving.certificate
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "vgpu-guard-webhook",
        "vgpu-guard-webhook.vgpu-system",
        "vgpu-guard-webhook.vgpu-system.svc",
        "vgpu-guard-webhook.vgpu-system.svc.cluster.local",
    ]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    cn = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value
    assert cn == "vgpu-guard-webhook.vgpu-system.svc"


def test_serving_certificate_is_a_tls_server_leaf(spec: ServingSpec) -> None:
    ca, serving = _pair(spec)
    cert = serving.certificate
    bc = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and not bc.value.ca
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert ku.digital_signature and not ku.key_cert_sign and not ku.key_encipherment
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    cert.verify_directly_issued_by(ca.certificate)
    assert cert.not_valid_after_utc == T0 + timedelta(days=365)
    serving.check()


@pytest.mark.parametrize(
    "host",
    [
        "vgpu-guard-webhook.vgpu-system.svc",
        "vgpu-guard-webhook.vgpu-system.svc.cluster.local",
        "vgpu-guard-webhook.vgpu-system",
        "127.0.0.1",
    ],
)
def test_a_strict_verifier_accepts_the_chain_for_each_name(spec: ServingSpec, host: str) -> None:
    ca, serving = _pair(spec)
    verify_like_apiserver(serving.cert_pem, ca.cert_pem, host=host, now=T0 + timedelta(days=1))


@pytest.mark.parametrize("host", ["other.vgpu-system.svc", "10.0.0.1"])
def test_the_verifier_rejects_names_not_in_the_certificate(spec: ServingSpec, host: str) -> None:
    ca, serving = _pair(spec)
    with pytest.raises(VerificationError):
        verify_like_apiserver(serving.cert_pem, ca.cert_pem, host=host, now=T0 + timedelta(days=1))


def test_extra_names_custom_domain_and_ipv6() -> None:
    spec = ServingSpec(
        service="wh",
        namespace="ns",
        cluster_domain="corp.internal",
        extra_dns=("wh.example.com", "wh"),  # duplicates collapse
        ip_addresses=("::1", "10.1.2.3"),
    )
    _, serving = _pair(spec)
    san = serving.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "wh",
        "wh.ns",
        "wh.ns.svc",
        "wh.ns.svc.corp.internal",
        "wh.example.com",
    ]
    assert set(san.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("::1"),
        ipaddress.ip_address("10.1.2.3"),
    }


def test_serving_validity_is_clamped_to_the_ca(spec: ServingSpec) -> None:
    ca = generate_ca(now=T0, validity=timedelta(days=30))
    serving = issue_serving_certificate(ca, spec, now=T0, validity=timedelta(days=365))
    assert serving.not_after == ca.not_after


def test_each_ca_has_a_distinct_subject_so_bundles_can_hold_two() -> None:
    a = generate_ca(now=T0, validity=timedelta(days=10))
    b = generate_ca(now=T0 + timedelta(seconds=1), validity=timedelta(days=10))
    assert a.certificate.subject != b.certificate.subject
    assert a.serial != b.serial


def test_naive_datetimes_and_bad_inputs_are_refused(spec: ServingSpec) -> None:
    with pytest.raises(CertificateError, match="timezone-aware"):
        generate_ca(now=datetime(2030, 1, 1), validity=timedelta(days=1))
    with pytest.raises(CertificateError, match="not an IP address"):
        ServingSpec(service="a", namespace="b", ip_addresses=("localhost",))
    with pytest.raises(CertificateError, match="must both be set"):
        ServingSpec(service="a", namespace="")
    expired = generate_ca(now=T0, validity=timedelta(days=1))
    with pytest.raises(CertificateError, match="CA expired"):
        issue_serving_certificate(expired, spec, now=T0 + timedelta(days=2), validity=timedelta(days=1))
    future = generate_ca(now=T0 + timedelta(days=2), validity=timedelta(days=10))
    with pytest.raises(CertificateError, match="clock jump backwards"):
        issue_serving_certificate(future, spec, now=T0, validity=timedelta(days=1))


def test_a_key_from_another_pair_is_detected(spec: ServingSpec) -> None:
    ca, serving = _pair(spec)
    with pytest.raises(InvalidBundle, match="does not belong"):
        KeyPair(serving.cert_pem, ca.key_pem).check()
