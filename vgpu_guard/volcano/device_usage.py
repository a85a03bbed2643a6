"""What Volcano counts on each card: its cache built from the bound pods, and a session's own changes.

From Volcano's source (pkg/scheduler/api/devices/nvidia/vgpu/device_info.go, at the tags named):

- ``AddResource`` when a pod on a node enters the cache (api/node_info.go ``addResource``):
  v1.10/v1.11 add every device of every container, so a pod whose two containers share a card
  counts twice there; v1.12.0+ call ``Sharing.AddPod`` per device, which counts a UID once per
  card (issue 43's (b): the second container's memory is not counted) in v1.12.x and from
  v1.15.0, and, in hami-core mode, every call in v1.13.x and v1.14.x (hamicore.go ``AddPod`` of
  those tags creates the ``PodMap`` entry when missing and counts on; MIG's returns early in all).
- ``Allocate``'s own bookkeeping in the session, after the fit has already added the numbers to
  the session's cards (``TryAddPod`` on them, not on a copy): v1.12.0/v1.13 then call
  ``addResource`` with the new annotations, adding the pod a second time; v1.14.0+ only put the
  UID in ``PodMap`` (``addToPodMap``).
- A discarded statement: ``Release`` -> ``SubResource`` takes the pod off again from v1.15.0 (the
  assignment is on the in-memory pod from then on). v1.10-v1.14 leave the session's numbers as
  they are: the in-memory pod has no assignment, so ``NodeInfo.RemoveTask``'s ``subResource`` finds
  nothing to subtract, and ``Release`` does nothing. The next session rebuilds from the cache.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vgpu_guard.engine.config import MigModelGeometries
from vgpu_guard.engine.objects import Obj
from vgpu_guard.engine.untrusted import as_mapping
from vgpu_guard.volcano.binder import VolcanoVersion
from vgpu_guard.volcano.device_cache import NodeDevices, decode_pod_devices, node_devices
from vgpu_guard.volcano.sharing import add_pod, sub_pod

__all__ = ["add_resource", "add_to_pod_map", "group_key", "sub_resource", "volcano_cache"]

VGPU_IDS = "volcano.sh/vgpu-ids-new"
_ENDED = ("Succeeded", "Failed")


def group_key(pod: Mapping[str, Any]) -> str:
    """utils.go ``getPodGroupKey``: ``namespace/group`` from the group-name annotations, or ""."""
    meta = as_mapping(pod.get("metadata"))
    notes = as_mapping(meta.get("annotations"))
    group = notes.get("scheduling.k8s.io/group-name") or notes.get("scheduling.volcano.sh/group-name")
    return f"{meta.get('namespace') or 'default'}/{group}" if group else ""


def add_resource(
    node: NodeDevices, *, uid: str, group: str, ids: str, version: VolcanoVersion, factor: int
) -> None:
    """``AddResource``: count one pod's assignment ``ids`` on the node's cards."""
    for container in decode_pod_devices(ids):
        for device in container:
            for card in node.card_for(device.uuid, version):
                if version.minor < 12:  # v1.10/v1.11: every device, every time
                    card.use(1, device.memory, device.cores)
                    mem, cores, _ = card.pods.get(uid, (0, 0, group))
                    card.pods[uid] = (mem + device.memory, cores + device.cores, group)
                    continue
                add_pod(
                    card,
                    device.memory,
                    device.cores,
                    uid=uid,
                    group=group,
                    device=device.uuid,
                    mode=node.mode,
                    factor=factor,
                    every_call=version.minor in (13, 14),
                )


def sub_resource(node: NodeDevices, *, uid: str, ids: str, version: VolcanoVersion, factor: int) -> None:
    """``SubResource``: take one pod's assignment off the node's cards (``SubPod`` per device)."""
    for container in decode_pod_devices(ids):
        for device in container:
            for card in node.card_for(device.uuid, version):
                sub_pod(
                    card,
                    device.memory,
                    device.cores,
                    uid=uid,
                    device=device.uuid,
                    mode=node.mode,
                    factor=factor,
                )


def add_to_pod_map(node: NodeDevices, *, uid: str, group: str, ids: str, version: VolcanoVersion) -> None:
    """v1.14.0+ ``addToPodMap``: the UID and its numbers in ``PodMap`` only (the fit counted them)."""
    for container in decode_pod_devices(ids):
        for device in container:
            for card in node.card_for(device.uuid, version):
                mem, cores, _ = card.pods.get(uid, (0, 0, group))
                card.pods[uid] = (mem + device.memory, cores + device.cores, group)


def _counted(pod: Obj) -> tuple[str, str] | None:
    """(node, ids) of a pod Volcano's cache counts: on a node, not ended, with an assignment."""
    spec, meta = as_mapping(pod.get("spec")), as_mapping(pod.get("metadata"))
    node, ids = spec.get("nodeName"), as_mapping(meta.get("annotations")).get(VGPU_IDS)
    if not node or ids is None or as_mapping(pod.get("status")).get("phase") in _ENDED:
        return None
    return str(node), str(ids)


def volcano_cache(
    nodes: Iterable[Obj],
    pods: Iterable[Obj],
    *,
    version: VolcanoVersion,
    known_mig: Sequence[MigModelGeometries],
    factor: int,
) -> dict[str, NodeDevices]:
    """Every node's ``GPUDevices`` with the bound pods counted, as a session opens on the cache."""
    cache: dict[str, NodeDevices] = {}
    for node in nodes:
        meta = as_mapping(node.get("metadata"))
        notes = {str(k): str(v) for k, v in as_mapping(meta.get("annotations")).items()}
        allocatable = as_mapping(as_mapping(node.get("status")).get("allocatable"))
        devices = node_devices(
            str(meta.get("name") or ""), notes, allocatable, version=version, known_mig=known_mig
        )
        if devices is not None:
            cache[devices.name] = devices
    for pod in pods:
        counted = _counted(pod)
        if counted is None or counted[0] not in cache:
            continue
        uid = str(as_mapping(pod.get("metadata")).get("uid") or "")
        add_resource(
            cache[counted[0]], uid=uid, group=group_key(pod), ids=counted[1], version=version, factor=factor
        )
    return cache
