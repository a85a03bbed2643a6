"""A real Kubernetes control plane for tests, benchmarks and the sandbox.

kube-apiserver, kube-controller-manager and kube-scheduler are built once per machine from Debian's
``kubernetes`` source package (1.20.2) and cached outside the clone; etcd comes from Debian's
``etcd-server``. ``start`` runs all four on free loopback ports with token auth, RBAC and
ServiceAccounts, and writes an admin kubeconfig verified by the server's CA.

Standard library only, so ``scripts/control-plane`` runs before any virtualenv exists. Nothing in
the product imports this package: tests, benchmarks and ``vgpu-guard sandbox`` do.
"""

from vgpu_guard.controlplane.build import Binaries, BuildError, Unavailable, cached_binaries, ensure_built
from vgpu_guard.controlplane.launch import ControlPlane, StartError

__all__ = [
    "Binaries",
    "BuildError",
    "ControlPlane",
    "StartError",
    "Unavailable",
    "cached_binaries",
    "ensure_built",
]
