"""The device assignment in the plugin's exact wire format, both ways.

``volcano.sh/vgpu-ids-new`` and ``volcano.sh/devices-to-allocate``: one entry per vGPU container
(in ``spec.containers`` order, containers without vGPU skipped, as Volcano's deviceshare does),
entries joined by ``;``; devices of one container joined by ``:`` with a trailing ``:``; a device is
``UUID,NVIDIA,usedMem,usedCores`` with memory in plugin units (MiB / gpuMemoryFactor). MIG devices
carry the instance as ``UUID[<group>-<position>]``. Decoding accepts a trailing ``;`` and is used
to adopt pods bound before our ledger knew them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from vgpu_guard.engine.annotations import (
    ALLOCATION,
    BIND_PHASE,
    BIND_TIME,
    DEVICES_TO_ALLOCATE,
    VGPU_IDS,
    VGPU_NODE,
    VGPU_TIME,
)
from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.config import NvidiaConfig
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, MigSlot
from vgpu_guard.engine.mig import geometries_for
from vgpu_guard.engine.mig_placement import group_layout
from vgpu_guard.engine.pod_request import PodRequest
from vgpu_guard.engine.untrusted import plain_int

__all__ = [
    "AssignmentError",
    "DecodedDevice",
    "adopted_allocation",
    "allocation_annotations",
    "decode_assignment",
    "encode_assignment",
]

_MIG_ID = re.compile(r"^(?P<uuid>[^\[\]]+)\[(?P<group>[^\[\]-]+)-(?P<position>[0-9]{1,9})\]$")


class AssignmentError(ValueError):
    """Raised when an assignment annotation does not follow the plugin's format."""


@dataclass(frozen=True, slots=True)
class DecodedDevice:
    """One device of an assignment annotation; ``memory`` in plugin units."""

    uuid: str
    type: str
    memory: int
    cores: int
    mig_group: str | None = None
    mig_position: int | None = None


def encode_assignment(containers: Sequence[ContainerGrant], *, memory_factor: int = 1) -> str:
    """The annotation value for the containers' grants (already in container order)."""
    parts = []
    for container in containers:
        devices = ""
        for d in container.devices:
            uuid = d.uuid if d.mig is None else f"{d.uuid}[{d.mig.group}-{d.mig.position}]"
            devices += f"{uuid},NVIDIA,{d.memory // memory_factor},{d.cores}:"
        parts.append(devices)
    return ";".join(parts)


def decode_assignment(raw: str) -> list[list[DecodedDevice]]:
    """Parse an assignment; raises ``AssignmentError`` quoting the bad part."""
    containers: list[list[DecodedDevice]] = []
    text = raw.strip()
    if text.endswith(";"):
        text = text[:-1]
    if not text:
        return containers
    for part in text.split(";"):
        devices: list[DecodedDevice] = []
        for record in part.split(":"):
            if not record.strip():
                continue
            fields = [f.strip() for f in record.split(",")]
            memory, cores = (plain_int(fields[2]), plain_int(fields[3])) if len(fields) == 4 else (None, None)
            if memory is None or cores is None:
                raise AssignmentError(
                    f"device {record[:80]!r} is not UUID,TYPE,memory,cores with integer memory and cores"
                )
            uuid, group, position = fields[0], None, None
            if "[" in uuid or "]" in uuid:
                match = _MIG_ID.match(uuid)
                if match is None:
                    raise AssignmentError(f"MIG device id {uuid!r} is not UUID[<group>-<position>]")
                uuid, group, position = match["uuid"], match["group"], int(match["position"])
            devices.append(
                DecodedDevice(
                    uuid=uuid,
                    type=fields[1],
                    memory=memory,
                    cores=cores,
                    mig_group=group,
                    mig_position=position,
                )
            )
        containers.append(devices)
    return containers


def allocation_annotations(
    allocation: Allocation, *, node: str, now: int, memory_factor: int = 1
) -> dict[str, str]:
    """The annotations that go on the Binding with the node, so both land together.

    ``vgpu-time`` is the bind time: the plugin serves the oldest ``allocating`` pod of a node first,
    and the controller keeps at most one pod per node in that phase.
    """
    value = encode_assignment(allocation.containers, memory_factor=memory_factor)
    return {
        VGPU_NODE: node,
        VGPU_TIME: str(now),
        VGPU_IDS: value,
        DEVICES_TO_ALLOCATE: value,
        BIND_PHASE: "allocating",
        BIND_TIME: str(now),
        ALLOCATION: f"{node}/{allocation.pod_uid}",
    }


def adopted_allocation(
    pod: PodRequest, raw: str, *, queue: str, node: NodeInfo | None, nvidia: NvidiaConfig
) -> Allocation:
    """The ledger entry of a pod bound with assignment ``raw`` before our ledger knew it.

    Containers are matched in order to the pod's vGPU containers (the plugin's own rule). MIG
    instances get their profile and slices from the card's geometry group when the card and the
    group are known; otherwise the entry keeps group and position only. Raises
    ``AssignmentError`` when the annotation does not parse or names more containers than the pod has.
    """
    decoded = decode_assignment(raw)
    if len(decoded) > len(pod.containers):
        raise AssignmentError(
            f"assignment lists {len(decoded)} containers, the pod has {len(pod.containers)} vGPU containers"
        )
    factor = nvidia.gpu_memory_factor
    containers = []
    for request, devices in zip(pod.containers, decoded, strict=False):
        grants = []
        for d in devices:
            mig = None
            memory = d.memory * factor
            if d.mig_group is not None and d.mig_position is not None:
                mig = MigSlot(group=d.mig_group, profile="", position=d.mig_position)
                types = {g.uuid: g.type for g in node.gpus} if node is not None else {}
                entry = geometries_for(types.get(d.uuid, ""), nvidia.known_mig_geometries)
                group = (
                    next((g for g in entry.allowed_geometries if g.group == d.mig_group), None)
                    if entry
                    else None
                )
                if group is not None and d.mig_position < sum(g.count for g in group.geometries):
                    slot = group_layout(types[d.uuid], group)[d.mig_position]
                    if slot is not None:
                        mig = MigSlot(d.mig_group, slot.profile, d.mig_position, slot.start, slot.size)
                        memory = slot.memory
            grants.append(DeviceGrant(uuid=d.uuid, memory=memory, cores=d.cores, mig=mig))
        containers.append(ContainerGrant(index=request.index, name=request.name, devices=tuple(grants)))
    return Allocation(
        pod_uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        queue=queue,
        containers=tuple(containers),
        group=pod.group,
        adopted=True,
        committed=True,
    )
