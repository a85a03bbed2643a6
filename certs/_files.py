"""Certificate files on disk: atomic writes for our bundle, mtime polling for mounted ones.

Files matter in two modes: the Secret-backed manager writes them for tools that want paths
(and for debugging with ``openssl``); in cert-manager ("files only") mode the kubelet updates a
mounted Secret by swapping a ``..data`` symlink, which changes what ``stat`` reports for the
paths, so polling mtime/inode/size notices it without inotify.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vgpu_guard.certs._bundle import CertificateBundle
from vgpu_guard.certs._errors import ReloadFailed
from vgpu_guard.certs._reload import ReloadableSSLContext

__all__ = ["CertificateFiles", "FileWatcher", "write_bundle_files"]


@dataclass(frozen=True, slots=True)
class CertificateFiles:
    """Where a serving certificate, its key and the CA bundle live."""

    cert_file: Path
    key_file: Path
    ca_file: Path | None = None

    @classmethod
    def in_directory(cls, directory: str | os.PathLike[str]) -> CertificateFiles:
        d = Path(directory)
        return cls(d / "tls.crt", d / "tls.key", d / "ca.crt")


def _atomic_write(path: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bundle_files(bundle: CertificateBundle, directory: str | os.PathLike[str]) -> CertificateFiles:
    """Write ``tls.crt``, ``tls.key`` (0600) and ``ca.crt`` (the caBundle) atomically each."""
    files = CertificateFiles.in_directory(directory)
    files.cert_file.parent.mkdir(parents=True, exist_ok=True)
    # Key first: a reader that sees the new certificate finds its key already in place.
    _atomic_write(files.key_file, bundle.serving.key_pem, 0o600)
    _atomic_write(files.cert_file, bundle.serving.cert_pem, 0o644)
    assert files.ca_file is not None
    _atomic_write(files.ca_file, bundle.ca_bundle_pem(), 0o644)
    return files


def _fingerprint(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return (st.st_mtime_ns, st.st_ino, st.st_size)


class FileWatcher:
    """Reload ``context`` from ``files`` whenever their stat fingerprint changes."""

    def __init__(self, context: ReloadableSSLContext, files: CertificateFiles) -> None:
        self._context = context
        self._files = files
        self._seen: tuple[tuple[int, int, int], tuple[int, int, int]] | None = None

    def poll(self) -> bool:
        """Reload if the files changed since the last successful load; True when reloaded.

        A half-written pair (new certificate, old key) raises ``ReloadFailed`` and leaves the
        fingerprint unrecorded, so the next poll tries again while the old certificate keeps serving.
        """
        try:
            seen = (_fingerprint(self._files.cert_file), _fingerprint(self._files.key_file))
        except OSError as e:
            raise ReloadFailed(
                f"cannot stat {self._files.cert_file} / {self._files.key_file}: {e}; "
                "is the certificate Secret mounted (cert-manager mode) or the directory writable?"
            ) from e
        if seen == self._seen:
            return False
        self._context.load_files(self._files.cert_file, self._files.key_file)
        self._seen = seen
        return True
