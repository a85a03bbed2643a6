"""The cluster's GPUs as cards with their use, kept in a sorted index per mode.

The allocator's one order of cards drives both the node and the card choice (binpack: the card
with the least free memory that fits first; spread: the most), so the cards sit in a list of keys
sorted by that order, one list per mode (``hami-core``, ``mig``). A search walks only the cards
with enough free memory, best first, and stops as soon as no later card can beat the best node
found; each change of a card's use moves its one key (``bisect``) instead of re-sorting.

The index also keeps what only changes with the nodes: the cards of each node, the node names by
label pair (a nodeSelector picks its candidates there) and a per-node epoch that every change of
a node's cards, ledger, whole-card count or hold moves (the search's memo is stamped with it).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.config import GuardConfig, MigModelGeometries
from vgpu_guard.engine.devices import GpuDevice
from vgpu_guard.engine.ledger import Allocation
from vgpu_guard.engine.mig import geometries_for
from vgpu_guard.engine.pod_request import ContainerRequest, PodRequest

__all__ = ["Card", "CardIndex", "CardNode", "Key", "Policy"]

Policy = Literal["binpack", "spread"]
# (free memory, negated for spread; node name; card index): the order of cards, best first.
Key = tuple[int, str, int]
_NO_NODES: frozenset[str] = frozenset()


@dataclass(slots=True)
class Card:
    """One registered GPU and what the ledgers' entries hold on it."""

    node: str
    device: GpuDevice
    capacity: int
    mig: MigModelGeometries | None
    used_memory: int = 0
    used_cores: int = 0
    grants: int = 0
    mig_group: str | None = None
    mig_used: dict[int, int] = field(default_factory=dict)
    key: Key | None = None

    @property
    def free(self) -> int:
        return self.capacity - self.used_memory


@dataclass(slots=True)
class CardNode:
    """A node as the allocator judges it: its registration, its cards, its whole-card pods."""

    info: NodeInfo
    cards: list[Card]
    whole_card: int = 0


