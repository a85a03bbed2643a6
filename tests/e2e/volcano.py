"""Volcano's binder as the tests' stand-in: the exact writes Volcano makes for a vGPU pod, per version.

Volcano cannot be built here, so the e2e stories reproduce what it sends, from its source:

- Volcano >= 1.16 (PR #5588, the fix of #5532): the predicates plugin's AllocateFunc merges the
  device annotations into the task's pod (pkg/scheduler/api/devices/nvidia/vgpu/device_info.go
  ~339-357; plugins/predicates/predicates.go ~243-251) and ``DefaultBinder.Bind`` sends the pod's
  annotations on the Binding: ``ObjectMeta{Namespace, Name, UID: p.UID, Annotations:
  p.Annotations}``, ``Target{Kind: Node, Name: task.NodeName}`` (pkg/scheduler/cache/cache.go).
- Volcano 1.10-1.15: ``GPUDevices.Allocate`` PATCHes ``vgpu-node``, ``vgpu-time`` (Unix seconds),
  ``vgpu-ids-new``, ``devices-to-allocate`` (= ``vgpu-ids-new``), ``bind-phase: allocating`` and
  ``bind-time`` (Unix seconds) onto the pod (device_info.go of those tags, ``patchPodAnnotations``);
  the Binding that follows carries the pod's annotations as read by the scheduler's cache (the
  same ``DefaultBinder``). A failed patch fails the allocation: nothing is bound.
- Bindings of one session go out concurrently; a failed bind resyncs the task and a later session
  decides again on fresh data.

The binder decides from its own view, deliberately stale when a story says so (#3616: three 12 GiB
pods placed on one 24 GiB card in one session), and runs as Volcano's ServiceAccount
(``system:serviceaccount:volcano-system:volcano-scheduler``, an ``admission.allocationWriters``
entry), so every write meets the webhook exactly as Volcano's would.
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
from vgpu_guard.kube.resources import NAMESPACES, PODS

Obj = dict[str, Any]
Version = Literal["1.16", "1.15"]
NAMESPACE = "volcano-system"
ACCOUNT = "volcano-scheduler"
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
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


def device_annotations(node: str, devices: Sequence[Device], now: int) -> dict[str, str]:
    ids = encode(devices)
    return {
        "volcano.sh/vgpu-node": node,
        "volcano.sh/vgpu-time": str(now),
        "volcano.sh/vgpu-ids-new": ids,
        "volcano.sh/devices-to-allocate": ids,
        "volcano.sh/bind-phase": "allocating",
        "volcano.sh/bind-time": str(now),
    }


@dataclass
class Binder:
    """Volcano's writes for one task, as ``version`` makes them; ``api`` authenticates as Volcano."""

    api: AioClusterClient
    version: Version

    async def bind(self, pod: Obj, node: str, devices: Sequence[Device]) -> None:
        """Allocate and bind ``pod`` (as read by the scheduler's cache) to ``node``; raises the
        API server's refusal (the webhook's denial included) as Volcano would see it."""
        meta = pod["metadata"]
        notes = {**(meta.get("annotations") or {}), **device_annotations(node, devices, int(time.time()))}
        if self.version == "1.15":
            await self.api.patch(
                PODS, meta["name"], {"metadata": {"annotations": notes}}, namespace=meta["namespace"]
            )
        await self.api.bind(meta["namespace"], meta["name"], node=node, annotations=notes, uid=meta["uid"])


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
