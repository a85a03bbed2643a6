"""The control plane's build cache and process bookkeeping, without building or starting anything.

The real build and start run in every CI run (tests/real_cluster.py); these pin what must never
happen: a partial or corrupt cache used as if it were good, a machine that cannot build pretending
it can, and ``stop`` killing a process it did not start.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vgpu_guard.controlplane import build, launch
from vgpu_guard.controlplane.build import COMPONENTS, Binaries

VERSION = "1.20.2"


def fake_build(root: Path, *, version: str = VERSION, reported: str = VERSION) -> Path:
    """A cache directory laid out as a real build, with scripts standing in for the binaries."""
    directory = root / f"kubernetes-{version}"
    (directory / "bin").mkdir(parents=True)
    (directory / "src" / "pkg" / "scheduler").mkdir(parents=True)
    sums = {}
    for component in COMPONENTS:
        binary = directory / "bin" / component
        binary.write_text(f"#!/bin/sh\necho 'Kubernetes v{reported}'\n")
        binary.chmod(0o755)
        sums[component] = hashlib.sha256(binary.read_bytes()).hexdigest()
    manifest = {"version": version, "binaries": sums}
    (directory / build.MANIFEST).write_text(json.dumps(manifest))
    return directory


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VGPU_GUARD_CACHE", str(tmp_path))
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    return tmp_path


def test_a_complete_build_is_reused(cache: Path) -> None:
    directory = fake_build(cache)
    assert build.cache_problem(directory) is None
    found = build.cached_binaries()
    assert found == Binaries(VERSION, directory / "bin", directory / "src", Path("/usr/bin/etcd"))


def test_a_truncated_binary_is_never_used(cache: Path) -> None:
    directory = fake_build(cache)
    binary = directory / "bin" / "kube-scheduler"
    binary.write_bytes(binary.read_bytes()[:10])
    assert build.cache_problem(directory) == (
        f"{binary} does not match its recorded SHA-256 (partial or corrupt copy)"
    )
    assert build.cached_binaries() is None


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda d: (d / build.MANIFEST).unlink(), "no build at {d}"),
        (lambda d: (d / build.MANIFEST).write_text("{"), "{d}/manifest.json is unreadable"),
        (lambda d: (d / "bin" / "kube-apiserver").unlink(), "{d}/bin/kube-apiserver is missing"),
        (lambda d: os.rename(d / "src", d / "gone"), "the kept source {d}/src is missing"),
    ],
)
def test_a_partial_cache_says_what_is_wrong(cache: Path, damage: object, problem: str) -> None:
    directory = fake_build(cache)
    damage(directory)  # type: ignore[operator]
    found = build.cache_problem(directory)
    assert found is not None and found.startswith(problem.format(d=directory))
    assert build.cached_binaries() is None


def test_binaries_that_report_another_version_are_not_used(cache: Path) -> None:
    fake_build(cache, reported="0.0.0-master")
    assert build.cached_binaries() is None


def test_without_root_it_says_exactly_what_it_needs(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    reason = build.unavailable_reason()
    assert reason is not None
    assert reason.startswith(
        f"no cached control plane at {cache}/kubernetes-{VERSION} and it cannot be built"
    )
    assert "root, to install golang-go rsync etcd-server dpkg-dev" in reason
    with pytest.raises(build.Unavailable, match="needs root"):
        build.ensure_built(lambda line: None)


def test_a_cached_build_needs_no_root(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_build(cache)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert build.unavailable_reason() is None
    assert build.ensure_built(lambda line: None).version == VERSION


def test_stop_ends_only_the_processes_it_recorded(tmp_path: Path) -> None:
    ours = subprocess.Popen(["/bin/sleep", "30"])
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        state = {
            "processes": {
                "etcd": {"pid": ours.pid, "argv0": "/bin/sleep"},
                # A recycled PID now running something else must be left alone.
                "kube-apiserver": {"pid": bystander.pid, "argv0": "/bin/sleep"},
            }
        }
        (tmp_path / "state.json").write_text(json.dumps(state))
        # Popen returns once exec began; the kernel fills the new /proc/<pid>/cmdline a moment
        # later, and on a loaded machine stop_recorded could read it empty (a CI run did).
        deadline = time.monotonic() + 5
        while not launch._runs(ours.pid, "/bin/sleep") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert launch.stop_recorded(tmp_path) == ["etcd"]
        assert ours.wait(timeout=5) is not None
        assert bystander.poll() is None
        assert not (tmp_path / "state.json").exists()
        assert launch.stop_recorded(tmp_path) == []
    finally:
        for process in (ours, bystander):
            process.kill()
            process.wait()


def test_a_port_in_use_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        binaries = Binaries(VERSION, tmp_path, tmp_path, Path("/usr/bin/etcd"))
        ports = launch.Ports(
            port, launch.free_port(), launch.free_port(), launch.free_port(), launch.free_port()
        )
        plane = launch.ControlPlane(binaries, tmp_path / "plane", ports=ports)
        with pytest.raises(launch.StartError, match=f"port {port} for etcd_client is in use on 127.0.0.1"):
            plane.start()
    assert not (tmp_path / "plane" / "state.json").exists()
