"""Build kube-apiserver, kube-controller-manager and kube-scheduler from Debian's source, once per machine.

Why from source: Debian ships the 1.20 source but no server binaries, and this workplace reaches only
package registries, so a release download is not an option. The recipe (deb-src entries, the
reflect2 replacement, GOPATH layout, vendored modules) is the one ``control-plane-facts.md`` records
as working on these machines.

The cache lives outside the clone (``~/.cache/vgpu-guard/kubernetes-1.20.2``, or
``$VGPU_GUARD_CACHE``) and is only used when its manifest's SHA-256 sums match the binaries and each
binary reports the expected version; anything else (a build killed half-way, a truncated copy) is
rebuilt, never used. A build happens in a scratch directory and is renamed into place at the end.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "1.20.2"
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
APT_PACKAGES = (
    "golang-go",
    "rsync",
    "etcd-server",
    "dpkg-dev",
    "golang-github-modern-go-reflect2-dev",
    "openssl",
)
DEB_SRC_FILE = Path("/etc/apt/sources.list.d/vgpu-guard-deb-src.sources")
DEBIAN_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
MANIFEST = "manifest.json"
REFLECT2 = "github.com/modern-go/reflect2"

Log = Callable[[str], None]


class Unavailable(Exception):
    """This machine cannot build the control plane; the message says exactly what is missing."""


class BuildError(Exception):
    """A build step failed; the message names the step and ends with its output's tail."""


@dataclass(frozen=True)
class Binaries:
    """A verified build: the three server binaries, the source they came from, and etcd."""

    version: str
    bin_dir: Path
    source_dir: Path
    etcd: Path

    def path(self, component: str) -> Path:
        return self.bin_dir / component


