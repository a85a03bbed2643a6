"""Generate a self-signed CA and serving certificates (pure: the clock is an argument).

Why ECDSA P-256 rather than RSA 2048: the only clients are kube-apiserver (Go crypto/tls) and
our own tools, all of which support it; a P-256 key is generated in about a millisecond instead of
tens to hundreds (it matters when every replica may bootstrap at once, and in tests); and its
strength (~128 bit) is above RSA 2048 (~112 bit). Kyverno and cert-controller use RSA 2048 for
compatibility with older clients we do not have.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from vgpu_guard.certs._bundle import KeyPair
from vgpu_guard.certs._errors import CertificateError

__all__ = ["ServingSpec", "generate_ca", "issue_serving_certificate"]

_ORGANIZATION = "vgpu-guard"


@dataclass(frozen=True, slots=True)
class ServingSpec:
    """Who the serving certificate is for: the webhook Service plus optional extra names."""

    service: str
    namespace: str
    cluster_domain: str = "cluster.local"
    extra_dns: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.service or not self.namespace:
            raise CertificateError(
                f"service ({self.service!r}) and namespace ({self.namespace!r}) must both be set; "
                "they name the certificate <service>.<namespace>.svc the API server connects to"
            )
        for ip in self.ip_addresses:
            try:
                ipaddress.ip_address(ip)
            except ValueError as e:
                raise CertificateError(f"{ip!r} is not an IP address; pass DNS names with --dns") from e

    @property
    def common_name(self) -> str:
        return f"{self.service}.{self.namespace}.svc"

    def dns_names(self) -> list[str]:
        """The DNS SANs, most specific last; kube-apiserver dials ``<service>.<namespace>.svc``."""
        names = [
            self.service,
            f"{self.service}.{self.namespace}",
            self.common_name,
            f"{self.common_name}.{self.cluster_domain}",
            *self.extra_dns,
        ]
        return list(dict.fromkeys(names))

    def ips(self) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        return [ipaddress.ip_address(ip) for ip in dict.fromkeys(self.ip_addresses)]


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _require_aware(now: datetime) -> None:
    if now.tzinfo is None:
        raise CertificateError("`now` must be timezone-aware (UTC); pass datetime.now(UTC)")


def generate_ca(*, now: datetime, validity: timedelta, backdate: timedelta = timedelta(hours=1)) -> KeyPair:
    """A self-signed CA that may only sign leaf certificates (pathlen 0).

    The common name carries the creation time (like kube's ``name@timestamp`` self-signed certs)
    so that old and new CAs side by side in a caBundle have distinct subjects.
    """
    _require_aware(now)
    key = _new_key()
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, _ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, f"vgpu-guard-ca@{int(now.timestamp())}"),
        ]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - backdate)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


# A serving certificate's key usage: ECDSA keys sign the handshake; keyEncipherment only makes sense
# for RSA key transport.
_SERVING_KEY_USAGE = x509.KeyUsage(
    digital_signature=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=False,
    crl_sign=False,
    encipher_only=False,
    decipher_only=False,
)


def _usable_ca(ca: KeyPair, now: datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """``ca``'s certificate and key, if it can sign now: an ECDSA key, valid at ``now``. Each refusal
    says what to do, since a CA that cannot sign stops every renewal."""
    _require_aware(now)
    ca_cert = ca.certificate
    ca_key = ca.private_key
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise CertificateError(
            f"the CA key is {type(ca_key).__name__}; this module signs with ECDSA P-256 CAs only"
        )
    if ca_cert.not_valid_after_utc <= now:
        raise CertificateError(
            f"the CA expired at {ca_cert.not_valid_after_utc.isoformat()}; generate a new CA first"
        )
    if ca_cert.not_valid_before_utc > now:
        raise CertificateError(
            f"the CA is valid only from {ca_cert.not_valid_before_utc.isoformat()}, after now "
            f"({now.isoformat()}); did this node's clock jump backwards? Check NTP, then retry"
        )
    return ca_cert, ca_key


def issue_serving_certificate(
    ca: KeyPair,
    spec: ServingSpec,
    *,
    now: datetime,
    validity: timedelta,
    backdate: timedelta = timedelta(hours=1),
) -> KeyPair:
    """A TLS server certificate for ``spec``, signed by ``ca``.

    notAfter is clamped to the CA's notAfter: a leaf outliving its issuer would fail verification
    anyway, and the clamp lets the renewal window see the real deadline.
    """
    ca_cert, ca_key = _usable_ca(ca, now)
    key = _new_key()
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in spec.dns_names()]
    sans += [x509.IPAddress(ip) for ip in spec.ips()]
    not_after = min(now + validity, ca_cert.not_valid_after_utc.astimezone(UTC))
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, _ORGANIZATION),
                    x509.NameAttribute(NameOID.COMMON_NAME, spec.common_name),
                ]
            )
        )
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(max(now - backdate, ca_cert.not_valid_before_utc))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_SERVING_KEY_USAGE, critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))