class CardIndex:
    """The nodes' cards and the per-mode sorted keys of those that can take another grant.

    Built once from the view's nodes; ``apply`` moves a card's use and key as the ledgers'
    entries come and go, ``replace_node`` rebuilds one node's cards when it re-registers.
    """

    def __init__(
        self, nodes: Mapping[str, NodeInfo], *, config: GuardConfig, policy: Policy, whole: Mapping[str, int]
    ) -> None:
        self.policy: Policy = policy
        self._factor = config.nvidia.gpu_memory_factor
        self._known = config.nvidia.known_mig_geometries
        self.nodes: dict[str, CardNode] = {}
        self._cards: dict[tuple[str, str], Card] = {}
        self._index: dict[str, list[Key]] = {"hami-core": [], "mig": []}
        # Whole-card GPUs by node, kept for nodes not (yet) in the view too: they apply when it joins.
        self._whole: dict[str, int] = dict(whole)
        self._mig_cache: dict[str, MigModelGeometries | None] = {}
        # Per node, moved by every change of its cards, ledger, hold or whole-card count; with the
        # workloads' own per-node epoch it stamps the remembered verdicts (equivalence.py).
        self.epochs: dict[str, int] = {}
        # Node names by label pair: a pod's nodeSelector picks its candidates from here instead of
        # judging every node of the cluster (GPU pools are usually chosen this way).
        self._labelled: dict[tuple[str, str], set[str]] = {}
        for name, info in nodes.items():
            self.nodes[name] = CardNode(
                info=info, cards=self._cards_of(info), whole_card=self._whole.get(name, 0)
            )
            self._label(name, info, add=True)
        self._unit_sizes: list[int] | None = sorted({c.capacity for c in self._cards.values()})
        # Until ``build``, ``apply`` leaves the keys alone: the index is sorted once, not per entry.
        self._building = True

    def build(self) -> None:
        """Sort the index once after the initial ledgers were applied."""
        self._building = False
        for card in self._cards.values():
            if self.eligible(card):
                card.key = self.key(card)
                self._index[self.nodes[card.node].info.mode or "hami-core"].append(card.key)
        for keys in self._index.values():
            keys.sort()

    def bump(self, name: str) -> None:
        """Something that decides the node's verdicts changed: the remembered ones go stale."""
        self.epochs[name] = self.epochs.get(name, 0) + 1

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

    def _cards_of(self, info: NodeInfo) -> list[Card]:
        """The node's cards, registered in ``_cards`` (not yet in the index)."""
        cards: list[Card] = []
        if not info.vgpu_capable:
            return cards
        for gpu in info.gpus:
            if gpu.type not in self._mig_cache:
                self._mig_cache[gpu.type] = geometries_for(gpu.type, self._known)
            card = Card(
                node=info.name,
                device=gpu,
                capacity=gpu.memory * self._factor,
                mig=self._mig_cache[gpu.type] if gpu.mode == "mig" else None,
            )
            cards.append(card)
            self._cards[(info.name, gpu.uuid)] = card
        return cards

    def replace_node(self, name: str, info: NodeInfo | None) -> None:
        """Drop the node's cards and keys, then register ``info``'s (None: the node left). The
        caller takes the node's ledger entries off first and applies them again after."""
        self.bump(name)
        old = self.nodes.pop(name, None)
        if old is not None:
            self._label(name, old.info, add=False)
            for card in old.cards:
                if card.key is not None:
                    self._unkey(old.info.mode or "hami-core", card.key)
                del self._cards[(name, card.device.uuid)]
        if info is not None:
            cards = self._cards_of(info)
            self.nodes[name] = CardNode(info=info, cards=cards, whole_card=self._whole.get(name, 0))
            self._label(name, info, add=True)
            for card in cards:
                self._reindex(card)
        self._unit_sizes = None  # recomputed on the next search: many nodes may change at once

    def set_whole_card(self, name: str, count: int) -> None:
        """Whole-card ``nvidia.com/gpu`` pods on the node (Volcano #4712) changed."""
        self._whole[name] = count
        self.bump(name)
        node = self.nodes.get(name)
        if node is not None:
            node.whole_card = count

    def key(self, card: Card, free: int | None = None) -> Key:
        """The card's place in the order (``free``: as if that much memory were left)."""
        f = card.free if free is None else free
        return (f if self.policy == "binpack" else -f, card.node, card.device.index)

    def eligible(self, card: Card) -> bool:
        """Whether the card can take another grant at all (only those are in the index)."""
        node = self.nodes[card.node].info
        return (
            node.mode is not None
            and card.device.healthy
            and card.grants < card.device.split_count
            and card.used_cores < 100
        )

    def _unkey(self, mode: str, key: Key) -> None:
        keys = self._index[mode]
        i = bisect.bisect_left(keys, key)
        if i < len(keys) and keys[i] == key:
            del keys[i]

    def _reindex(self, card: Card) -> None:
        mode = self.nodes[card.node].info.mode or "hami-core"
        if card.key is not None:
            self._unkey(mode, card.key)
            card.key = None
        if self.eligible(card):
            card.key = self.key(card)
            bisect.insort(self._index[mode], card.key)

    def apply(self, node: str, allocation: Allocation, *, sign: int) -> tuple[int, int, int]:
        """Add (``sign`` 1) or take off (-1) an entry's grants on the node's cards; returns the
        entry's grant count, memory and cores, summed in the same walk (a start applies 100,000
        entries, and a second walk per entry for the queue's use was a sixth of that)."""
        self.bump(node)
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
        return count, memory, cores

    def _lower_bound(self, request: ContainerRequest) -> int:
        """The least memory the container can ask of any card size in the cluster."""
        if request.percentage is None and request.memory is not None:
            return request.memory
        if self._unit_sizes is None:
            self._unit_sizes = sorted({c.capacity for c in self._cards.values()})
        sizes = self._unit_sizes or [0]
        return min(request.memory_on(size // self._factor, self._factor) for size in sizes)

    def candidates(self, pod: PodRequest) -> Iterator[Key]:
        """Index keys of cards that may take the first container, best first."""
        bound = self._lower_bound(pod.containers[0])
        modes = [pod.mode] if pod.mode in ("hami-core", "mig") else ["hami-core", "mig"]
        streams: list[Iterator[Key]] = []
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

    def labelled(self, selector: Mapping[str, str]) -> set[str]:
        """The nodes carrying every label of ``selector`` (not empty)."""
        groups = sorted((self._labelled.get(pair, _NO_NODES) for pair in selector.items()), key=len)
        return set(groups[0]).intersection(*groups[1:])
