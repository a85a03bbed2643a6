"""The certificate loops a serving process runs in the background.

``run_certificate_manager`` (built-in CA mode) keeps the shared Secret valid, loads the serving pair
into the TLS server whenever it changes and, only while ``is_leader()`` says so, injects the
caBundle and acknowledges it so a staged CA can be promoted (see ``_renewal``).
``run_file_reloader`` (cert-manager / "files only" mode) just follows mounted files.

Both take ``clock`` and ``sleep`` so tests fast-forward through a year in milliseconds, and both
run until ``stop`` is set or the task is cancelled (aiohttp ``cleanup_ctx`` does the latter).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from vgpu_guard.certs._bundle import CertificateBundle, parse_certificates
from vgpu_guard.certs._errors import CertificateError
from vgpu_guard.certs._files import CertificateFiles, FileWatcher, write_bundle_files
from vgpu_guard.certs._generate import ServingSpec
from vgpu_guard.certs._inject import inject_ca_bundle
from vgpu_guard.certs._policy import DEFAULT_POLICY, Clock, RenewalPolicy, Sleep
from vgpu_guard.certs._reload import ReloadableSSLContext
from vgpu_guard.certs._store import SecretCertificateStore
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import KubeError

__all__ = ["CertificateManager", "CertificateManagerConfig", "run_certificate_manager", "run_file_reloader"]

logger = logging.getLogger("vgpu_guard.certs")

_MIN_DELAY = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class CertificateManagerConfig:
    """What the built-in CA mode manages; names come from the chart's values."""

    secret_namespace: str
    secret_name: str
    spec: ServingSpec
    mutating_webhooks: tuple[str, ...] = ()
    validating_webhooks: tuple[str, ...] = ()
    policy: RenewalPolicy = DEFAULT_POLICY
    # Optional: also write tls.crt/tls.key/ca.crt here (an emptyDir) for tools that want paths.
    cert_dir: Path | None = None
    # Backoff after an API or certificate error.
    retry_interval: timedelta = timedelta(seconds=30)
    # How often a replica re-reads the Secret while a CA rollover waits for the leader.
    rollover_poll_interval: timedelta = field(default=timedelta(minutes=5))


class CertificateManager:
    """One replica's view of the shared certificate; ``run_once`` is one reconcile pass."""

    def __init__(
        self,
        client: ClusterClient,
        *,
        config: CertificateManagerConfig,
        context: ReloadableSSLContext | None,
        is_leader: Callable[[], bool],
    ) -> None:
        self._client = client
        self._config = config
        self._context = context
        self._is_leader = is_leader
        self._store = SecretCertificateStore(
            client,
            namespace=config.secret_namespace,
            name=config.secret_name,
            spec=config.spec,
            policy=config.policy,
        )
        self._written: tuple[int, str] | None = None
        self.bundle: CertificateBundle | None = None

    @property
    def ready(self) -> bool:
        """True once this replica holds a certificate (and serves it, when it has a TLS server)."""
        return self.bundle is not None and (self._context is None or self._context.loaded)

    def _apply(self, bundle: CertificateBundle) -> None:
        self.bundle = bundle
        if self._context is not None and self._context.serial != bundle.serving.serial:
            self._context.load_pair(bundle.serving)
        key = (bundle.serving.serial, bundle.ca_bundle_digest())
        if self._config.cert_dir is not None and self._written != key:
            write_bundle_files(bundle, self._config.cert_dir)
            self._written = key

    async def run_once(self, now: datetime) -> timedelta:
        """Reconcile the Secret, apply it locally, inject when leader; return the delay to the next pass."""
        bundle, acked = await self._store.reconcile(now)
        self._apply(bundle)
        if self._is_leader():
            digest = bundle.ca_bundle_digest()
            await inject_ca_bundle(
                self._client,
                bundle.ca_bundle_pem(),
                mutating=self._config.mutating_webhooks,
                validating=self._config.validating_webhooks,
            )
            if (
                acked != digest
                and await self._store.acknowledge_injection(digest)
                and bundle.next_ca is not None
            ):
                # Every configuration trusts the staged CA now: promote it in this same pass.
                bundle, _ = await self._store.reconcile(now)
                self._apply(bundle)
        return self._next_delay(bundle, now)

    def _next_delay(self, bundle: CertificateBundle, now: datetime) -> timedelta:
        policy = self._config.policy
        deadlines = [
            bundle.serving.not_after - policy.serving_renew_before,
            bundle.ca.not_after - policy.ca_renew_before,
            *(c.not_valid_after_utc for pem in bundle.previous_cas for c in parse_certificates(pem)),
        ]
        delay = min([policy.check_interval, *(d - now for d in deadlines)])
        if bundle.next_ca is not None:
            delay = min(delay, self._config.rollover_poll_interval)
        return max(delay, _MIN_DELAY)


async def run_certificate_manager(
    client: ClusterClient,
    *,
    config: CertificateManagerConfig,
    context: ReloadableSSLContext | None,
    is_leader: Callable[[], bool],
    # injected (tests fast-forward)
    clock: Clock,
    sleep: Sleep = asyncio.sleep,
    stop: asyncio.Event | None = None,
    manager: CertificateManager | None = None,
) -> None:
    """Run the built-in CA mode until ``stop`` is set or the task is cancelled.

    Pass ``manager`` to read ``.ready`` / ``.bundle`` from outside (readiness probe); errors are
    logged and retried after ``config.retry_interval``, never raised, because a transient API
    outage must not take down a webhook replica that still holds a valid certificate.
    """
    manager = manager or CertificateManager(client, config=config, context=context, is_leader=is_leader)
    while stop is None or not stop.is_set():
        try:
            delay = await manager.run_once(clock())
        except (CertificateError, KubeError) as e:
            logger.error(
                "certificate reconcile failed, will retry",
                extra={
                    "fields": {
                        "event": "reconcile_failed",
                        "secret": f"{config.secret_namespace}/{config.secret_name}",
                        "error": f"{type(e).__name__}: {e}",
                        "retry_in_seconds": config.retry_interval.total_seconds(),
                    }
                },
            )
            delay = config.retry_interval
        await sleep(delay.total_seconds())


async def run_file_reloader(
    context: ReloadableSSLContext,
    files: CertificateFiles,
    *,
    interval: timedelta = timedelta(seconds=10),
    # injected
    sleep: Sleep = asyncio.sleep,
    stop: asyncio.Event | None = None,
) -> None:
    """Follow certificate files (cert-manager mode): reload whenever they change on disk."""
    watcher = FileWatcher(context, files)
    while stop is None or not stop.is_set():
        try:
            watcher.poll()
        except CertificateError as e:
            logger.warning(
                "certificate files not loadable yet, keeping the current certificate",
                extra={
                    "fields": {
                        "event": "file_reload_failed",
                        "cert_file": os.fspath(files.cert_file),
                        "error": str(e),
                    }
                },
            )
        await sleep(interval.total_seconds())
