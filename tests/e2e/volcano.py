"""Volcano's binder as the tests' stand-in: the exact writes Volcano makes for a vGPU task, per version.

Volcano cannot be built here, so the e2e stories make the writes it makes, with the product's own
model of them (vgpu_guard/volcano/binder.py, where each step cites Volcano's source): >= 1.16 the
assignment on the Binding; 1.10-1.15 a PATCH of the pod, then the Binding. A refused write raises
what the API server answered, as Volcano sees it. Bindings of one session go out concurrently; a
failed bind resyncs the task and a later session decides again on fresh data.

What this module adds is the tests' side: the binder decides from a view the story gives it
(deliberately stale when a story says so, #3616: three 12 GiB pods placed on one 24 GiB card in
one session), and runs as Volcano's ServiceAccount (``system:serviceaccount:volcano-system:
volcano-scheduler``, an ``admission.allocationWriters`` entry, with the pod rights of Volcano's
ClusterRole), so every write meets the webhook exactly as Volcano's would.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tests.e2e.harness import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    SERVICE_ACCOUNTS,
    Backend,
)
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import AlreadyExists, KubeError, NotFound
from vgpu_guard.kube.resources import NAMESPACES
from vgpu_guard.volcano.binder import SCHEDULER_USER, parse_version, write_assignment

Obj = dict[str, Any]
Version = Literal["1.16", "1.15"]
NAMESPACE = "volcano-system"
ACCOUNT = "volcano-scheduler"
USER = SCHEDULER_USER
_ROLE = "e2e-volcano-scheduler"


@dataclass(frozen=True)
class Device:
    """One device of an assignment, as Volcano encodes it (memory in plugin units)."""

    uuid: str
    memory: int
    cores: int = 0


def encode(devices: Sequence[Device]) -> str:
    """One vGPU container's entry: ``UUID,NVIDIA,mem,cores:`` per device (device_info.go)."""
    return "".join(f"{d.uuid},NVIDIA,{d.memory},{d.cores}:" for d in devices)


@dataclass
class Binder:
    """Volcano's writes for one task, as ``version`` makes them; ``api`` authenticates as Volcano."""

    api: AioClusterClient
    version: Version

    async def bind(self, pod: Obj, node: str, devices: Sequence[Device]) -> None:
        """Allocate and bind ``pod`` (as read by the scheduler's cache) to ``node``; raises the
        API server's refusal (the webhook's denial included) as Volcano would see it."""
        version = parse_version(self.version)
        await write_assignment(
            self.api, pod, node=node, ids=encode(devices), version=version, now=int(time.time())
        )


async def _ensure(api: AioClusterClient, resource: Any, obj: Obj, namespace: str | None = None) -> None:
    with contextlib.suppress(AlreadyExists):
        await api.create(resource, obj, namespace=namespace)


@contextlib.asynccontextmanager
async def volcano_client(backend: Backend, admin: AioClusterClient) -> AsyncIterator[AioClusterClient]:
    """A client authenticated as Volcano's scheduler, with the pod rights its ClusterRole grants."""
    await _ensure(
        admin, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    meta = {"name": ACCOUNT, "namespace": NAMESPACE}
    await _ensure(
        admin, SERVICE_ACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}, NAMESPACE
    )
    rbac = "rbac.authorization.k8s.io/v1"
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch", "update"]},
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
    ]
    await _ensure(
        admin,
        CLUSTER_ROLES,
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": _ROLE}, "rules": rules},
    )
    binding = {
        "apiVersion": rbac,
        "kind": "ClusterRoleBinding",
        "metadata": {"name": _ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": _ROLE},
    }
    await _ensure(admin, CLUSTER_ROLE_BINDINGS, binding)
    kubeconfig = await backend.kubeconfig_for(NAMESPACE, ACCOUNT)
    client = await AioClusterClient.from_kubeconfig(str(kubeconfig))
    try:
        yield client
    finally:
        await client.close()
        for resource, name in ((CLUSTER_ROLE_BINDINGS, _ROLE), (CLUSTER_ROLES, _ROLE)):
            with contextlib.suppress(NotFound, KubeError):
                await admin.delete(resource, name)
