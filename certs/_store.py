"""The certificate bundle in one Secret, shared by every replica.

Why one Secret and optimistic concurrency instead of a lock: replicas that race all compute a
bundle, but only one CREATE or resourceVersion-guarded UPDATE wins; the losers get 409, re-read
and adopt the winner's bundle, so every replica converges on one certificate without a lease.

Secret layout (keys as cert-manager and cert-controller name them, plus rollover keys):

    ca.crt / ca.key            the CA that signs serving certificates
    tls.crt / tls.key          the serving certificate and key
    ca-next.crt / ca-next.key  a CA staged for rollover (trusted, not yet signing)
    ca-previous.crt            retired CAs still trusted until they expire
    annotation vgpu-guard.io/ca-bundle-injected-sha256
                               digest of the caBundle the leader last injected everywhere

RBAC (namespace-scoped Role): secrets get, update with ``resourceNames: [<secret>]``; plus create
without resourceNames (Kubernetes cannot authorise CREATE by name) unless the chart pre-creates the
Secret empty, which this store accepts and fills.
"""

from __future__ import annotations

import base64
import copy
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from vgpu_guard.certs._bundle import CertificateBundle, KeyPair, split_pem
from vgpu_guard.certs._errors import InvalidBundle, StoreConflict
from vgpu_guard.certs._generate import ServingSpec
from vgpu_guard.certs._policy import DEFAULT_POLICY, RenewalPolicy
from vgpu_guard.certs._renewal import Rotation, plan_rotation
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import AlreadyExists, Conflict, NotFound
from vgpu_guard.kube.resources import SECRETS

__all__ = ["ACK_ANNOTATION", "SecretCertificateStore", "bundle_from_secret_data", "bundle_to_secret_data"]

logger = logging.getLogger("vgpu_guard.certs")

ACK_ANNOTATION = "vgpu-guard.io/ca-bundle-injected-sha256"
_MANAGED_BY = {"app.kubernetes.io/managed-by": "vgpu-guard"}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def bundle_to_secret_data(bundle: CertificateBundle) -> dict[str, str]:
    """The Secret's ``data`` map (base64 values, as the API serves them)."""
    data = {
        "ca.crt": _b64(bundle.ca.cert_pem),
        "ca.key": _b64(bundle.ca.key_pem),
        "tls.crt": _b64(bundle.serving.cert_pem),
        "tls.key": _b64(bundle.serving.key_pem),
    }
    if bundle.previous_cas:
        data["ca-previous.crt"] = _b64(b"".join(bundle.previous_cas))
    if bundle.next_ca is not None:
        data["ca-next.crt"] = _b64(bundle.next_ca.cert_pem)
        data["ca-next.key"] = _b64(bundle.next_ca.key_pem)
    return data


def bundle_from_secret_data(data: Mapping[str, str] | None) -> CertificateBundle | None:
    """Parse a Secret's ``data``; ``None`` when it holds no bundle yet (e.g. pre-created empty)."""
    if not data or not all(k in data for k in ("ca.crt", "ca.key", "tls.crt", "tls.key")):
        return None
    try:
        raw = {k: base64.b64decode(v, validate=True) for k, v in data.items()}
    except ValueError as e:
        raise InvalidBundle(f"the certificate Secret holds a value that is not base64: {e}") from e
    next_ca = None
    if "ca-next.crt" in raw and "ca-next.key" in raw:
        next_ca = KeyPair(raw["ca-next.crt"], raw["ca-next.key"]).check()
    return CertificateBundle(
        ca=KeyPair(raw["ca.crt"], raw["ca.key"]).check(),
        serving=KeyPair(raw["tls.crt"], raw["tls.key"]).check(),
        previous_cas=tuple(split_pem(raw.get("ca-previous.crt", b""))),
        next_ca=next_ca,
    )


