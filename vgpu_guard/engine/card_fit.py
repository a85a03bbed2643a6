"""One container on one card: the grant, or the first of Volcano's per-card checks that fails.

Volcano's deviceshare plugin checks a card in this order (pkg/scheduler/api/devices/nvidia/vgpu/
utils.go, ``checkNodeGPUSharingPredicateAndScore``; ../../docs/scheduling.md and design/ledger.md):
uuid use/nouse (deny wins), healthy, registered once (not Volcano's: engine/devices.py says why a UUID
registered twice takes no new assignment), a free split slot, for a pod with
``volcano.sh/vgpu-podgroup-policy: spread`` no other member of its PodGroup on the card
(``deviceHasPodFromSameGroup``), free memory, cores <= 100, a 100-core request needs an empty card,
a 0-core request is refused on a card at 100 cores, type NVIDIA and use/nouse-gputype, then for
MIG cards a free instance of the card's geometry group (first group in config order on an empty
card, smallest fitting instance) laid out on NVIDIA's legal placements (``mig_placement``).
The first failing check is the reason the user reads, so the order is kept exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from vgpu_guard.engine.card_index import Card
from vgpu_guard.engine.config import MigGeometryGroup
from vgpu_guard.engine.ledger import DeviceGrant, MigSlot
from vgpu_guard.engine.mig_placement import group_layout
from vgpu_guard.engine.placement_reason import CardFailure
from vgpu_guard.engine.pod_request import ContainerRequest, PodRequest

__all__ = ["Delta", "fit"]


@dataclass(slots=True)
class Delta:
    """Grants decided for earlier containers of the same pod, not yet applied to the card."""

    memory: int = 0
    cores: int = 0
    grants: int = 0
    mig_group: str | None = None
    mig_positions: set[int] = field(default_factory=set)

    def add(self, grant: DeviceGrant) -> None:
        """Count ``grant`` so the pod's next container sees the card as it would be."""
        self.memory += grant.memory
        self.cores += grant.cores
        self.grants += 1
        if grant.mig is not None:
            self.mig_group = grant.mig.group
            self.mig_positions.add(grant.mig.position)


def _fit_mig(card: Card, need: int, free: int, delta: Delta | None) -> MigSlot | None:
    """A free instance of at least ``need`` MiB in the card's geometry group (any group on an empty
    card, the first one in config order with an instance that fits), the smallest first."""
    assert card.mig is not None
    in_use = card.mig_group or (delta.mig_group if delta is not None else None)
    used = set(card.mig_used) | (delta.mig_positions if delta is not None else set())
    groups: Sequence[MigGeometryGroup] = card.mig.allowed_geometries
    if in_use is not None:
        groups = [g for g in groups if g.group == in_use]
    for group in groups:
        layout = group_layout(card.device.type, group)
        base, bases = 0, []
        for geometry in group.geometries:
            bases.append(base)
            base += geometry.count
        order = sorted(range(len(group.geometries)), key=lambda i: group.geometries[i].memory)
        for gi in order:
            geometry = group.geometries[gi]
            if geometry.memory < need:
                continue
            for position in range(bases[gi], bases[gi] + geometry.count):
                slot = layout[position]
                if slot is not None and position not in used and geometry.memory <= free:
                    return MigSlot(
                        group=group.group,
                        profile=geometry.name,
                        position=position,
                        start=slot.start,
                        size=slot.size,
                    )
        if in_use is None and any(g.memory >= need for g in group.geometries):
            # Volcano: on an empty card the first group with an instance that fits wins.
            return None
    return None


def _mig_grant(
    card: Card, request: ContainerRequest, need: int, free: int, delta: Delta | None
) -> DeviceGrant | CardFailure:
    """The MIG instance's grant: the instance's whole memory, as the device plugin hands it out."""
    assert card.mig is not None
    slot = _fit_mig(card, need, free, delta)
    if slot is None:
        return CardFailure("mig", need=need, detail=f">= {need} MiB")
    memory = next(
        g.memory
        for group in card.mig.allowed_geometries
        if group.group == slot.group
        for g in group.geometries
        if g.name == slot.profile
    )
    return DeviceGrant(uuid=card.device.uuid, memory=memory, cores=request.cores, mig=slot)


def fit(
    pod: PodRequest,
    request: ContainerRequest,
    card: Card,
    delta: Delta | None,
    *,
    members: frozenset[str],
    factor: int,
) -> DeviceGrant | CardFailure:
    """One container on one card: the grant, or the first check that fails, in Volcano's order.

    ``members`` are the node's cards that other members of the pod's PodGroup hold (empty unless
    the pod asks for Volcano's PodGroup spread); ``factor`` is the memory unit (gpu_memory_factor).
    """
    gpu = card.device
    if gpu.uuid in pod.nouse_uuids:
        return CardFailure("uuid-nouse")
    if pod.use_uuids is not None and gpu.uuid not in pod.use_uuids:
        return CardFailure("uuid-use")
    if not gpu.healthy:
        return CardFailure("unhealthy")
    if gpu.unusable is not None:
        return CardFailure("registered-twice", card=gpu.uuid)
    d_mem, d_cores, d_grants = (delta.memory, delta.cores, delta.grants) if delta else (0, 0, 0)
    grants = card.grants + d_grants
    if grants >= gpu.split_count:
        return CardFailure("split")
    if gpu.uuid in members:
        return CardFailure("podgroup", detail=f"{pod.namespace}/{pod.group}", card=gpu.uuid)
    free = card.free - d_mem
    need = request.memory_on(gpu.memory, factor)
    if free < need:
        return CardFailure("memory", free=max(free, 0), need=need)
    cores = card.used_cores + d_cores
    # Volcano checks the sum first; asking "is it shared" first gives the clearer reason.
    if request.cores == 100 and grants > 0:
        return CardFailure("exclusive", card=gpu.uuid)
    if cores + request.cores > 100:
        return CardFailure("cores", detail=str(request.cores))
    if cores >= 100 and request.cores == 0:
        return CardFailure("cores-full", card=gpu.uuid)
    if "NVIDIA" not in gpu.type:
        return CardFailure("type")
    upper = gpu.type.upper()
    if pod.use_types and not any(t.upper() in upper for t in pod.use_types):
        return CardFailure("use-type", detail=",".join(pod.use_types))
    if not pod.use_types and any(t.upper() in upper for t in pod.nouse_types):
        return CardFailure("nouse-type", detail=",".join(pod.nouse_types))
    if card.mig is not None:
        return _mig_grant(card, request, need, free, delta)
    return DeviceGrant(uuid=gpu.uuid, memory=need, cores=request.cores)
