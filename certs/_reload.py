"""A server ``ssl.SSLContext`` whose certificate can be swapped while the server runs.

How: aiohttp (asyncio) holds on to the one context given to ``TCPSite``. That front context holds
no certificate, only an ``sni_callback``, which OpenSSL runs on every ClientHello before the
certificate is chosen (also when the client sends no SNI, e.g. when it dials an IP); the callback
points the connection at the newest inner context. Connections that finished their handshake keep
the context they got, so nothing established is dropped, and no restart is needed.

Python's ``ssl`` loads keys from files only, so in-memory PEM goes through a private temporary
directory (0700, under ``scratch_dir``: an emptyDir with a read-only root filesystem) that is
removed right after loading.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
import threading
from datetime import datetime
from pathlib import Path

from vgpu_guard.certs._bundle import KeyPair
from vgpu_guard.certs._errors import InvalidBundle, ReloadFailed
from vgpu_guard.certs._metrics import CERTIFICATE_EXPIRY

__all__ = ["ReloadableSSLContext"]

logger = logging.getLogger("vgpu_guard.certs")


class ReloadableSSLContext:
    """Pass ``.ssl_context`` to ``aiohttp.web.TCPSite(ssl_context=...)``; call ``load_*`` to rotate.

    ``source`` labels the expiry gauge (e.g. the Secret name, or ``files``).
    """

    def __init__(self, *, source: str, scratch_dir: str | os.PathLike[str] | None = None) -> None:
        self.source = source
        self._scratch_dir = scratch_dir
        self._lock = threading.Lock()
        self._inner: ssl.SSLContext | None = None
        self._pair: KeyPair | None = None
        self._front = self._new_context()
        self._front.sni_callback = self._select

    @staticmethod
    def _new_context() -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # kube-apiserver speaks 1.2 and 1.3
        return ctx

    def _select(
        self, ssl_object: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext
    ) -> None:
        inner = self._inner
        if inner is not None:
            ssl_object.context = inner

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """The context to hand to the server once; it stays the same object across rotations."""
        return self._front

    @property
    def loaded(self) -> bool:
        """True once a certificate is loaded (readiness: do not serve before)."""
        return self._inner is not None

    @property
    def not_after(self) -> datetime | None:
        return self._pair.not_after if self._pair else None

    @property
    def serial(self) -> int | None:
        return self._pair.serial if self._pair else None

    def load_files(self, cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str]) -> None:
        """Load a PEM chain and key from disk (cert-manager or our own written files)."""
        try:
            pair = KeyPair(Path(cert_file).read_bytes(), Path(key_file).read_bytes()).check()
        except (OSError, InvalidBundle) as e:
            raise ReloadFailed(f"cannot load certificate {cert_file} with key {key_file}: {e}") from e
        self._install(pair, cert_file, key_file)

    def load_pair(self, pair: KeyPair) -> None:
        """Load an in-memory certificate and key (the Secret-backed manager's path)."""
        try:
            pair.check()
        except InvalidBundle as e:
            raise ReloadFailed(f"refusing to load a mismatched certificate/key pair: {e}") from e
        with tempfile.TemporaryDirectory(prefix="vgpu-guard-tls-", dir=self._scratch_dir) as tmp:
            cert_file, key_file = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
            cert_file.write_bytes(pair.cert_pem)
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(pair.key_pem)
            self._install(pair, cert_file, key_file)

    def _install(
        self, pair: KeyPair, cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str]
    ) -> None:
        ctx = self._new_context()
        try:
            ctx.load_cert_chain(cert_file, key_file)
        except (ssl.SSLError, OSError) as e:
            raise ReloadFailed(f"OpenSSL rejected certificate {cert_file} / key {key_file}: {e}") from e
        with self._lock:
            previous = self._pair
            self._inner, self._pair = ctx, pair
        CERTIFICATE_EXPIRY.labels(source=self.source).set(pair.not_after.timestamp())
        logger.info(
            "serving certificate loaded",
            extra={
                "fields": {
                    "event": "certificate_loaded",
                    "source": self.source,
                    "serial": f"{pair.serial:x}",
                    "previous_serial": f"{previous.serial:x}" if previous else None,
                    "not_after": pair.not_after.isoformat(),
                }
            },
        )
