"""Placement of a pod, or of a whole gang, against one consistent snapshot of the cluster's GPUs.

The snapshot is a ``ClusterView`` (nodes and their registered GPUs, queues, podgroups), the
ledgers (what every GPU already holds) and the count of whole-card ``nvidia.com/gpu`` pods per
node (Volcano #4712: they share the same physical cards, so that many cards must stay empty).

Rules, in Volcano's order (../../docs/design/ledger.md and device-plugin-formats.md):
- node: has vGPU devices, then the filter plugins (``scheduling.framework``: Ready, not cordoned,
  nodeSelector and required node affinity, taints tolerated, and with the pods on the nodes
  kube-scheduler's other filters), mode equal to the pod's ``volcano.sh/vgpu-mode``, enough cards;
- card: uuid use/nouse (deny wins), healthy, a free split slot, for a pod with
  ``volcano.sh/vgpu-podgroup-policy: spread`` no other member of its PodGroup on the card (Volcano's
  ``deviceHasPodFromSameGroup``), free memory, cores <= 100, a
  100-core request needs an empty card, a 0-core request is refused on a card at 100 cores, type
  NVIDIA and use/nouse-gputype, then for MIG cards a free instance of the card's geometry group
  (first group in config order on an empty card, smallest fitting instance) laid out on NVIDIA's
  legal placements so instances never overlap (``mig_placement``);
- per container ``count`` distinct cards on one node; all containers of a pod on that node;
- queue: Open, and its ``capability`` for the vGPU resources not exceeded.

Choice: one order of cards drives both the node and the card choice. binpack (default) takes the
tightest fit, the card with the least free memory that fits (then node name, then card index);
spread the loosest. A node's rank is the rank of the best card it would give the first container.

Efficiency: cards sit in a sorted index keyed by that order (per mode), so a search visits only
cards with enough free memory, in preference order, and stops as soon as no later card can beat
the best node found. ``search="scan"`` evaluates every node instead: the reference implementation,
used as the test oracle and the benchmark baseline. Both share the per-card and per-node checks,
so they can only differ in the search itself; a property test holds them equal.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from vgpu_guard.engine.cluster import ClusterView, NodeInfo
from vgpu_guard.engine.config import GuardConfig, MigGeometryGroup, MigModelGeometries
from vgpu_guard.engine.devices import GpuDevice
from vgpu_guard.engine.equivalence import equivalence_class
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, MigSlot, NodeLedger
from vgpu_guard.engine.mig import geometries_for
from vgpu_guard.engine.mig_placement import group_layout
from vgpu_guard.engine.placement_reason import CardFailure, NodeFailure, judged_after, unavailable_message
from vgpu_guard.engine.pod_request import ContainerRequest, PodRequest
from vgpu_guard.engine.quantity import QuantityError, parse_quantity
from vgpu_guard.engine.scheduling import Framework, PodCycle, Workloads, unsupported_message
from vgpu_guard.engine.scheduling.plugins import node_affinity

__all__ = [
    "Allocator",
    "GangOutcome",
    "Placement",
    "Policy",
    "Search",
    "Unplaceable",
    "pod_queue",
]

Policy = Literal["binpack", "spread"]
Search = Literal["indexed", "scan"]
_Key = tuple[int, str, int]
_Order = tuple[int, int, str, int]
# How many more nodes with equally packed cards the indexed search weighs for the cpu/memory
# tie-break once it has a fit (kube-scheduler samples too: percentageOfNodesToScore).
TIE_CANDIDATES = 32
# Remembered node verdicts (equivalence class x node) before the memo starts over: a few classes
# over thousands of nodes fit; a stream of one-off classes cannot grow it without bound.
MEMO_LIMIT = 100_000
# A node's rank and grants for a pod, or None where the pod does not fit.
_Verdict = tuple[_Order, tuple[ContainerGrant, ...]] | None


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod goes and what it holds there (not yet in any ledger until committed)."""

    pod: PodRequest
    node: str
    allocation: Allocation


@dataclass(frozen=True, slots=True)
class Unplaceable:
    """Why a pod cannot be placed now; ``message`` is the user-facing condition message."""

    pod: PodRequest
    message: str
    # capacity: no node fits; queue: the queue refuses; gang: the group cannot start together;
    # unsupported: the pod uses what only kube-scheduler evaluates, so it is never bound here.
    cause: Literal["capacity", "queue", "gang", "unsupported"] = "capacity"


@dataclass(frozen=True, slots=True)
class GangOutcome:
    """A gang decision: ``placements`` are committed only when at least minMember can run."""

    placements: tuple[Placement, ...] = ()
    failures: tuple[Unplaceable, ...] = ()
    ok: bool = False
    # Pod UIDs whose earlier reservations were released because the gang cannot start.
    released: tuple[str, ...] = ()


@dataclass(slots=True)
class _Card:
    node: str
    device: GpuDevice
    capacity: int
    mig: MigModelGeometries | None
    used_memory: int = 0
    used_cores: int = 0
    grants: int = 0
    mig_group: str | None = None
    mig_used: dict[int, int] = field(default_factory=dict)
    key: _Key | None = None

    @property
    def free(self) -> int:
        return self.capacity - self.used_memory


@dataclass(slots=True)
class _Node:
    info: NodeInfo
    cards: list[_Card]
    whole_card: int = 0


