"""What every pod holds in one allocator state: the ledgers with each commit and release applied.

The allocator decides on the cards (``card_index``); this is the record those decisions are
written to and the controller writes back: the node ledgers, where each pod's entry is, the
gang members without vGPU (placed on a node, never in a ledger), each queue's vGPU use and the
nodes whose ledger changed since the controller last wrote (``touched``). Every entry applied
here moves the cards' use in the index in the same step, so the two never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from vgpu_guard.engine.card_index import CardIndex
from vgpu_guard.engine.ledger import Allocation, NodeLedger
from vgpu_guard.engine.pod_request import PodRequest
from vgpu_guard.engine.scheduling import Workloads

if TYPE_CHECKING:
    from vgpu_guard.engine.placements import Placement

__all__ = ["Holdings"]


class Holdings:
    """The ledgers and the indexes over them (pod -> node, queue -> use), kept with the cards."""

    def __init__(
        self, ledgers: Mapping[str, NodeLedger], cards: CardIndex, *, factor: int, workloads: Workloads | None
    ) -> None:
        self._cards = cards
        self._factor = factor
        self._workloads = workloads
        self._ledgers: dict[str, NodeLedger] = dict(ledgers)
        self._where: dict[str, str] = {}
        # Gang members that ask for no vGPU (routing mode routes a gang whole): placed by the node's
        # constraints alone, never in a ledger; their node is kept so the gang's later members see
        # their cpu and memory (``workloads.assume``), and ``release`` can forget them.
        self._plain: dict[str, str] = {}
        self._queue_used: dict[str, list[int]] = {}
        # Nodes whose ledger ``commit``/``release``/``mark_committed`` changed: what a pass writes.
        self.touched: set[str] = set()
        for ledger in ledgers.values():
            for allocation in ledger.allocations.values():
                self._apply(ledger.node, allocation, sign=1)

    def _apply(self, node: str, allocation: Allocation, *, sign: int) -> None:
        if sign > 0:
            self._where[allocation.pod_uid] = node
        elif self._where.get(allocation.pod_uid) == node:
            # A pod listed in two ledgers (an edited or moved entry) stays held by the other one.
            del self._where[allocation.pod_uid]
        count, memory, cores = self._cards.apply(node, allocation, sign=sign)
        used = self._queue_used.setdefault(allocation.queue, [0, 0, 0])
        used[0] += sign * count
        used[1] += sign * (memory // self._factor)
        used[2] += sign * cores

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

    def commit(self, placement: Placement) -> None:
        """Apply a placement to the state (and to the node's ledger); idempotent by pod UID."""
        allocation = placement.allocation
        if allocation.pod_uid in self._where or allocation.pod_uid in self._plain:
            return
        if not allocation.containers:  # a gang member without vGPU: no ledger entry
            self._plain[allocation.pod_uid] = placement.node
        else:
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

    def held_ledger(self, node: str) -> NodeLedger | None:
        """The node's ledger as held (None: the node has none)."""
        return self._ledgers.get(node)

    def plain_node(self, pod_uid: str) -> str | None:
        """Where a gang member without vGPU was placed in this state (None: not placed)."""
        return self._plain.get(pod_uid)

    def allocation_of(self, pod_uid: str) -> tuple[str, Allocation] | None:
        """The pod's node and entry (None: it holds none)."""
        node = self._where.get(pod_uid)
        return (node, self._ledgers[node].allocations[pod_uid]) if node is not None else None

    def queue_used(self, queue: str) -> tuple[int, int, int]:
        """vGPU number, memory (plugin units) and cores held by a queue's pods."""
        used = self._queue_used.get(queue, [0, 0, 0])
        return (used[0], used[1], used[2])

    def member_cards(self, pod: PodRequest, node: str) -> frozenset[str]:
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
