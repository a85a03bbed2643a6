"""What ``vgpu-guard sandbox`` adds to a real API server that has no kubelets and no Volcano.

A real cluster without kubelets and without Volcano needs three stand-ins:

- ``install``: our CRDs and Volcano's, as "a cluster with Volcano" has them. Kubernetes 1.20
  rejects Volcano's jobs CRD (its ``default: ""`` on string fields reaches validation as null), so
  only when the server says so is the copy installed here stripped of empty defaults (and of the
  list-map markers whose keys 1.20 then wants defaulted); ``for_1_20`` is that transformation.
- ``keep_nodes_ready``: the kubelets' heartbeat. Every Node's Ready condition is refreshed, or the
  node lifecycle controller marks it NotReady after its 40 s grace period and taints it.
- ``confirm_bindings``: the device plugin's Allocate, which sets ``volcano.sh/bind-phase=success``
  on a bound pod in ``allocating`` when the kubelet would start it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import AlreadyExists, KubeError, NotFound
from vgpu_guard.kube.resources import CRDS, NAMESPACES, NODES, PODS

__all__ = ["confirm_bindings", "for_1_20", "install", "keep_nodes_ready"]

_ESTABLISHED_SECONDS = 30.0
_LIST_MAP_MARKERS = ("x-kubernetes-list-type", "x-kubernetes-list-map-keys")
BIND_PHASE = "volcano.sh/bind-phase"


def for_1_20(node: Any) -> Any:
    """Drop empty defaults, and the list-map markers whose keys 1.20 then wants defaulted or required."""
    if isinstance(node, dict):
        drop = {"default"} if node.get("default") in (None, "") and "default" in node else set()
        if node.get("x-kubernetes-list-type") == "map":
            drop.update(_LIST_MAP_MARKERS)
        return {k: for_1_20(v) for k, v in node.items() if k not in drop}
    if isinstance(node, list):
        return [for_1_20(v) for v in node]
    return node


async def install(admin: AioClusterClient, namespace: str, crds: Iterable[Obj]) -> None:
    """The release namespace and every CRD the cluster lacks, each waited for until Established."""
    with contextlib.suppress(AlreadyExists):
        await admin.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
    for crd in crds:
        try:
            await admin.create(CRDS, crd)
        except AlreadyExists:
            continue
        except KubeError as e:
            if e.code != 422 or ".default: Invalid value" not in str(e):
                raise
            await admin.create(CRDS, for_1_20(crd))
        await _established(admin, crd["metadata"]["name"])


async def _established(admin: AioClusterClient, name: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _ESTABLISHED_SECONDS
    while loop.time() < deadline:
        conditions = ((await admin.get(CRDS, name)).get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"CRD {name} was not Established within {_ESTABLISHED_SECONDS:.0f}s")


def ready_condition(now: datetime) -> Obj:
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "vgpu-guard sandbox: no kubelet, the sandbox keeps this condition fresh",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }


async def keep_nodes_ready(admin: AioClusterClient, interval: float) -> None:
    """Refresh every Node's Ready condition every ``interval`` seconds (other conditions kept)."""
    while True:
        with contextlib.suppress(KubeError):
            for node in (await admin.list(NODES)).items:
                conditions = [
                    c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") != "Ready"
                ]
                patch = {"status": {"conditions": [*conditions, ready_condition(datetime.now(UTC))]}}
                with contextlib.suppress(NotFound):
                    await admin.patch(NODES, node["metadata"]["name"], patch, subresource="status")
        await asyncio.sleep(interval)


async def confirm_bindings(admin: AioClusterClient, interval: float = 0.5) -> None:
    """Set ``bind-phase=success`` on every bound, live pod in ``allocating``."""
    while True:
        with contextlib.suppress(KubeError):
            for pod in (await admin.list(PODS)).items:
                meta = pod.get("metadata") or {}
                if (meta.get("annotations") or {}).get(BIND_PHASE) != "allocating":
                    continue
                if not (pod.get("spec") or {}).get("nodeName") or meta.get("deletionTimestamp"):
                    continue
                patch = {"metadata": {"annotations": {BIND_PHASE: "success"}}}
                with contextlib.suppress(NotFound):
                    await admin.patch(PODS, meta["name"], patch, namespace=meta["namespace"])
        await asyncio.sleep(interval)
