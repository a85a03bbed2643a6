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
from vgpu_guard.engine.ledger import Allocation, ContainerGrant

__all__ = [
    "AssignmentError",
    "DecodedDevice",
    "allocation_annotations",
    "decode_assignment",
    "encode_assignment",
]

_MIG_ID = re.compile(r"^(?P<uuid>[^\[\]]+)\[(?P<group>[^\[\]-]+)-(?P<position>\d+)\]$")


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
            if len(fields) != 4 or not fields[2].isdigit() or not fields[3].isdigit():
                raise AssignmentError(
                    f"device {record[:80]!r} is not UUID,TYPE,memory,cores with integer memory and cores"
                )
            uuid, group, position = fields[0], None, None
            match = _MIG_ID.match(uuid)
            if match is not None:
                uuid, group, position = match["uuid"], match["group"], int(match["position"])
            elif "[" in uuid:
                raise AssignmentError(f"MIG device id {uuid!r} is not UUID[<group>-<position>]")
            devices.append(
                DecodedDevice(
                    uuid=uuid,
                    type=fields[1],
                    memory=int(fields[2]),
                    cores=int(fields[3]),
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
