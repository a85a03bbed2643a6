"""The device assignment in the plugin's exact wire format, both ways.

``volcano.sh/vgpu-ids-new`` and ``volcano.sh/devices-to-allocate``: one entry per vGPU container
(in ``spec.containers`` order, containers without vGPU skipped, as Volcano's deviceshare does),
entries joined by ``;``; devices of one container joined by ``:`` with a trailing ``:``; a device is
``UUID,NVIDIA,usedMem,usedCores`` with memory in plugin units (MiB / gpuMemoryFactor). MIG devices
carry the instance as ``UUID[<group>-<position>]``. Decoding accepts a trailing ``;`` and is used
to adopt pods bound before our ledger knew them, and to verify ledger entries against the bound
pods' annotations (``held_exactly``, ``hold_larger``). Like the plugin, decoding keeps every valid
device of an annotation with a malformed one (``decode_assignment_entries``): a pod that holds
devices is never taken to hold none.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

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
from vgpu_guard.engine.untrusted import MAX_GPU_MEMORY_MIB, plain_int

__all__ = [
    "Adoption",
    "AssignmentError",
    "DecodedAssignment",
    "DecodedDevice",
    "adopted_allocation",
    "allocation_annotations",
    "assignment_annotations",
    "decode_assignment",
    "decode_assignment_entries",
    "encode_assignment",
    "held_exactly",
    "held_less",
    "hold_larger",
]

_MAX_CORES = 100
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


@dataclass(frozen=True, slots=True)
class DecodedAssignment:
    """An assignment decoded entry by entry, as the device plugin reads it.

    ``containers`` holds the valid devices of each container (a container whose every device is
    malformed is an empty list, so positions still match the pod's vGPU containers); ``invalid``
    names each skipped device, with its container's position (1-based), for the operator.
    """

    containers: list[list[DecodedDevice]]
    invalid: list[str]


def _decode_device(record: str) -> DecodedDevice | str:
    """One ``UUID,TYPE,memory,cores`` record, or the reason it is not one (cores not yet capped)."""
    fields = [f.strip() for f in record.split(",")]
    memory, cores = (plain_int(fields[2]), plain_int(fields[3])) if len(fields) == 4 else (None, None)
    if memory is None or cores is None:
        return f"device {record[:80]!r} is not UUID,TYPE,memory,cores with integer memory and cores"
    if memory > MAX_GPU_MEMORY_MIB:
        most = MAX_GPU_MEMORY_MIB
        return f"device {record[:80]!r} claims {memory} MiB, more than any GPU has (at most {most})"
    uuid, group, position = fields[0], None, None
    if not uuid:
        return f"device {record[:80]!r} has an empty UUID"
    if "[" in uuid or "]" in uuid:
        match = _MIG_ID.match(uuid)
        if match is None:
            return f"MIG device id {uuid[:80]!r} is not UUID[<group>-<position>]"
        uuid, group, position = match["uuid"], match["group"], int(match["position"])
    return DecodedDevice(
        uuid=uuid, type=fields[1], memory=memory, cores=cores, mig_group=group, mig_position=position
    )


def decode_assignment_entries(raw: str) -> DecodedAssignment:
    """Parse an assignment keeping every valid device and naming every invalid one.

    The device plugin decodes entry by entry and hands out the valid devices; a pod whose
    annotation has one malformed device still holds the others, so the ledger must hold them too.
    """
    containers: list[list[DecodedDevice]] = []
    invalid: list[str] = []
    text = raw.strip()
    if text.endswith(";"):
        text = text[:-1]
    if not text:
        return DecodedAssignment(containers, invalid)
    for position, part in enumerate(text.split(";"), start=1):
        devices: list[DecodedDevice] = []
        for record in part.split(":"):
            if not record.strip():
                continue
            decoded = _decode_device(record)
            if isinstance(decoded, str):
                invalid.append(f"container {position}: {decoded}")
                continue
            if decoded.cores > _MAX_CORES:
                # More than a whole card: hold the whole card (the ledger cannot record more).
                invalid.append(
                    f"container {position}: device {decoded.uuid!r} has {decoded.cores}% cores, "
                    f"held as {_MAX_CORES}%"
                )
                decoded = replace(decoded, cores=_MAX_CORES)
            devices.append(decoded)
        containers.append(devices)
    return DecodedAssignment(containers, invalid)


def decode_assignment(raw: str) -> list[list[DecodedDevice]]:
    """Parse an assignment strictly; raises ``AssignmentError`` quoting the first bad part."""
    decoded = decode_assignment_entries(raw)
    if decoded.invalid:
        raise AssignmentError(decoded.invalid[0])
    return decoded.containers


def assignment_annotations(node: str, ids: str, now: int) -> dict[str, str]:
    """The annotations an allocator writes with an assignment ``ids`` (``vgpu-ids-new``'s value):
    Volcano's AllocateFunc (pkg/scheduler/api/devices/nvidia/vgpu/device_info.go) and ours alike."""
    return {
        VGPU_NODE: node,
        VGPU_TIME: str(now),
        VGPU_IDS: ids,
        DEVICES_TO_ALLOCATE: ids,
        BIND_PHASE: "allocating",
        BIND_TIME: str(now),
    }


def allocation_annotations(
    allocation: Allocation, *, node: str, now: int, memory_factor: int = 1
) -> dict[str, str]:
    """The annotations that go on the Binding with the node, so both land together.

    ``vgpu-time`` is the bind time: the plugin serves the oldest ``allocating`` pod of a node first,
    and the controller keeps at most one pod per node in that phase.
    """
    value = encode_assignment(allocation.containers, memory_factor=memory_factor)
    return {**assignment_annotations(node, value, now), ALLOCATION: f"{node}/{allocation.pod_uid}"}


@dataclass(frozen=True, slots=True)
class Adoption:
    """The ledger entry for a bound pod's assignment, and the entries the plugin skips."""

    allocation: Allocation
    invalid: list[str]


def adopted_allocation(
    pod: PodRequest, raw: str, *, queue: str, node: NodeInfo | None, nvidia: NvidiaConfig
) -> Adoption:
    """The ledger entry of a pod bound with assignment ``raw`` before our ledger knew it.

    Containers are matched in order to the pod's vGPU containers (the plugin's own rule). MIG
    instances get their profile and slices from the card's geometry group when the card and the
    group are known; otherwise the entry keeps group and position only. Valid devices are always
    adopted; malformed devices, and containers beyond the pod's vGPU containers (the plugin never
    hands those out), are returned in ``invalid`` for the caller to report.
    """
    entries = decode_assignment_entries(raw)
    decoded, invalid = entries.containers, list(entries.invalid)
    if len(decoded) > len(pod.containers):
        invalid.append(
            f"the assignment lists {len(decoded)} containers, the pod has {len(pod.containers)} vGPU "
            f"containers; the device plugin never hands out the entries after container {len(pod.containers)}"
        )
    factor = nvidia.gpu_memory_factor
    containers = []
    for request, devices in zip(pod.containers, decoded, strict=False):
        grants = []
        for d in devices:
            mig = None
            memory = d.memory * factor
            if memory > MAX_GPU_MEMORY_MIB:
                invalid.append(
                    f"device {d.uuid!r} claims {memory} MiB (x gpuMemoryFactor {factor}), more than any GPU "
                    f"has (at most {MAX_GPU_MEMORY_MIB})"
                )
                continue
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
        if grants:  # a container whose every device is malformed holds nothing the plugin hands out
            containers.append(ContainerGrant(index=request.index, name=request.name, devices=tuple(grants)))
    allocation = Allocation(
        pod_uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        queue=queue,
        containers=tuple(containers),
        group=pod.group,
        adopted=True,
        committed=True,
    )
    return Adoption(allocation, invalid)


def hold_larger(
    entry: Allocation, decoded: Sequence[Sequence[DecodedDevice]], *, memory_factor: int = 1
) -> tuple[Allocation, list[str]]:
    """The entry raised to hold at least what the pod's assignment says, and what was raised.

    The safe side of a disagreement between the ledger and the bound pod's annotation: per device,
    the larger memory and the larger cores of the two; a device the annotation names and the entry
    lacks is added to the container at the same position (the last one when the annotation lists
    more). Nothing is ever lowered. Returns the entry unchanged and no findings when it already
    holds everything the annotation claims.
    """
    containers = [list(c.devices) for c in entry.containers]
    if not containers and any(decoded):
        containers = [[]]
    findings: list[str] = []
    for position, devices in enumerate(decoded):
        target = containers[min(position, len(containers) - 1)] if containers else []
        for d in devices:
            _raise_device(target, d, memory_factor, findings)
    if not findings:
        return entry, []
    return _with_devices(entry, containers), findings


def _raise_device(
    target: list[DeviceGrant], d: DecodedDevice, memory_factor: int, findings: list[str]
) -> None:
    """Make the container's grants ``target`` hold at least device ``d`` of the annotation: added
    when missing, raised (never lowered) when below; each change goes into ``findings``."""
    memory = d.memory * memory_factor
    if memory > MAX_GPU_MEMORY_MIB:
        return  # more than any GPU has: reported by the decoder's caller, never held
    at = next((i for i, g in enumerate(target) if g.uuid == d.uuid), None)
    if at is None:
        target.append(_new_grant(d, memory, findings))
        return
    grant = target[at]
    if _same_mig_instance(grant, d):
        memory = grant.memory
    if memory > grant.memory or d.cores > grant.cores:
        findings.append(
            f"{d.uuid}: ledger {grant.memory} MiB/{grant.cores}% < assignment {memory} MiB/{d.cores}%"
        )
        target[at] = DeviceGrant(
            uuid=grant.uuid,
            memory=max(memory, grant.memory),
            cores=max(d.cores, grant.cores),
            mig=grant.mig,
        )


def _new_grant(d: DecodedDevice, memory: int, findings: list[str]) -> DeviceGrant:
    """A device the annotation names and the entry lacks, added (its MIG instance as decoded)."""
    mig = (
        MigSlot(group=d.mig_group, profile="", position=d.mig_position)
        if d.mig_group is not None and d.mig_position is not None
        else None
    )
    findings.append(f"{d.uuid}: ledger none < assignment {memory} MiB/{d.cores}%")
    return DeviceGrant(uuid=d.uuid, memory=memory, cores=d.cores, mig=mig)


def _with_devices(entry: Allocation, devices: Sequence[Sequence[DeviceGrant]]) -> Allocation:
    """``entry`` holding ``devices`` per container, at the same positions (one unnamed container
    when the entry had none)."""
    if entry.containers:
        grants = tuple(
            ContainerGrant(index=c.index, name=c.name, devices=tuple(held))
            for c, held in zip(entry.containers, devices, strict=True)
        )
    else:
        grants = (ContainerGrant(index=0, name="", devices=tuple(devices[0])),)
    return replace(entry, containers=grants)


def _same_mig_instance(grant: DeviceGrant, d: DecodedDevice) -> bool:
    """The annotation names the MIG instance the entry holds: its slices are what is held, and the
    annotation may carry the configured template memory, larger than the real slice (mig-profiles.md)."""
    return (
        grant.mig is not None
        and bool(grant.mig.profile)
        and (grant.mig.group, grant.mig.position) == (d.mig_group, d.mig_position)
    )


def _exact_device(
    held: Sequence[DeviceGrant], d: DecodedDevice, memory_factor: int, findings: list[str]
) -> DeviceGrant:
    """The grant that holds exactly device ``d`` of the annotation (the entry's own when equal)."""
    memory = d.memory * memory_factor
    grant = next((g for g in held if g.uuid == d.uuid), None)
    if grant is None:
        return _new_grant(d, memory, findings)
    if _same_mig_instance(grant, d):
        memory = grant.memory
    if (memory, d.cores) == (grant.memory, grant.cores):
        return grant
    # "<": the ledger held less than the pod is handed (the unsafe side); ">": only more.
    side = "<" if memory > grant.memory or d.cores > grant.cores else ">"
    findings.append(
        f"{d.uuid}: ledger {grant.memory} MiB/{grant.cores}% {side} assignment {memory} MiB/{d.cores}%"
    )
    return DeviceGrant(uuid=grant.uuid, memory=memory, cores=d.cores, mig=grant.mig)


def held_less(finding: str) -> bool:
    """A finding of ``held_exactly``/``hold_larger`` where the ledger held less than the pod is
    handed (raised: the unsafe side), not only more (lowered or dropped)."""
    return " < assignment " in finding


def held_exactly(
    entry: Allocation, decoded: Sequence[Sequence[DecodedDevice]], *, memory_factor: int = 1
) -> tuple[Allocation, list[str]]:
    """The entry of a bound pod made to hold exactly what its assignment hands out, and what changed.

    A bound pod's annotation is final (the arbiter replaces the entry when a writer changes it), and
    it is what the device plugin hands out: an entry that holds more (a second Binding admitted
    beside the one that landed, a write that moved the pod to another GPU) keeps cards from pods
    that fit, for as long as the pod runs. So devices are raised, lowered, added and dropped to the
    annotation, container by container at the same position (the last one when the annotation
    lists more). Only for a fully decoded annotation: one with a malformed device is held larger
    (``hold_larger``), since what cannot be read is not given up. A known MIG instance keeps its
    slices whatever memory the annotation says. Unchanged when the entry already is the annotation.
    """
    if any(d.memory * memory_factor > MAX_GPU_MEMORY_MIB for devices in decoded for d in devices):
        return hold_larger(entry, decoded, memory_factor=memory_factor)
    held = [list(c.devices) for c in entry.containers] or [[]]
    wanted: list[list[DeviceGrant]] = [[] for _ in held]
    findings: list[str] = []
    for position, devices in enumerate(decoded):
        at = min(position, len(held) - 1)
        wanted[at].extend(_exact_device(held[at], d, memory_factor, findings) for d in devices)
    for before, after in zip(held, wanted, strict=True):
        kept = {g.uuid for g in after}
        findings.extend(
            f"{g.uuid}: ledger {g.memory} MiB/{g.cores}% > assignment none"
            for g in before
            if g.uuid not in kept
        )
    if not findings:
        return entry, []
    return _with_devices(entry, wanted), findings
