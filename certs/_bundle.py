"""PEM key pairs and the bundle one Secret holds: CA, serving pair, rollover CAs.

Everything stays as PEM bytes (what the Secret, the files and ``ssl`` all speak); parsing happens
on demand so a bundle can be compared, stored and hashed without the cryptography objects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from vgpu_guard.certs._errors import InvalidBundle

__all__ = ["CertificateBundle", "KeyPair", "parse_certificates", "split_pem"]

_BEGIN = b"-----BEGIN CERTIFICATE-----"
_END = b"-----END CERTIFICATE-----"


def split_pem(data: bytes) -> list[bytes]:
    """Split concatenated PEM certificates into normalised blocks, each ending in a newline."""
    blocks: list[bytes] = []
    rest = data
    while (start := rest.find(_BEGIN)) != -1:
        end = rest.find(_END, start)
        if end == -1:
            raise InvalidBundle("a PEM certificate block has no END line; the data is truncated")
        blocks.append(rest[start : end + len(_END)] + b"\n")
        rest = rest[end + len(_END) :]
    return blocks


def parse_certificates(data: bytes) -> list[x509.Certificate]:
    """Parse every certificate in a PEM bundle (raises ``InvalidBundle`` on garbage)."""
    try:
        return x509.load_pem_x509_certificates(data) if data.strip() else []
    except ValueError as e:
        raise InvalidBundle(f"cannot parse PEM certificates: {e}") from e


@dataclass(frozen=True, slots=True)
class KeyPair:
    """One certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        certs = parse_certificates(self.cert_pem)
        if not certs:
            raise InvalidBundle("the certificate PEM is empty")
        return certs[0]

    @property
    def private_key(self) -> PrivateKeyTypes:
        try:
            return serialization.load_pem_private_key(self.key_pem, password=None)
        except (ValueError, TypeError) as e:
            raise InvalidBundle(
                f"cannot parse the PEM private key (unencrypted PKCS#8/SEC1 expected): {e}"
            ) from e

    @property
    def not_after(self) -> datetime:
        return self.certificate.not_valid_after_utc

    @property
    def serial(self) -> int:
        return self.certificate.serial_number

    def check(self) -> KeyPair:
        """Fail with ``InvalidBundle`` unless the key belongs to the certificate; returns self."""
        public = self.certificate.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        private = self.private_key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        if public != private:
            raise InvalidBundle(
                f"the private key does not belong to certificate serial {self.serial:x}; "
                "the Secret or files were written half-way or mixed up"
            )
        return self


@dataclass(frozen=True, slots=True)
class CertificateBundle:
    """What the shared Secret holds.

    ``next_ca`` is a CA staged for rollover: already trusted (it is in the caBundle) but not yet
    signing, until the leader confirms every webhook configuration carries it. ``previous_cas`` are
    retired CAs kept in the caBundle until they expire, because replicas that have not re-read the
    Secret still serve certificates they signed.
    """

    ca: KeyPair
    serving: KeyPair
    previous_cas: tuple[bytes, ...] = ()
    next_ca: KeyPair | None = field(default=None)

    def trusted_ca_pems(self) -> list[bytes]:
        """The CA certificates to trust, current first, without duplicates."""
        seen: set[bytes] = set()
        out: list[bytes] = []
        candidates: Iterable[bytes] = [
            *split_pem(self.ca.cert_pem),
            *(split_pem(self.next_ca.cert_pem) if self.next_ca else []),
            *(block for pem in self.previous_cas for block in split_pem(pem)),
        ]
        for block in candidates:
            if block not in seen:
                seen.add(block)
                out.append(block)
        return out

    def ca_bundle_pem(self) -> bytes:
        """The PEM to put into each webhook's ``clientConfig.caBundle`` (base64-encoded there)."""
        return b"".join(self.trusted_ca_pems())

    def ca_bundle_digest(self) -> str:
        """SHA-256 of the set of trusted CAs, independent of order.

        Order-independent so that promoting the staged CA (which only reorders the set) does not
        look like a new bundle that must be injected and acknowledged again.
        """
        digest = hashlib.sha256()
        for block in sorted(self.trusted_ca_pems()):
            digest.update(block)
        return digest.hexdigest()
