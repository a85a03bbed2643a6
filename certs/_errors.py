"""Errors of the certificates module.

    CertificateError              anything this module cannot do on its own
    ├── InvalidBundle             stored PEM data is unreadable or inconsistent
    ├── StoreConflict             the shared Secret kept changing under us; retry later
    ├── InjectionFailed           a webhook configuration could not get its caBundle
    └── ReloadFailed              a certificate/key pair could not be loaded into a TLS context

Cluster errors (``vgpu_guard.kube.errors``) are wrapped with ``raise ... from e`` so the
API server's Status stays in the traceback.
"""

from __future__ import annotations

__all__ = ["CertificateError", "InjectionFailed", "InvalidBundle", "ReloadFailed", "StoreConflict"]


class CertificateError(Exception):
    """Raised when a certificate operation fails; the message says what to check or do."""


class InvalidBundle(CertificateError):
    """Raised when PEM data (in a Secret or on disk) cannot be parsed or does not fit together."""


class StoreConflict(CertificateError):
    """Raised when the certificate Secret changed on every attempt to write it."""


class InjectionFailed(CertificateError):
    """Raised when one or more webhook configurations could not be given the caBundle."""


class ReloadFailed(CertificateError):
    """Raised when a certificate and key cannot be loaded into an ``ssl.SSLContext``."""
