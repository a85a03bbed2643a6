"""The pods not bound yet, as the arbiter reads them: a Binding's pod without a GET.

A Binding carries the pod's name, UID, annotations and the node, not its containers, and the
arbiter needs the containers' vGPU requests to know which ledger entry the assignment makes. One
GET per Binding was a whole extra request on the Binding's critical path, for the API server and
for the webhook (issue 35's benchmark, docs/benchmarks.md session 15). Every pod Volcano binds was
unbound a moment before, so the webhook watches the unbound pods (field selector
``spec.nodeName=``, what kube-scheduler's pending-pod informer selects) and keeps of each only what
``pod_request`` reads.

When the cache is trusted: only after a complete LIST (``synced``), and only for the pod whose UID
is the Binding's (a pod deleted and created again under its name is another pod). Anything else
(an unsynced cache, a pod created a moment before its Binding whose event has not arrived, a
Binding without a UID) reads the pod with one GET, as before. The fields kept cannot change while
the pod waits, except annotations, which the GET path reads no more atomically: either way the
pod is read before the Binding is stored, and a write between the two is not seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_guard.engine.annotations import (
    NOUSE_GPUTYPE,
    NOUSE_GPUUUID,
    PODGROUP_POLICY,
    USE_GPUTYPE,
    USE_GPUUUID,
    VGPU_MODE,
)
from vgpu_guard.engine.pod_request import GROUP_ANNOTATIONS, QUEUE_ANNOTATION
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.informer import Informer
from vgpu_guard.kube.resources import PODS

__all__ = ["UNBOUND", "PendingPods", "pending_pod"]

Obj = dict[str, Any]

# The field selector of pods no node is assigned to yet.
UNBOUND = "spec.nodeName="

# What engine/pod_request.py reads, and nothing else (tests/webhook/test_pending_pods.py checks that
# pod_request answers the same on the projection as on the pod, annotation by annotation).
_ANNOTATIONS = frozenset(
    {USE_GPUUUID, NOUSE_GPUUUID, USE_GPUTYPE, NOUSE_GPUTYPE, VGPU_MODE, PODGROUP_POLICY, QUEUE_ANNOTATION}
    | set(GROUP_ANNOTATIONS)
)
_METADATA = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
_SPEC = ("priority", "nodeSelector", "tolerations")
_RESOURCES = ("limits", "requests")
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"  # node affinity: the part a filter reads


def _container(container: object) -> object:
    if not isinstance(container, Mapping):
        return container  # kept in its place: a container's index is part of its field path
    out: Obj = {"name": container.get("name")}
    resources = container.get("resources")
    if isinstance(resources, Mapping):
        out["resources"] = {k: resources[k] for k in _RESOURCES if k in resources}
    return out


def pending_pod(pod: Obj) -> Obj:
    """What the cache keeps of an unbound pod: ``pod_request``'s inputs (identity, creation time,
    the annotations it reads, containers' names and resources, priority, node constraints), not
    the image, command, env, volumes, status or managedFields that make up most of a pod."""
    metadata, spec = pod.get("metadata"), pod.get("spec")
    meta = metadata if isinstance(metadata, Mapping) else {}
    body = spec if isinstance(spec, Mapping) else {}
    kept: Obj = {k: meta[k] for k in _METADATA if k in meta}
    notes = meta.get("annotations")
    if isinstance(notes, Mapping):
        read = {k: v for k, v in notes.items() if k in _ANNOTATIONS}
        if read:
            kept["annotations"] = read
    out_spec: Obj = {k: body[k] for k in _SPEC if k in body}
    containers = body.get("containers")
    if isinstance(containers, list):
        out_spec["containers"] = [_container(c) for c in containers]
    affinity = body.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    if isinstance(node_affinity, Mapping) and _REQUIRED in node_affinity:
        out_spec["affinity"] = {"nodeAffinity": {_REQUIRED: node_affinity[_REQUIRED]}}
    return {"metadata": kept, "spec": out_spec}


class PendingPods:
    """A watch of the unbound pods, projected (``pending_pod``); ``get`` answers only when trusted."""

    def __init__(self, client: ClusterClient, **informer: Any) -> None:
        self.informer = Informer(client, PODS, field_selector=UNBOUND, transform=pending_pod, **informer)

    @property
    def synced(self) -> bool:
        return self.informer.synced

    def get(self, namespace: str, name: str, uid: str) -> Obj | None:
        """The pod ``namespace/name`` if the cache is synced and holds it with ``uid``, else None."""
        if not uid or not self.informer.synced:
            return None
        pod = self.informer.items.get((namespace, name))
        if pod is None or pod["metadata"].get("uid") != uid:
            return None
        return pod

    async def run(self) -> None:
        """List, then watch, until cancelled (the informer retries on its own)."""
        await self.informer.run()

    def __len__(self) -> int:
        return len(self.informer.items)
