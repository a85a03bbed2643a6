"""Two vGPU containers of one pod that Volcano may put on one GPU, whose use it then counts once.

Volcano's device choice (pkg/scheduler/api/devices/nvidia/vgpu/utils.go
``checkNodeGPUSharingPredicateAndScore``, v1.10.0 to v1.15.1) fits a pod's ``spec.containers`` in
order on one snapshot: each container's card is charged (inline in v1.10-v1.11, by
``Sharing.TryAddPod`` from v1.12) before the next container is fitted, and no check keeps the next
one off a card an earlier one took. So two containers land on one card whenever it holds both: a
free split slot each, memory for both, cores summing to at most 100 and neither exclusive (100
cores wants an empty card; 0 cores is refused on a card at 100).

Its cache may then count that card once per pod. From v1.12.0 ``GPUDevices.addResource``
(device_info.go) hands each container's device to ``Sharing.AddPod``, and MIG's ``AddPod`` (mig.go
``MIGFactory``) in every release, hami-core's (hamicore.go ``HAMICoreFactory``) in v1.12.x and from
v1.15.0, return at once when the pod's UID is already in the card's ``PodMap``: the second
container's memory, cores and slot (in MIG mode its instance) are not counted. v1.10-v1.11
``AddResource`` and v1.13-v1.14's hami-core ``AddPod`` charged every container. The ledger counts
both, which is what the device plugin hands out, so the arbiter refuses the pods Volcano then sends
to the card it thinks free, session after session.

The webhook does not know Volcano's release, so the pod is warned on every release. It is warned
only when some card of the cluster, empty, takes two of its containers under Volcano's per-card
checks (``card_fit.fit``, with the first one's grant charged as Volcano charges it): a pod whose
containers cannot share a card (exclusive cores, cores over 100 together, memory beyond every
card) is placed on separate cards and counted right.

Cost: cards differing only in UUID fit alike, so the fleet is judged by its distinct kinds of
card, found once per fleet of nodes (``_kinds``: 40,000 cards of 5,000 nodes are read in a few
ms, then every later pod judged against that view pays for the handful of kinds only). A pod that
names card UUIDs (``volcano.sh/vgpu-use-gpuuuid``, ``vgpu-nouse-gpuuuid``: rare) walks the fleet to judge
the named cards apart from the kinds.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from vgpu_guard.engine.card_fit import Delta, fit
from vgpu_guard.engine.card_index import Card
from vgpu_guard.engine.cluster import ClusterView, FleetFacts
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.devices import GpuDevice, Mode
from vgpu_guard.engine.ledger import DeviceGrant
from vgpu_guard.engine.mig import geometries_for
from vgpu_guard.engine.pod_request import ContainerRequest, PodRequest, PodRequestError, pod_request

__all__ = ["shared_card_pair"]

# A kind of card: what Volcano's per-card checks read of it (type, memory, split count, its mode)
# and the mode of its node, which a pod's vgpu-mode is matched against. Unhealthy cards fit nothing.
_Kind = tuple[str, int, int, Mode, Mode | None]
_Representatives = Mapping[_Kind, tuple[str, GpuDevice]]


@dataclass(slots=True)
class _Memo:
    """The kinds of the last fleet asked about, keyed by the view's ``FleetFacts``: the webhook's
    cache hands the same facts object to every view of the same nodes (kube/view_cache.py), so a
    ledger or PodGroup change, or a Node heartbeat, does not make the next review walk the fleet
    again; a weak reference, so facts the webhook dropped are not kept alive for it."""

    fleet: weakref.ref[FleetFacts] | None = None
    kinds: _Representatives = field(default_factory=dict)


_LAST = _Memo()


def _kinds(view: ClusterView) -> _Representatives:
    """One (node, card) per kind of healthy card in the view, computed once per fleet."""
    fleet = view.facts
    if _LAST.fleet is not None and _LAST.fleet() is fleet:
        return _LAST.kinds
    kinds: dict[_Kind, tuple[str, GpuDevice]] = {
        (gpu.type, gpu.memory, gpu.split_count, gpu.mode, node.mode): (node.name, gpu)
        for node in view.gpu_nodes
        for gpu in node.gpus
        if gpu.healthy
    }
    _LAST.fleet, _LAST.kinds = weakref.ref(fleet), kinds
    return kinds


def _candidates(pod: PodRequest, view: ClusterView) -> Iterator[tuple[str, GpuDevice]]:
    """The cards to judge: one per kind; when the pod names UUIDs, the named cards apart (the
    fleet is walked for them: no index of cards by UUID is kept)."""
    if pod.use_uuids is None and not pod.nouse_uuids:
        for (*_, node_mode), representative in _kinds(view).items():
            if pod.mode is None or node_mode == pod.mode:
                yield representative
        return
    named = (pod.use_uuids or frozenset()) | pod.nouse_uuids
    seen: dict[tuple[_Kind, str], tuple[str, GpuDevice]] = {}
    for node in view.gpu_nodes:
        if pod.mode is None or node.mode == pod.mode:
            for gpu in node.gpus:
                kind = (gpu.type, gpu.memory, gpu.split_count, gpu.mode, node.mode)
                if gpu.healthy:
                    seen.setdefault((kind, gpu.uuid if gpu.uuid in named else ""), (node.name, gpu))
    yield from seen.values()


def _empty(node: str, gpu: GpuDevice, config: GuardConfig) -> Card:
    """The card with nothing on it, as the allocator's index builds it (card_index ``_cards_of``)."""
    nvidia = config.nvidia
    mig = geometries_for(gpu.type, nvidia.known_mig_geometries) if gpu.mode == "mig" else None
    return Card(node=node, device=gpu, capacity=gpu.memory * nvidia.gpu_memory_factor, mig=mig)


def _both_fit(
    pod: PodRequest, first: ContainerRequest, second: ContainerRequest, card: Card, factor: int
) -> bool:
    """Whether Volcano's checks put ``second`` on the card ``first`` was just given."""
    none: frozenset[str] = frozenset()
    grant = fit(pod, first, card, None, members=none, factor=factor)
    if not isinstance(grant, DeviceGrant):
        return False
    charged = Delta()
    charged.add(grant)
    return isinstance(fit(pod, second, card, charged, members=none, factor=factor), DeviceGrant)


def shared_card_pair(
    pod: Mapping[str, Any], view: ClusterView, config: GuardConfig
) -> tuple[str, str] | None:
    """The names of the first two containers (in Volcano's order) that may share a card, or None.

    A pod whose request does not parse is left to validation, which reports it."""
    try:
        request = pod_request(pod, config.nvidia)
    except PodRequestError:
        return None
    if request is None or len(request.containers) < 2:
        return None
    cards = [_empty(node, gpu, config) for node, gpu in _candidates(request, view)]
    factor = config.nvidia.gpu_memory_factor
    for first, second in combinations(request.containers, 2):
        if any(_both_fit(request, first, second, card, factor) for card in cards):
            return first.name, second.name
    return None
