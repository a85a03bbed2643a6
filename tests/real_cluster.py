"""Which real API server the suites run against, and the one line that says why when there is none.

In order: ``E2E_KUBECONFIG`` (any cluster, started by any means; the suites need only its kubeconfig
and an admin identity); else the project's control plane (``scripts/control-plane``: 1.20.2 from
Debian's source, built once per machine and cached), started for the test session and stopped at
its end. Where neither is possible the real-cluster tests are left out with one line saying what is
missing, except under ``CI=true``, where they must run: a missing build is built, and a failure to
build or start fails the run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from vgpu_guard.controlplane import ControlPlane, cached_binaries, ensure_built
from vgpu_guard.controlplane.build import unavailable_reason

__all__ = ["NOT_RUN", "RealCluster", "deselect_real_cluster_items", "in_ci", "real_cluster", "unavailable"]

# How many real-cluster items each conftest left out (the root conftest says so in one line).
NOT_RUN = pytest.StashKey[list[int]]()


@dataclass(frozen=True)
class RealCluster:
    """A real API server: its admin kubeconfig, where it came from, and the plane if we started it."""

    kubeconfig: Path
    source: str
    plane: ControlPlane | None = None


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable() -> str | None:
    """Why the real-cluster tests cannot run here (None when they can, or must, as under CI)."""
    if os.environ.get("E2E_KUBECONFIG") or in_ci():
        return None
    return unavailable_reason()


@contextmanager
def real_cluster(workdir: Path) -> Iterator[RealCluster]:
    """The real API server for a test session (started and stopped here unless external)."""
    external = os.environ.get("E2E_KUBECONFIG")
    if external:
        yield RealCluster(Path(external), "E2E_KUBECONFIG")
        return
    binaries = cached_binaries() or ensure_built(lambda line: print(f"control-plane: {line}", flush=True))
    with ControlPlane(binaries, workdir) as plane:
        yield RealCluster(plane.kubeconfig, f"scripts/control-plane (Kubernetes {binaries.version})", plane)


def deselect_real_cluster_items(
    config: pytest.Config, items: list[pytest.Item], needs_it: Callable[[pytest.Item], bool]
) -> None:
    """Leave out the items that need a real cluster when none can be had (said once, at the end)."""
    if unavailable() is None:
        return
    left_out = [i for i in items if needs_it(i)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [i for i in items if not needs_it(i)]
        config.stash.setdefault(NOT_RUN, []).append(len(left_out))