@dataclass(slots=True)
class _Delta:
    """Grants decided for earlier containers of the same pod, not yet applied to the card."""

    memory: int = 0
    cores: int = 0
    grants: int = 0
    mig_group: str | None = None
    mig_positions: set[int] = field(default_factory=set)


def pod_queue(pod: PodRequest, view: ClusterView) -> tuple[str, bool]:
    """The pod's queue and whether it was named explicitly (PodGroup ``spec.queue`` wins)."""
    if pod.group:
        podgroup = view.podgroups.get((pod.namespace, pod.group))
        spec = podgroup.get("spec") if podgroup is not None else None
        if isinstance(spec, Mapping) and isinstance(spec.get("queue"), str) and spec["queue"]:
            return spec["queue"], True
    if pod.queue:
        return pod.queue, True
    return "default", False


def _queue_vector(containers: Sequence[ContainerGrant], factor: int) -> tuple[int, int, int]:
    grants = [d for c in containers for d in c.devices]
    return (len(grants), sum(d.memory for d in grants) // factor, sum(d.cores for d in grants))


_NO_NODES: frozenset[str] = frozenset()
_NO_GPU = NodeFailure("no-gpu")
_GPU_PROBLEM = NodeFailure("gpu-problem")
_UNMATCHED = node_affinity.SELECTOR
_HELD = NodeFailure("ledger")


def _gpu_failure(info: NodeInfo) -> NodeFailure | None:
    """The node's own GPU checks, which come before any of the pod's. A registration that does not
    parse leaves no cards either: it is counted as the problem it is (the operator can fix it),
    not as a node without GPUs."""
    if info.gpu_problem is not None:
        return _GPU_PROBLEM
    if not info.gpus:
        return _NO_GPU
    return None


class Allocator:
    """Mutable placement state over one snapshot: ``place`` decides, ``commit``/``release`` apply.

    The controller builds one per pass from freshly read ledgers; a property test drives one
    through thousands of commits and releases and checks it against the scan oracle.
    """

    def __init__(
        self,
        view: ClusterView,
        ledgers: Mapping[str, NodeLedger],
        *,
        config: GuardConfig,
        whole_card: Mapping[str, int] | None = None,
        search: Search = "indexed",
        policy: Policy | None = None,
        workloads: Workloads | None = None,
    ) -> None:
        self.view = view
        # The filter plugins: the node's own checks, and kube-scheduler's other filters (resources,
        # ports, pod affinity, spread, volumes) over the pods on each node when ``workloads`` is
        # given (None: GPUs and node labels, cordon and taints only).
        self._workloads = workloads
        self._framework = Framework(view.nodes, workloads)
        # The node's own checks read a pod's node terms alone: pods without facts whose selector,
        # required affinity and tolerations are equal share one cycle (most have none at all).
        self._node_cycles: dict[Hashable, PodCycle] = {}
        # The vGPU resources are judged per GPU first (reasons that name the card and the numbers),
        # then as node sums against allocatable, as the kubelet admits them.
        nvidia = config.nvidia
        self._vgpu_resources = frozenset(
            (nvidia.resource_count_name, nvidia.resource_memory_name, nvidia.resource_core_name,
             nvidia.resource_memory_percentage_name)
        )  # fmt: skip
        self.config = config
        self.search: Search = search
        self.policy: Policy = policy or config.scheduling.policy
        self._factor = config.nvidia.gpu_memory_factor
        self._known = config.nvidia.known_mig_geometries
        self._nodes: dict[str, _Node] = {}
        self._cards: dict[tuple[str, str], _Card] = {}
        self._index: dict[str, list[_Key]] = {"hami-core": [], "mig": []}
        self._ledgers: dict[str, NodeLedger] = dict(ledgers)
        self._where: dict[str, str] = {}
        # Gang members that ask for no vGPU (routing mode routes a gang whole): placed by the node's
        # constraints alone, never in a ledger; their node is kept so the gang's later members see
        # their cpu and memory (``workloads.assume``), and ``release`` can forget them.
        self._plain: dict[str, str] = {}
        self._queue_used: dict[str, list[int]] = {}
        # Nodes whose ledger ``commit``/``release``/``mark_committed`` changed: what a pass writes.
        self.touched: set[str] = set()
        # Nodes whose ledger cannot be written now (node -> why): no new pod is placed there.
        self._held: dict[str, str] = {}
        whole = whole_card or {}
        # Whole-card GPUs by node, kept for nodes not (yet) in the view too: they apply when it joins.
        self._whole: dict[str, int] = dict(whole)
        self._mig_cache: dict[str, MigModelGeometries | None] = {}
        # Per node, moved by every change of its cards, ledger or whole-card count; with the
        # workloads' own per-node epoch it stamps the remembered verdicts (equivalence.py).
        self._epochs: dict[str, int] = {}
        self._classes: dict[Hashable, int] = {}
        self._memo: dict[tuple[int, str], tuple[tuple[int, int], _Verdict]] = {}
        # Node names by label pair: a pod's nodeSelector picks its candidates from here instead of
        # judging every node of the cluster (GPU pools are usually chosen this way).
        self._labelled: dict[tuple[str, str], set[str]] = {}
        for name, info in view.nodes.items():
            self._nodes[name] = _Node(info=info, cards=self._cards_of(info), whole_card=whole.get(name, 0))
            self._label(name, info, add=True)
        self._unit_sizes: list[int] | None = sorted({c.capacity for c in self._cards.values()})
        # Build the index once, sorted, instead of re-sorting it on every ledger entry.
        self._building = True
        for ledger in ledgers.values():
            for allocation in ledger.allocations.values():
                self._apply(ledger.node, allocation, sign=1)
        self._building = False
        for card in self._cards.values():
            if self._eligible(card):
                card.key = self._key(card)
                self._index[self._nodes[card.node].info.mode or "hami-core"].append(card.key)
        for keys in self._index.values():
            keys.sort()

    def _label(self, name: str, info: NodeInfo, *, add: bool) -> None:
        for pair in info.labels.items():
            if add:
                self._labelled.setdefault(pair, set()).add(name)
            else:
                names = self._labelled.get(pair)
                if names is not None:
                    names.discard(name)
                    if not names:
                        del self._labelled[pair]

    def _cards_of(self, info: NodeInfo) -> list[_Card]:
        """The node's cards, registered in ``_cards`` (not yet in the index)."""
        cards: list[_Card] = []
        if not info.vgpu_capable:
            return cards
        for gpu in info.gpus:
            if gpu.type not in self._mig_cache:
                self._mig_cache[gpu.type] = geometries_for(gpu.type, self._known)
            card = _Card(
                node=info.name,
                device=gpu,
                capacity=gpu.memory * self._factor,
                mig=self._mig_cache[gpu.type] if gpu.mode == "mig" else None,
            )
            cards.append(card)
            self._cards[(info.name, gpu.uuid)] = card
        return cards

    # --- keeping a long-lived allocator in step (the controller's incremental passes) -----------
    # Each costs what one node holds, so a pass that saw a few changes pays for those only; the
    # result is the state a fresh ``Allocator`` over the same view and ledgers would have (a
    # property test holds the two equal).

    def set_view(self, view: ClusterView) -> None:
        """Queues, PodGroups and the node count of messages from ``view``; nodes via ``replace_node``."""
        self.view = view
        self._framework.nodes = view.nodes

    def replace_ledger(self, node: str, ledger: NodeLedger | None) -> None:
        """Hold exactly ``ledger``'s entries on ``node`` (None: no ledger) instead of the current ones."""
        held = self._ledgers.get(node)
        if held is not None and ledger is not None and held.allocations == ledger.allocations:
            # The echo of our own write: the same entries are applied already (re-applying them
            # re-sorts each card in the index; at 5,000 nodes that was most of a pass).
            self._ledgers[node] = ledger
            return
        old = self._ledgers.pop(node, None)
        if old is not None:
            for allocation in old.allocations.values():
                self._apply(node, allocation, sign=-1)
        if ledger is not None:
            self._ledgers[node] = ledger
            for allocation in ledger.allocations.values():
                self._apply(node, allocation, sign=1)

    def replace_node(self, name: str, info: NodeInfo | None) -> None:
        """The node re-registered, changed or left: rebuild its cards and apply its ledger again."""
        ledger = self._ledgers.get(name)
        self.replace_ledger(name, None)
        self._epochs[name] = self._epochs.get(name, 0) + 1
        old = self._nodes.pop(name, None)
        if old is not None:
            self._label(name, old.info, add=False)
            for card in old.cards:
                if card.key is not None:
                    keys = self._index[old.info.mode or "hami-core"]
                    i = bisect.bisect_left(keys, card.key)
                    if i < len(keys) and keys[i] == card.key:
                        del keys[i]
                del self._cards[(name, card.device.uuid)]
        if info is not None:
            cards = self._cards_of(info)
            self._nodes[name] = _Node(info=info, cards=cards, whole_card=self._whole.get(name, 0))
            self._label(name, info, add=True)
            for card in cards:
                self._reindex(card)
        self.replace_ledger(name, ledger)
        self._unit_sizes = None  # recomputed on the next search: many nodes may change at once

    def hold_nodes(self, held: Mapping[str, str]) -> None:
        """Place no new pod on these nodes (node -> why): the controller could not write their
        ledger and retries it later. An entry a pod already holds there is kept (``place`` gives
        it back), so a reservation that did reach the ledger is still bound."""
        if held == self._held:
            return
        for name in set(held) ^ set(self._held):
            self._epochs[name] = self._epochs.get(name, 0) + 1  # the remembered verdicts go stale
        self._held = dict(held)

    def set_whole_card(self, name: str, count: int) -> None:
        """Whole-card ``nvidia.com/gpu`` pods on the node (Volcano #4712) changed."""
        self._whole[name] = count
        self._epochs[name] = self._epochs.get(name, 0) + 1
        node = self._nodes.get(name)
        if node is not None:
            node.whole_card = count

    # --- state ---------------------------------------------------------------------------------

    def _key(self, card: _Card, free: int | None = None) -> _Key:
        f = card.free if free is None else free
        return (f if self.policy == "binpack" else -f, card.node, card.device.index)

    def _eligible(self, card: _Card) -> bool:
        node = self._nodes[card.node].info
        return (
            node.mode is not None
            and card.device.healthy
            and card.grants < card.device.split_count
            and card.used_cores < 100
        )

    def _reindex(self, card: _Card) -> None:
        mode = self._nodes[card.node].info.mode or "hami-core"
        keys = self._index[mode]
        if card.key is not None:
            i = bisect.bisect_left(keys, card.key)
            if i < len(keys) and keys[i] == card.key:
                del keys[i]
            card.key = None
        if self._eligible(card):
            card.key = self._key(card)
            bisect.insort(keys, card.key)

    def _apply(self, node: str, allocation: Allocation, *, sign: int) -> None:
        self._epochs[node] = self._epochs.get(node, 0) + 1
        if sign > 0:
            self._where[allocation.pod_uid] = node
        elif self._where.get(allocation.pod_uid) == node:
            # A pod listed in two ledgers (an edited or moved entry) stays held by the other one.
            del self._where[allocation.pod_uid]
        # The queue's vector (``_queue_vector``) summed in the same walk over the grants: a start
        # applies 100,000 entries, and a list and three sums per entry were a sixth of that.
        count = memory = cores = 0
        cards = self._cards
        for container in allocation.containers:
            for grant in container.devices:
                count += 1
                memory += grant.memory
                cores += grant.cores
                card = cards.get((node, grant.uuid))
                if card is None:
                    continue  # the GPU is gone; check_invariants reports the entry
                card.used_memory += sign * grant.memory
                card.used_cores += sign * grant.cores
                card.grants += sign
                if grant.mig is not None:
                    position = grant.mig.position
                    card.mig_used[position] = card.mig_used.get(position, 0) + sign
                    if card.mig_used[position] <= 0:
                        del card.mig_used[position]
                    card.mig_group = grant.mig.group if card.mig_used else None
                if not self._building:
                    self._reindex(card)
        used = self._queue_used.setdefault(allocation.queue, [0, 0, 0])
        used[0] += sign * count
        used[1] += sign * (memory // self._factor)
        used[2] += sign * cores

    def commit(self, placement: Placement) -> None:
        """Apply a placement to the state (and to the node's ledger); idempotent by pod UID."""
        allocation = placement.allocation
        if allocation.pod_uid in self._where or allocation.pod_uid in self._plain:
            return
        if not allocation.containers:  # a gang member without vGPU: no ledger entry
            self._plain[allocation.pod_uid] = placement.node
            if self._workloads is not None and placement.pod.facts is not None:
                self._workloads.assume(placement.pod.facts, placement.node)
            return
        ledger = self._ledgers.get(placement.node) or NodeLedger(node=placement.node)
        self._ledgers[placement.node] = ledger.with_allocation(allocation)
        self.touched.add(placement.node)
        self._apply(placement.node, allocation, sign=1)
        if self._workloads is not None and placement.pod.facts is not None:
            self._workloads.assume(placement.pod.facts, placement.node)

    def release(self, pod_uid: str) -> Allocation | None:
        """Remove a pod's entry from the state; returns what it held (None: nothing)."""
        node = self._where.get(pod_uid)
        if node is None:
            if self._plain.pop(pod_uid, None) is not None and self._workloads is not None:
                self._workloads.forget(pod_uid)
            return None
        ledger = self._ledgers[node]
        allocation = ledger.allocations[pod_uid]
        self._ledgers[node] = ledger.without(pod_uid)
        self.touched.add(node)
        self._apply(node, allocation, sign=-1)
        if self._workloads is not None:
            self._workloads.forget(pod_uid)
        return allocation

    def mark_committed(self, pod_uid: str) -> Allocation:
        """Flag a pod's entry as committed to a binding (capacity unchanged); returns the new entry."""
        node = self._where[pod_uid]
        ledger = self._ledgers[node]
        entry = replace(ledger.allocations[pod_uid], committed=True)
        self.touched.add(node)
        self._ledgers[node] = NodeLedger(
            node=node,
            allocations={**ledger.allocations, pod_uid: entry},
            resource_version=ledger.resource_version,
        )
        return entry

    def ledger(self, node: str) -> NodeLedger:
        """The node's ledger including every commit and release so far."""
        return self._ledgers.get(node) or NodeLedger(node=node)

    def plain_node(self, pod_uid: str) -> str | None:
        """Where a gang member without vGPU was placed in this state (None: not placed)."""
        return self._plain.get(pod_uid)

    def allocation_of(self, pod_uid: str) -> tuple[str, Allocation] | None:
        node = self._where.get(pod_uid)
        return (node, self._ledgers[node].allocations[pod_uid]) if node is not None else None

    def queue_used(self, queue: str) -> tuple[int, int, int]:
        """vGPU number, memory (plugin units) and cores held by a queue's pods."""
        used = self._queue_used.get(queue, [0, 0, 0])
        return (used[0], used[1], used[2])

    # --- per card ------------------------------------------------------------------------------

    def _fit_mig(self, card: _Card, need: int, free: int, delta: _Delta | None) -> MigSlot | None:
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

    def _fit(
        self,
        pod: PodRequest,
        request: ContainerRequest,
        card: _Card,
        delta: _Delta | None,
        members: frozenset[str] = frozenset(),
    ) -> DeviceGrant | CardFailure:
        """One container on one card: the grant, or the first check that fails, in Volcano's order.

        ``members`` are the node's cards that other members of the pod's PodGroup hold (empty
        unless the pod asks for Volcano's PodGroup spread).
        """
        gpu = card.device
        if gpu.uuid in pod.nouse_uuids:
            return CardFailure("uuid-nouse")
        if pod.use_uuids is not None and gpu.uuid not in pod.use_uuids:
            return CardFailure("uuid-use")
        if not gpu.healthy:
            return CardFailure("unhealthy")
        d_mem, d_cores, d_grants = (delta.memory, delta.cores, delta.grants) if delta else (0, 0, 0)
        grants = card.grants + d_grants
        if grants >= gpu.split_count:
            return CardFailure("split")
        if gpu.uuid in members:
            return CardFailure("podgroup", detail=f"{pod.namespace}/{pod.group}", card=gpu.uuid)
        free = card.free - d_mem
        need = request.memory_on(gpu.memory, self._factor)
        if free < need:
            return CardFailure("memory", free=max(free, 0), need=need)
        cores = card.used_cores + d_cores
        # Volcano checks the sum first; asking "is it shared" first gives the clearer reason.
        if request.cores == 100 and grants > 0:
            return CardFailure("exclusive")
        if cores + request.cores > 100:
            return CardFailure("cores", detail=str(request.cores))
        if cores >= 100 and request.cores == 0:
            return CardFailure("cores-full")
        if "NVIDIA" not in gpu.type:
            return CardFailure("type")
        upper = gpu.type.upper()
        if pod.use_types and not any(t.upper() in upper for t in pod.use_types):
            return CardFailure("use-type", detail=",".join(pod.use_types))
        if not pod.use_types and any(t.upper() in upper for t in pod.nouse_types):
            return CardFailure("nouse-type", detail=",".join(pod.nouse_types))
        if card.mig is not None:
            slot = self._fit_mig(card, need, free, delta)
            if slot is None:
                return CardFailure("mig", need=need, detail=f">= {need} MiB")
            memory = next(
                g.memory
                for group in card.mig.allowed_geometries
                if group.group == slot.group
                for g in group.geometries
                if g.name == slot.profile
            )
            return DeviceGrant(uuid=gpu.uuid, memory=memory, cores=request.cores, mig=slot)
        return DeviceGrant(uuid=gpu.uuid, memory=need, cores=request.cores)

    # --- per node ------------------------------------------------------------------------------

    def _member_cards(self, pod: PodRequest, node: str) -> frozenset[str]:
        """The node's GPUs on which another member of the pod's PodGroup holds memory or cores.

        Volcano keys a card's pods by ``namespace/group`` whatever their own annotations say, and
        only the placed pod's ``spread`` matters; a member holding neither memory nor cores there
        does not count. Read from the ledger each time, so it is exact after any commit or release.
        """
        ledger = self._ledgers.get(node)
        if not pod.podgroup_spread or ledger is None:
            return frozenset()
        return frozenset(
            grant.uuid
            for entry in ledger.allocations.values()
            if entry.group == pod.group and entry.namespace == pod.namespace and entry.pod_uid != pod.uid
            for grant in entry.grants()
            if grant.memory > 0 or grant.cores > 0
        )

    def _node_failure(self, pod: PodRequest, node: _Node, cycle: PodCycle) -> NodeFailure | None:
        """The node's GPU checks, then the filter plugins (vGPU resources left for ``_evaluate``),
        then the pod's mode and card count."""
        info = node.info
        failure = _gpu_failure(info)
        if failure is not None:
            return failure
        if self._held and info.name in self._held:
            return _HELD
        failure = cycle.filter(info)
        if failure is not None:
            return failure
        if pod.mode is not None and info.mode != pod.mode:
            return NodeFailure("mode", f"{info.mode} mode (the pod requires {pod.mode})")
        most = max(c.count for c in pod.containers)
        if most > len(node.cards):
            return NodeFailure("cards", f"{len(node.cards)} GPUs < {most} requested")
        return None

    def _evaluate(
        self, pod: PodRequest, node: _Node, cycle: PodCycle
    ) -> tuple[_Key, tuple[ContainerGrant, ...]] | tuple[NodeFailure | None, list[CardFailure]]:
        """The node's best grants and rank, or (node failure, card failures)."""
        failure = self._node_failure(pod, node, cycle)
        if failure is not None:
            return failure, []
        deltas: dict[int, _Delta] = {}
        members = self._member_cards(pod, node.info.name)
        empty = sum(1 for c in node.cards if c.grants == 0 and c.device.healthy)
        chosen_all: list[ContainerGrant] = []
        rank: _Key | None = None
        for request in pod.containers:
            fitting: list[tuple[_Key, int, DeviceGrant]] = []
            failures: list[CardFailure] = []
            for i, card in enumerate(node.cards):
                delta = deltas.get(i)
                got = self._fit(pod, request, card, delta, members)
                if isinstance(got, CardFailure):
                    failures.append(got)
                else:
                    free = card.free - (delta.memory if delta else 0)
                    fitting.append((self._key(card, free), i, got))
            fitting.sort(key=lambda t: t[0])
            chosen: list[tuple[_Key, int, DeviceGrant]] = []
            for key, i, grant in fitting:
                if len(chosen) == request.count:
                    break
                delta = deltas.get(i)
                is_empty = node.cards[i].grants == 0 and (delta is None or delta.grants == 0)
                if is_empty and empty - 1 < node.whole_card:
                    failures.append(CardFailure("reserved"))
                    continue
                chosen.append((key, i, grant))
                if is_empty:
                    empty -= 1
            if len(chosen) < request.count:
                fit_failure = (
                    NodeFailure(
                        "fit",
                        f"{len(chosen)} fitting GPU{'s' if len(chosen) != 1 else ''} "
                        f"< {request.count} requested",
                    )
                    if chosen
                    else None
                )
                return fit_failure, failures
            if rank is None:
                rank = chosen[0][0]
            devices = []
            for _, i, grant in sorted(chosen, key=lambda t: node.cards[t[1]].device.index):
                delta = deltas.setdefault(i, _Delta())
                delta.memory += grant.memory
                delta.cores += grant.cores
                delta.grants += 1
                if grant.mig is not None:
                    delta.mig_group = grant.mig.group
                    delta.mig_positions.add(grant.mig.position)
                devices.append(grant)
            chosen_all.append(ContainerGrant(index=request.index, name=request.name, devices=tuple(devices)))
        assert rank is not None
        failure = cycle.fits_later(node.info)
        if failure is not None:
            return failure, []
        return rank, tuple(chosen_all)

    # --- search --------------------------------------------------------------------------------

    def _lower_bound(self, request: ContainerRequest) -> int:
        if request.percentage is None and request.memory is not None:
            return request.memory
        if self._unit_sizes is None:
            self._unit_sizes = sorted({c.capacity for c in self._cards.values()})
        sizes = self._unit_sizes or [0]
        return min(request.memory_on(size // self._factor, self._factor) for size in sizes)

    def _candidates(self, pod: PodRequest) -> Iterator[_Key]:
        """Index keys of cards that may take the first container, best first."""
        bound = self._lower_bound(pod.containers[0])
        modes = [pod.mode] if pod.mode in ("hami-core", "mig") else ["hami-core", "mig"]
        streams: list[Iterator[_Key]] = []
        for mode in modes:
            keys = self._index[mode or "hami-core"]
            # Walk by position: slicing would copy up to every card of the cluster per search.
            if self.policy == "binpack":
                start = bisect.bisect_left(keys, (bound, "", -1))
                streams.append(map(keys.__getitem__, range(start, len(keys))))
            else:
                end = bisect.bisect_right(keys, (-bound, "\U0010ffff", 1 << 30))
                streams.append(map(keys.__getitem__, range(end)))
        if len(streams) == 1:
            yield from streams[0]
        else:
            yield from heapq.merge(*streams)

    def _order(self, rank: _Key, name: str, cycle: PodCycle) -> _Order:
        """GPU packing first; among equal cards, the node kube-scheduler's LeastAllocated would
        prefer (most cpu and memory left); then the node name, so the result is deterministic."""
        lean = -cycle.least_allocated(self._nodes[name].info)
        return (rank[0], lean, rank[1], rank[2])

    def _verdict(self, pod: PodRequest, name: str, cycle: PodCycle) -> _Verdict:
        result = self._evaluate(pod, self._nodes[name], cycle)
        if not isinstance(result[0], tuple):
            return None
        rank, grants = result
        return self._order(rank, name, cycle), grants

    def _judge(self, pod: PodRequest, name: str, cycle: PodCycle, shape: int | None) -> _Verdict:
        """``_verdict``, remembered per equivalence class (``shape``) while the node's epochs
        stand still."""
        if shape is None:
            return self._verdict(pod, name, cycle)
        workloads = self._workloads.epoch(name) if self._workloads is not None else 0
        stamp = (self._epochs.get(name, 0), workloads)
        key = (shape, name)
        known = self._memo.get(key)
        if known is not None and known[0] == stamp:
            return known[1]
        verdict = self._verdict(pod, name, cycle)
        if len(self._memo) >= MEMO_LIMIT:
            self._memo.clear()
        self._memo[key] = (stamp, verdict)
        return verdict

    def _search(
        self, pod: PodRequest, cycle: PodCycle, shape: int | None
    ) -> tuple[str, tuple[ContainerGrant, ...]] | None:
        best: tuple[_Order, str, tuple[ContainerGrant, ...]] | None = None
        if self.search == "scan":
            # The reference: every node, evaluated afresh (no memo), for the property tests.
            for name in sorted(self._nodes):
                verdict = self._verdict(pod, name, cycle)
                if verdict is not None and (best is None or verdict[0] < best[0]):
                    best = (verdict[0], name, verdict[1])
        else:
            seen: set[str] = set()
            ties = 0
            selected = self._selected(pod)
            for key in self._candidates(pod):
                if best is not None and (key[0] > best[0][0] or ties >= TIE_CANDIDATES):
                    break
                name = key[1]
                if name in seen or (selected is not None and name not in selected):
                    continue
                seen.add(name)
                if best is not None and key[0] == best[0][0]:
                    # Equally packed cards: a bounded look for a less loaded node. A tighter card
                    # than the best rank is always looked at: its node failed a card check there
                    # (a PodGroup member, a type, cores) but may rank better through another card.
                    ties += 1
                verdict = self._judge(pod, name, cycle, shape)
                if verdict is not None and (best is None or verdict[0] < best[0]):
                    best = (verdict[0], name, verdict[1])
        return (best[1], best[2]) if best is not None else None

    def _class_of(self, pod: PodRequest) -> int | None:
        """A small id for the pod's equivalence class (None: evaluate every node afresh)."""
        workloads = self._workloads
        shape = equivalence_class(pod, anti_affinity_pods=workloads.anti_affinity_pods if workloads else 0)
        if shape is None:
            return None
        if len(self._classes) >= MEMO_LIMIT:  # a stream of one-off classes: start over
            self._classes.clear()
            self._memo.clear()
        return self._classes.setdefault(shape, len(self._classes))

    def diagnose(self, pod: PodRequest, cycle: PodCycle) -> str:
        """The ``0/N nodes are available`` message: every node judged, every reason counted.

        The nodes a nodeSelector leaves out are judged by the checks that come before the
        selector's (``_gpu_failure``, the plugins before NodeAffinity) and otherwise counted as the
        selector's, without evaluating them: at a few thousand nodes that was most of a refused
        pod's cost. ``cycle`` is the pod's PreFilter results (``_prepare``).
        """
        node_failures: list[NodeFailure] = []
        card_failures: list[CardFailure] = []
        selected = self._selected(pod)
        for name in sorted(self._nodes) if selected is None else sorted(selected):
            result = self._evaluate(pod, self._nodes[name], cycle)
            if isinstance(result[0], tuple):
                continue
            failure, cards = result
            if failure is not None:
                node_failures.append(failure)
            card_failures.extend(cards)
        if selected is not None:
            node_failures.extend(self._unselected(selected, cycle))
        return unavailable_message(len(self.view.nodes), node_failures, card_failures)

    def _selected(self, pod: PodRequest) -> set[str] | None:
        """The nodes carrying every label of the pod's nodeSelector; None: no selector, or the
        reference scan (which judges every node the long way)."""
        if not pod.node_selector or self.search == "scan":
            return None
        groups = sorted((self._labelled.get(pair, _NO_NODES) for pair in pod.node_selector.items()), key=len)
        return set(groups[0]).intersection(*groups[1:])

    def _unselected(self, selected: set[str], cycle: PodCycle) -> list[NodeFailure]:
        """``_node_failure`` of each node outside ``selected``: its GPU checks, the checks before
        the selector's, or the selector (which such a node fails by construction)."""
        failures: list[NodeFailure] = []
        for name, node in self._nodes.items():
            if name in selected:
                continue
            failure = _gpu_failure(node.info)
            if failure is None:
                failure = cycle.filter_before(node_affinity.NAME, node.info) or _UNMATCHED
            failures.append(failure)
        return failures

    # --- queues --------------------------------------------------------------------------------

    def _queue_refusal(
        self, pod: PodRequest, queue: str, explicit: bool, grants: Sequence[ContainerGrant]
    ) -> str | None:
        obj = self.view.queues.get(queue)
        if obj is None:
            # Volcano creates "default" at installation; without it there are no queues to respect.
            if not explicit or queue == "default":
                return None
            return f"queue {queue} does not exist; create it or name an existing queue"
        status = obj.get("status")
        state = status.get("state") if isinstance(status, Mapping) else None
        if state not in (None, "", "Open"):
            return f"queue {queue} is {state}; only Open queues admit new pods"
        spec = obj.get("spec")
        capability = spec.get("capability") if isinstance(spec, Mapping) else None
        if not isinstance(capability, Mapping):
            return None
        nvidia = self.config.nvidia
        names = (nvidia.resource_count_name, nvidia.resource_memory_name, nvidia.resource_core_name)
        used = self.queue_used(queue)
        wanted = _queue_vector(grants, self._factor)
        for i, resource in enumerate(names):
            if resource not in capability:
                continue
            try:
                limit = parse_quantity(capability[resource]).value
            except QuantityError:
                continue
            if used[i] + wanted[i] > limit:
                return (
                    f"queue {queue} capability {resource}={capability[resource]} would be exceeded: "
                    f"{used[i]} in use + {wanted[i]} requested; wait for the queue's pods to finish "
                    "or raise its capability"
                )
        return None

    # --- public --------------------------------------------------------------------------------

    def place(self, pod: PodRequest, *, now: int = 0) -> Placement | Unplaceable:
        """Decide where ``pod`` goes (nothing is applied; ``commit`` does that).

        A pod that already holds an entry gets that entry back: after a crash between the ledger
        write and the binding, the next pass binds what was reserved instead of deciding again.
        """
        existing = self.allocation_of(pod.uid)
        if existing is not None:
            return Placement(pod=pod, node=existing[0], allocation=existing[1])
        queue, explicit = pod_queue(pod, self.view)
        refusal = self._queue_refusal(pod, queue, explicit, ())
        if refusal is not None:
            return Unplaceable(pod=pod, message=refusal, cause="queue")
        if self._workloads is not None and pod.facts is not None:
            unsupported = unsupported_message(pod.facts)
            if unsupported is not None:
                return Unplaceable(pod=pod, message=unsupported, cause="unsupported")
        cycle = self._prepare(pod)
        if not pod.containers:
            return self._place_plain(pod, cycle, queue=queue, now=now)
        found = self._search(pod, cycle, self._class_of(pod))
        if found is None:
            return Unplaceable(pod=pod, message=self.diagnose(pod, cycle))
        node, grants = found
        refusal = self._queue_refusal(pod, queue, explicit, grants)
        if refusal is not None:
            return Unplaceable(pod=pod, message=refusal, cause="queue")
        allocation = Allocation(
            pod_uid=pod.uid,
            namespace=pod.namespace,
            name=pod.name,
            queue=queue,
            containers=grants,
            reserved_at=now,
            group=pod.group,
        )
        return Placement(pod=pod, node=node, allocation=allocation)

    def _prepare(self, pod: PodRequest) -> PodCycle:
        """The filter plugins' PreFilter for ``pod``: every plugin when the pods on the nodes are
        counted and the caller parsed the pod's facts, else the node's own checks. A pod with vGPU
        containers leaves the vGPU resources' node sums for after its per-GPU fit."""
        if pod.facts is None:
            terms = (tuple(pod.node_selector.items()), pod.affinity, pod.tolerations)
            cycle = self._node_cycles.get(terms)
            if cycle is None:
                if len(self._node_cycles) >= MEMO_LIMIT:
                    self._node_cycles.clear()
                cycle = self._framework.prepare(pod.node_facts(), node_only=True)
                self._node_cycles[terms] = cycle
            return cycle
        later = self._vgpu_resources if pod.containers else frozenset()
        return self._framework.prepare(pod.facts, later=later)

    def _place_plain(
        self, pod: PodRequest, cycle: PodCycle, *, queue: str, now: int
    ) -> Placement | Unplaceable:
        """A gang member without vGPU: the node kube-scheduler's filters would allow that has the
        most cpu and memory left (its LeastAllocated score), then the name; no GPU is judged.
        Only gangs come here: the controller places a pod without vGPU only as a gang member."""
        best: tuple[int, str] | None = None
        failures: list[NodeFailure] = []
        selected = self._selected(pod)
        for name in sorted(self._nodes) if selected is None else sorted(selected):
            info = self._nodes[name].info
            failure = self._plain_failure(info, cycle)
            if failure is not None:
                failures.append(failure)
                continue
            lean = cycle.least_allocated(info)
            if best is None or (-lean, name) < best:
                best = (-lean, name)
        if best is None:
            if selected is not None:
                failures.extend(self._unselected_plain(selected, cycle))
            return Unplaceable(pod=pod, message=unavailable_message(len(self.view.nodes), failures, ()))
        allocation = Allocation(
            pod_uid=pod.uid,
            namespace=pod.namespace,
            name=pod.name,
            queue=queue,
            containers=(),
            reserved_at=now,
            group=pod.group,
        )
        return Placement(pod=pod, node=best[1], allocation=allocation)

    def _plain_failure(self, info: NodeInfo, cycle: PodCycle) -> NodeFailure | None:
        """``_node_failure`` without the GPU checks: the filter plugins alone, every resource (no
        vGPU is asked) judged at once."""
        return cycle.filter(info)

    def _unselected_plain(self, selected: set[str], cycle: PodCycle) -> list[NodeFailure]:
        """The nodes a nodeSelector leaves out, counted as ``_unselected`` does minus GPU checks."""
        return [
            cycle.filter_before(node_affinity.NAME, node.info) or _UNMATCHED
            for name, node in self._nodes.items()
            if name not in selected
        ]

    def place_gang(
        self, members: Sequence[PodRequest], *, min_member: int, running: int = 0, now: int = 0
    ) -> GangOutcome:
        """Place a PodGroup's pending members in one decision: all that fit, if that reaches minMember.

        ``running`` counts members already bound (they hold entries or whole cards elsewhere).
        Members go in priority/creation order; each sees the ones placed before it. When fewer
        than ``min_member`` could run, every placement is rolled back and each member gets the
        reason, so the gang never starts half-way; reservations members held from an earlier pass
        are released too (listed in ``released``: the caller removes them from the ledgers).
        """
        ordered = sorted(members, key=lambda p: p.order)
        placed: list[Placement] = []
        failures: list[Unplaceable] = []
        reserved = {pod.uid for pod in ordered if self.allocation_of(pod.uid) is not None}
        # The members the first failure was judged after that the ledger does not hold yet.
        tentative: list[str] = []
        for pod in ordered:
            result = self.place(pod, now=now)
            if isinstance(result, Placement):
                self.commit(result)
                placed.append(result)
            else:
                if not failures:
                    tentative = [
                        p.pod.name for p in placed if p.pod.uid not in reserved and not p.allocation.committed
                    ]
                failures.append(result)
        ready = running + len(placed)
        if ready >= min_member:
            return GangOutcome(placements=tuple(placed), failures=tuple(failures), ok=True)
        released = []
        for placement in placed:
            if placement.allocation.committed:
                continue  # about to be bound by some replica: only the pod's end releases it
            self.release(placement.pod.uid)
            if placement.pod.uid in reserved:
                released.append(placement.pod.uid)
        first = ordered[0]
        group = f"{first.namespace}/{first.group}" if first.group else first.key
        head = f"gang {group}: only {ready} of {min_member} members can run (minMember {min_member})"
        blocker = failures[0] if failures else None
        # One message for every member, naming the first member that does not fit and why.
        message = head
        if blocker is not None:
            message += f"; {judged_after(blocker.pod.name, tentative)}: {blocker.message}"
        return GangOutcome(
            failures=tuple(Unplaceable(pod=p, message=message, cause="gang") for p in ordered),
            released=tuple(released),
        )