class SecretCertificateStore:
    """Read, renew and write the bundle in ``<namespace>/<name>``; see the module docstring."""

    def __init__(
        self,
        client: ClusterClient,
        *,
        namespace: str,
        name: str,
        spec: ServingSpec,
        policy: RenewalPolicy = DEFAULT_POLICY,
        max_attempts: int = 5,
    ) -> None:
        self._client = client
        self.namespace = namespace
        self.name = name
        self._spec = spec
        self._policy = policy
        self._max_attempts = max_attempts

    async def _read(self) -> dict[str, Any] | None:
        try:
            return await self._client.get(SECRETS, self.name, namespace=self.namespace)
        except NotFound:
            return None

    def _decode(self, secret: Mapping[str, Any] | None) -> CertificateBundle | None:
        if secret is None:
            return None
        try:
            return bundle_from_secret_data(secret.get("data"))
        except InvalidBundle as e:
            # Our own Secret: regenerating is the only way forward, and the caBundle follows.
            logger.warning(
                "certificate Secret unreadable, regenerating",
                extra={
                    "fields": {
                        "event": "secret_invalid",
                        "secret": f"{self.namespace}/{self.name}",
                        "error": str(e),
                    }
                },
            )
            return None

    async def reconcile(self, now: datetime) -> tuple[CertificateBundle, str | None]:
        """Ensure the Secret holds a valid bundle for ``now``; return it and the acknowledged digest.

        Raises ``StoreConflict`` when every attempt lost a race (another writer keeps winning);
        other API failures (``KubeError``) propagate unchanged to the caller's retry loop.
        """
        for _ in range(self._max_attempts):
            secret = await self._read()
            current = self._decode(secret)
            acked = ((secret or {}).get("metadata", {}).get("annotations") or {}).get(ACK_ANNOTATION)
            rotation = plan_rotation(
                current, self._spec, now=now, policy=self._policy, acknowledged_digest=acked
            )
            if rotation is None:
                assert current is not None  # plan_rotation bootstraps when there is no bundle
                return current, acked
            if not await self._write(secret, bundle_to_secret_data(rotation.bundle)):
                continue
            self._log_written(rotation)
            return rotation.bundle, acked
        raise StoreConflict(
            f"the Secret {self.namespace}/{self.name} changed on each of {self._max_attempts} attempts; "
            "another writer keeps replacing it (is a second installation or cert-manager writing it too?)"
        )

    async def _write(self, secret: dict[str, Any] | None, data: dict[str, str]) -> bool:
        """Create the Secret, or replace it on its resourceVersion (the precondition); False when
        another replica wrote first (a conflict, or AlreadyExists), so the caller re-reads and
        decides again on what that replica wrote."""
        try:
            if secret is None:
                await self._client.create(
                    SECRETS,
                    {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "metadata": {
                            "name": self.name,
                            "namespace": self.namespace,
                            "labels": dict(_MANAGED_BY),
                        },
                        "type": "Opaque",
                        "data": data,
                    },
                    namespace=self.namespace,
                )
            else:
                updated = copy.deepcopy(secret)
                updated["data"] = data  # resourceVersion stays: it is the precondition
                await self._client.replace(SECRETS, updated)
        except Conflict as e:  # includes AlreadyExists: another replica wrote first
            logger.info(
                "lost the certificate Secret race, re-reading",
                extra={
                    "fields": {
                        "event": "secret_conflict",
                        "secret": f"{self.namespace}/{self.name}",
                        "already_exists": isinstance(e, AlreadyExists),
                    }
                },
            )
            return False
        return True

    def _log_written(self, rotation: Rotation) -> None:
        """One line per write: why it rotated, and the new certificate's serial and notAfter."""
        logger.info(
            "certificate Secret written",
            extra={
                "fields": {
                    "event": "secret_written",
                    "secret": f"{self.namespace}/{self.name}",
                    "reasons": list(rotation.reasons),
                    "serial": f"{rotation.bundle.serving.serial:x}",
                    "not_after": rotation.bundle.serving.not_after.isoformat(),
                }
            },
        )

    async def acknowledge_injection(self, digest: str) -> bool:
        """Record on the Secret that every webhook configuration now trusts the caBundle ``digest``.

        Returns False when the Secret changed meanwhile (the next cycle re-injects and retries).
        """
        secret = await self._read()
        if secret is None:
            return False
        current = self._decode(secret)
        if current is None or current.ca_bundle_digest() != digest:
            return False  # the bundle moved on; acknowledging would vouch for the wrong CAs
        updated = copy.deepcopy(secret)
        annotations = updated.setdefault("metadata", {}).setdefault("annotations", {}) or {}
        if annotations.get(ACK_ANNOTATION) == digest:
            return True
        annotations[ACK_ANNOTATION] = digest
        updated["metadata"]["annotations"] = annotations
        try:
            await self._client.replace(SECRETS, updated)
        except Conflict:
            return False
        return True
