"""Serving certificates: self-signed CA, renewal, hot reload, caBundle injection.

Who calls what:

- webhook server: ``ReloadableSSLContext`` → ``TCPSite(ssl_context=ctx.ssl_context)``; in a
  ``cleanup_ctx`` run ``run_certificate_manager`` (built-in CA) or ``run_file_reloader``
  (cert-manager mode); readiness waits for ``ctx.loaded``.
- controller / leader: ``run_certificate_manager(..., context=None, is_leader=elector.is_leader)``,
  or call ``inject_ca_bundle`` directly.
- offline: ``generate_ca`` + ``issue_serving_certificate`` (``vgpu-guard certs generate``).

Errors are ``CertificateError`` and subclasses (see ``_errors``); cluster I/O goes through
``vgpu_guard.kube.ClusterClient`` only.
"""

from vgpu_guard.certs._bundle import CertificateBundle, KeyPair
from vgpu_guard.certs._errors import (
    CertificateError,
    InjectionFailed,
    InvalidBundle,
    ReloadFailed,
    StoreConflict,
)
from vgpu_guard.certs._files import CertificateFiles, FileWatcher, write_bundle_files
from vgpu_guard.certs._generate import ServingSpec, generate_ca, issue_serving_certificate
from vgpu_guard.certs._inject import inject_ca_bundle
from vgpu_guard.certs._manager import (
    CertificateManager,
    CertificateManagerConfig,
    run_certificate_manager,
    run_file_reloader,
)
from vgpu_guard.certs._metrics import CERTIFICATE_EXPIRY
from vgpu_guard.certs._policy import DEFAULT_POLICY, Clock, RenewalPolicy, Sleep
from vgpu_guard.certs._reload import ReloadableSSLContext
from vgpu_guard.certs._renewal import Rotation, needs_renewal, plan_rotation
from vgpu_guard.certs._store import (
    ACK_ANNOTATION,
    SecretCertificateStore,
    bundle_from_secret_data,
    bundle_to_secret_data,
)

__all__ = [
    "ACK_ANNOTATION",
    "CERTIFICATE_EXPIRY",
    "DEFAULT_POLICY",
    "CertificateBundle",
    "CertificateError",
    "CertificateFiles",
    "CertificateManager",
    "CertificateManagerConfig",
    "Clock",
    "FileWatcher",
    "InjectionFailed",
    "InvalidBundle",
    "KeyPair",
    "ReloadFailed",
    "ReloadableSSLContext",
    "RenewalPolicy",
    "Rotation",
    "SecretCertificateStore",
    "ServingSpec",
    "Sleep",
    "StoreConflict",
    "bundle_from_secret_data",
    "bundle_to_secret_data",
    "generate_ca",
    "inject_ca_bundle",
    "issue_serving_certificate",
    "needs_renewal",
    "plan_rotation",
    "run_certificate_manager",
    "run_file_reloader",
    "write_bundle_files",
]