def cache_root() -> Path:
    explicit = os.environ.get("VGPU_GUARD_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vgpu-guard"


def cache_dir(version: str = KUBERNETES_VERSION) -> Path:
    return cache_root() / f"kubernetes-{version}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_problem(directory: Path, version: str = KUBERNETES_VERSION) -> str | None:
    """Why ``directory`` is not a usable build (None when it is)."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        sums = manifest["binaries"]
    except FileNotFoundError:
        return f"no build at {directory}"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{directory / MANIFEST} is unreadable ({e})"
    if manifest.get("version") != version:
        return f"{directory / MANIFEST} is for version {manifest.get('version')!r}, not {version}"
    if not (directory / "src" / "pkg" / "scheduler").is_dir():
        return f"the kept source {directory / 'src'} is missing"
    for component in COMPONENTS:
        binary = directory / "bin" / component
        if not binary.is_file() or not os.access(binary, os.X_OK):
            return f"{binary} is missing"
        if _sha256(binary) != sums.get(component):
            return f"{binary} does not match its recorded SHA-256 (partial or corrupt copy)"
    return None


def _reports_version(binary: Path, version: str) -> bool:
    try:
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.stdout.strip() == f"Kubernetes v{version}"


def cached_binaries(version: str = KUBERNETES_VERSION) -> Binaries | None:
    """The verified cached build, or None (a corrupt or partial cache counts as none)."""
    directory = cache_dir(version)
    etcd = shutil.which("etcd")
    if etcd is None or cache_problem(directory, version) is not None:
        return None
    if not all(_reports_version(directory / "bin" / c, version) for c in COMPONENTS):
        return None
    return Binaries(version, directory / "bin", directory / "src", Path(etcd))


def preflight() -> list[str]:
    """What this machine lacks to build (empty when it can)."""
    missing = []
    if not Path("/etc/debian_version").exists() or shutil.which("apt-get") is None:
        missing.append("a Debian system with apt-get (the build uses Debian's kubernetes source package)")
    if os.geteuid() != 0:
        missing.append("root, to install " + " ".join(APT_PACKAGES) + " with apt-get")
    return missing


def unavailable_reason() -> str | None:
    """One line saying why the control plane can be neither reused nor built here (None if it can)."""
    if cached_binaries() is not None:
        return None
    missing = preflight()
    if not missing:
        return None
    return (
        f"no cached control plane at {cache_dir()} and it cannot be built here: needs "
        + " and ".join(missing)
        + " (run scripts/control-plane build as root on Debian bookworm)"
    )


def _run(step: str, argv: list[str], log_file: Path, **kwargs: object) -> None:
    with log_file.open("ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        tail = log_file.read_bytes()[-4000:].decode(errors="replace")
        raise BuildError(f"{step} failed (exit {result.returncode}); last output of {log_file}:\n{tail}")


def _package_installed(name: str) -> bool:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() == "install ok installed"


def _ensure_deb_src(log: Log, log_file: Path) -> bool:
    """Add deb-src entries mirroring apt's deb ones; True when sources changed."""
    if DEB_SRC_FILE.exists():
        return False
    if not DEBIAN_SOURCES.exists():
        raise Unavailable(f"needs {DEBIAN_SOURCES} (deb822 sources) to mirror as deb-src entries")
    text = re.sub(r"(?m)^Types:\s*deb\s*$", "Types: deb-src", DEBIAN_SOURCES.read_text())
    DEB_SRC_FILE.write_text(
        f"# Added by vgpu-guard's scripts/control-plane: mirrors {DEBIAN_SOURCES}.\n{text}"
    )
    log(f"added deb-src entries in {DEB_SRC_FILE}")
    return True


def _apt_prepare(log: Log, log_file: Path) -> None:
    sources_changed = _ensure_deb_src(log, log_file)
    missing = [p for p in APT_PACKAGES if not _package_installed(p)]
    if sources_changed or missing:
        log("apt-get update")
        _run("apt-get update", ["apt-get", "update", "-q"], log_file)
    if missing:
        log("apt-get install " + " ".join(missing))
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run("apt-get install", ["apt-get", "install", "-y", "-q", *missing], log_file, env=env)


def _reflect2_source() -> Path:
    out = subprocess.run(
        ["dpkg", "-L", "golang-github-modern-go-reflect2-dev"], capture_output=True, text=True, check=True
    )
    for line in out.stdout.splitlines():
        if line.endswith("/" + REFLECT2) and Path(line).is_dir():
            return Path(line)
    raise BuildError("golang-github-modern-go-reflect2-dev lists no github.com/modern-go/reflect2 directory")


def _replace_reflect2(source: Path) -> None:
    """json-iterator crashes with the vendored reflect2 1.0.1 on Go >= 1.18; Debian's 1.0.2 fixes it."""
    vendored = source / "vendor" / REFLECT2
    shutil.rmtree(vendored)
    shutil.copytree(_reflect2_source(), vendored, ignore=shutil.ignore_patterns("go.mod", "go.sum"))


def _fetch_source(work: Path, log: Log, log_file: Path) -> tuple[Path, str]:
    download = work / "download"
    download.mkdir()
    log("apt-get source --download-only kubernetes")
    _run("apt-get source", ["apt-get", "source", "--download-only", "kubernetes"], log_file, cwd=download)
    dsc = next(download.glob("kubernetes_*.dsc"), None)
    if dsc is None:
        raise BuildError(f"apt-get source left no kubernetes_*.dsc in {download}")
    debian_version = dsc.stem.removeprefix("kubernetes_")
    log(f"dpkg-source -x {dsc.name}")
    _run("dpkg-source -x", ["dpkg-source", "-x", str(dsc), str(work / "src")], log_file)
    shutil.rmtree(download)
    return work / "src", debian_version


def _compile(source: Path, work: Path, log: Log, log_file: Path) -> None:
    """The source archive carries its version (git-archive substitutions), so no KUBE_GIT_* is needed."""
    gopath = work / "gopath"
    link = gopath / "src" / "k8s.io" / "kubernetes"
    link.parent.mkdir(parents=True)
    link.symlink_to(os.path.relpath(source, link.parent))
    env = {
        **os.environ,
        "GOPATH": str(gopath),
        "CGO_ENABLED": "0",
        "GOFLAGS": "-mod=vendor",
    }
    what = " ".join(f"cmd/{c}" for c in COMPONENTS)
    log(f"make WHAT='{what}' (about 8-10 minutes on 2 cores; output in {log_file})")
    _run("make", ["make", f"WHAT={what}"], log_file, cwd=link, env=env)
    shutil.rmtree(gopath)


def _install(source: Path, work: Path, version: str, debian_version: str) -> None:
    bin_dir = work / "bin"
    bin_dir.mkdir()
    sums = {}
    for component in COMPONENTS:
        built = source / "_output" / "bin" / component
        if not built.is_file():
            raise BuildError(f"make finished but {built} does not exist")
        shutil.copy2(built, bin_dir / component)
        sums[component] = _sha256(bin_dir / component)
    manifest = {
        "version": version,
        "debian_source_version": debian_version,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "binaries": sums,
    }
    (work / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    # Build outputs are kept out of the source we keep for reading (kube-scheduler's plugins).
    shutil.rmtree(source / "_output", ignore_errors=True)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure_built(log: Log = print, *, force: bool = False, version: str = KUBERNETES_VERSION) -> Binaries:
    """Reuse the verified cache or build into it; raises Unavailable or BuildError."""
    root = cache_root()
    with _locked(root):
        if not force:
            cached = cached_binaries(version)
            if cached is not None:
                return cached
        missing = preflight()
        if missing:
            raise Unavailable("cannot build the control plane: needs " + " and ".join(missing))
        final = cache_dir(version)
        problem = cache_problem(final, version)
        if final.exists():
            log(f"rebuilding: {problem or 'forced'}")
            shutil.rmtree(final)
        work = root / f".build-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        log_file = work / "build.log"
        started = time.monotonic()
        _apt_prepare(log, log_file)
        source, debian_version = _fetch_source(work, log, log_file)
        if f"really{version}" not in debian_version and not debian_version.startswith(version):
            raise BuildError(f"Debian's kubernetes source is {debian_version}, not {version}")
        _replace_reflect2(source)
        _compile(source, work, log, log_file)
        _install(source, work, version, debian_version)
        work.rename(final)
        log(f"built {', '.join(COMPONENTS)} {version} in {time.monotonic() - started:.0f}s into {final}")
    built = cached_binaries(version)
    if built is None:
        raise BuildError(f"the fresh build at {final} fails verification: {cache_problem(final, version)}")
    return built
