"""The pods not bound yet, as the arbiter reads them: a Binding's pod without a GET.

A Binding carries the pod's name, UID, annotations and the node, not its containers, and the
arbiter needs the containers' vGPU requests to know which ledger entry the assignment makes. One
GET per Binding was a whole extra request on the Binding's critical path, for the API server and
for the webhook (issue 35's benchmark, docs/benchmarks.md session 15). Every pod Volcano binds was
unbound a moment before, so the webhook watches the unbound pods (field selector
``spec.nodeName=``) and keeps of each only what the arbiter reads through ``pod_request``: ~2 KB
a pod in memory, 18 MiB for 10,000 (docs/benchmarks.md, the arbiter's session 16). When the
controller runs in the same process (``serve all``), the webhook reads the controller's watch of
every pod instead of opening a second one (issue 45).

When the cache is trusted: only after a complete LIST (``synced``), and only for the pod whose UID
is the Binding's (a pod deleted and created again under its name is another pod). Anything else
(an unsynced cache, a pod created a moment before its Binding whose event has not arrived, a
Binding without a UID) reads the pod with one GET, as before. The containers' resources cannot
change while the pod waits; annotations can, and the GET path reads them no more atomically:
either way the pod is read before the Binding is stored, and a write between the two is not seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from types import MappingProxyType
from typing import Any

from vgpu_guard.engine.config import NvidiaConfig
from vgpu_guard.engine.objects import Obj
from vgpu_guard.engine.pod_request import GROUP_ANNOTATIONS, QUEUE_ANNOTATION
from vgpu_guard.engine.vgpu_request import resource_names
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.informer import Informer
from vgpu_guard.kube.resources import PODS

__all__ = ["UNBOUND", "PendingPods", "pending_pod"]


# The field selector of pods no node is assigned to yet.
UNBOUND = "spec.nodeName="

# The annotations the arbiter's decision reads (the queue, and the gang whose PodGroup may name
# another); tests/webhook/test_pending_pods.py checks, for every annotation name the engine knows,
# that the arbiter reads and decides the same on the projection as on the pod.
_ANNOTATIONS = frozenset({QUEUE_ANNOTATION, *GROUP_ANNOTATIONS})
_METADATA = ("name", "namespace", "uid", "resourceVersion")
_RESOURCES = ("limits", "requests")
# Where a container without vGPU stood (its index is part of the others' field paths and entries);
# one shared, read-only object.
_NO_VGPU: Mapping[str, Any] = MappingProxyType({})


def _container(container: object, names: frozenset[str]) -> object:
    resources = container.get("resources") if isinstance(container, Mapping) else None
    if not isinstance(container, Mapping) or not isinstance(resources, Mapping):
        return _NO_VGPU
    kept: Obj = {}
    for part in _RESOURCES:
        values = resources.get(part)
        if isinstance(values, Mapping):
            vgpu = {k: v for k, v in values.items() if k in names}
            if vgpu:
                kept[part] = vgpu
    return {"name": container.get("name"), "resources": kept} if kept else _NO_VGPU


def pending_pod(pod: Obj, nvidia: NvidiaConfig) -> Obj:
    """What the cache keeps of an unbound pod: what the arbiter reads through ``pod_request``
    (identity, the queue and gang annotations, each container's place and vGPU resources), not the
    images, commands, env, volumes, node constraints, status or managedFields of a pod. So
    ``pod_request`` of it is the arbiter's view only: priority, constraints and GPU type filters
    are left out."""
    metadata, spec = pod.get("metadata"), pod.get("spec")
    meta = metadata if isinstance(metadata, Mapping) else {}
    kept: Obj = {k: meta[k] for k in _METADATA if k in meta}
    notes = meta.get("annotations")
    if isinstance(notes, Mapping):
        read = {k: v for k, v in notes.items() if k in _ANNOTATIONS}
        if read:
            kept["annotations"] = read
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    if not isinstance(containers, list):
        return {"metadata": kept, "spec": {}}
    names = frozenset(resource_names(nvidia).values())
    return {"metadata": kept, "spec": {"containers": [_container(c, names) for c in containers]}}


class PendingPods:
    """The unbound pods of a pod informer; ``get`` answers only when trusted.

    The informer is the webhook's own (``watching``: unbound pods only, projected by
    ``pending_pod``) or, when the controller runs in the same process (``serve all``, ``simulate``),
    the controller's informer of every pod, shared: one watch of pods per process. Its projection
    keeps everything ``pending_pod`` keeps (tests/webhook/test_pending_pods.py holds the arbiter's
    decision the same on both), and a bound pod is answered as absent either way.
    """

    def __init__(self, informer: Informer) -> None:
        self.informer = informer

    @classmethod
    def watching(cls, client: ClusterClient, nvidia: NvidiaConfig, **informer: Any) -> PendingPods:
        """The webhook's own watch of the unbound pods (field selector ``UNBOUND``), ~2 KB a pod."""
        return cls(
            Informer(
                client,
                PODS,
                field_selector=UNBOUND,
                transform=partial(pending_pod, nvidia=nvidia),
                **informer,
            )
        )

    @property
    def synced(self) -> bool:
        return self.informer.synced

    def get(self, namespace: str, name: str, uid: str) -> Obj | None:
        """The pod ``namespace/name`` if the cache is synced and holds it unbound with ``uid``, else None."""
        if not uid or not self.informer.synced:
            return None
        pod = self.informer.items.get((namespace, name))
        if pod is None or pod["metadata"].get("uid") != uid:
            return None
        spec = pod.get("spec")
        return None if isinstance(spec, Mapping) and spec.get("nodeName") else pod

    async def run(self) -> None:
        """List, then watch, until cancelled (the informer retries on its own)."""
        await self.informer.run()

    def __len__(self) -> int:
        return len(self.informer.items)
