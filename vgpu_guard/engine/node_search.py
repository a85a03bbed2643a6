"""Which node a pod goes to: the best verdict over the nodes, found without judging them all.

The indexed search walks the cards that may take the pod's first container, best first
(``CardIndex.candidates``), judges each card's node once, and stops as soon as no later card can
beat the best node found, weighing at most ``TIE_CANDIDATES`` more nodes with equally packed cards
for kube-scheduler's cpu/memory tie-break. A node's verdict is remembered per equivalence class of
pods (``equivalence.py``) while the node's epochs stand still, so a burst of replicas judges each
node once. ``search="scan"`` judges every node afresh instead: the reference the property tests
hold the indexed search equal to, and the benchmark's baseline.

When no node fits, ``diagnose`` judges every node and counts each reason: the ``0/N nodes are
available`` message users read.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Literal

from vgpu_guard.engine.card_index import CardIndex, Key
from vgpu_guard.engine.equivalence import equivalence_class
from vgpu_guard.engine.ledger import ContainerGrant
from vgpu_guard.engine.node_fit import NodeFit, gpu_failure
from vgpu_guard.engine.placement_reason import CardFailure, NodeFailure, unavailable_message
from vgpu_guard.engine.pod_request import PodRequest
from vgpu_guard.engine.scheduling import PodCycle, Workloads
from vgpu_guard.engine.scheduling.plugins import node_affinity

__all__ = ["MEMO_LIMIT", "TIE_CANDIDATES", "NodeSearch", "Search"]

Search = Literal["indexed", "scan"]
# GPU packing, then the node's cpu/memory left (negated), then the node name and card index.
_Order = tuple[int, int, str, int]
# A node's rank and grants for a pod, or None where the pod does not fit.
_Verdict = tuple[_Order, tuple[ContainerGrant, ...]] | None
# How many more nodes with equally packed cards the indexed search weighs for the cpu/memory
# tie-break once it has a fit (kube-scheduler samples too: percentageOfNodesToScore).
TIE_CANDIDATES = 32
# Remembered node verdicts (equivalence class x node) before the memo starts over: a few classes
# over thousands of nodes fit; a stream of one-off classes cannot grow it without bound.
MEMO_LIMIT = 100_000
_UNMATCHED = node_affinity.SELECTOR


class NodeSearch:
    """The search over the nodes for one pod at a time, with the memo of node verdicts."""

    def __init__(
        self, cards: CardIndex, judge: NodeFit, *, search: Search, workloads: Workloads | None
    ) -> None:
        self.search: Search = search
        self._cards = cards
        self._fit = judge
        self._workloads = workloads
        self._classes: dict[Hashable, int] = {}
        self._memo: dict[tuple[int, str], tuple[tuple[int, int], _Verdict]] = {}

    def class_of(self, pod: PodRequest) -> int | None:
        """A small id for the pod's equivalence class (None: evaluate every node afresh)."""
        workloads = self._workloads
        shape = equivalence_class(pod, anti_affinity_pods=workloads.anti_affinity_pods if workloads else 0)
        if shape is None:
            return None
        if len(self._classes) >= MEMO_LIMIT:  # a stream of one-off classes: start over
            self._classes.clear()
            self._memo.clear()
        return self._classes.setdefault(shape, len(self._classes))

    def _order(self, rank: Key, name: str, cycle: PodCycle) -> _Order:
        """GPU packing first; among equal cards, the node kube-scheduler's LeastAllocated would
        prefer (most cpu and memory left); then the node name, so the result is deterministic."""
        lean = -cycle.least_allocated(self._cards.nodes[name].info)
        return (rank[0], lean, rank[1], rank[2])

    def _verdict(self, pod: PodRequest, name: str, cycle: PodCycle) -> _Verdict:
        result = self._fit.evaluate(pod, self._cards.nodes[name], cycle)
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
        stamp = (self._cards.epochs.get(name, 0), workloads)
        key = (shape, name)
        known = self._memo.get(key)
        if known is not None and known[0] == stamp:
            return known[1]
        verdict = self._verdict(pod, name, cycle)
        if len(self._memo) >= MEMO_LIMIT:
            self._memo.clear()
        self._memo[key] = (stamp, verdict)
        return verdict

    def find(
        self, pod: PodRequest, cycle: PodCycle, shape: int | None
    ) -> tuple[str, tuple[ContainerGrant, ...]] | None:
        """The best node for ``pod`` and its grants there (None: no node fits)."""
        best: tuple[_Order, str, tuple[ContainerGrant, ...]] | None = None
        if self.search == "scan":
            # The reference: every node, evaluated afresh (no memo), for the property tests.
            for name in sorted(self._cards.nodes):
                verdict = self._verdict(pod, name, cycle)
                if verdict is not None and (best is None or verdict[0] < best[0]):
                    best = (verdict[0], name, verdict[1])
            return (best[1], best[2]) if best is not None else None
        seen: set[str] = set()
        ties = 0
        selected = self.selected(pod)
        for key in self._cards.candidates(pod):
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

    def selected(self, pod: PodRequest) -> set[str] | None:
        """The nodes carrying every label of the pod's nodeSelector; None: no selector, or the
        reference scan (which judges every node the long way)."""
        if not pod.node_selector or self.search == "scan":
            return None
        return self._cards.labelled(pod.node_selector)

    def _names(self, selected: set[str] | None) -> list[str]:
        return sorted(self._cards.nodes) if selected is None else sorted(selected)

    def diagnose(self, pod: PodRequest, cycle: PodCycle, total: int) -> str:
        """The ``0/N nodes are available`` message (``total`` nodes): every node judged, every
        reason counted.

        The nodes a nodeSelector leaves out are judged by the checks that come before the
        selector's (``gpu_failure``, the plugins before NodeAffinity) and otherwise counted as the
        selector's, without evaluating them: at a few thousand nodes that was most of a refused
        pod's cost.
        """
        node_failures: list[NodeFailure] = []
        card_failures: list[CardFailure] = []
        selected = self.selected(pod)
        for name in self._names(selected):
            result = self._fit.evaluate(pod, self._cards.nodes[name], cycle)
            if isinstance(result[0], tuple):
                continue
            failure, cards = result
            if failure is not None:
                node_failures.append(failure)
            card_failures.extend(cards)
        if selected is not None:
            node_failures.extend(self._unselected(selected, cycle, gpus=True))
        return unavailable_message(total, node_failures, card_failures)

    def _unselected(self, selected: set[str], cycle: PodCycle, *, gpus: bool) -> list[NodeFailure]:
        """Why each node outside ``selected`` fails: its GPU checks (``gpus``), the checks before
        the selector's, or the selector (which such a node fails by construction)."""
        failures: list[NodeFailure] = []
        for name, node in self._cards.nodes.items():
            if name in selected:
                continue
            failure = gpu_failure(node.info) if gpus else None
            if failure is None:
                failure = cycle.filter_before(node_affinity.NAME, node.info) or _UNMATCHED
            failures.append(failure)
        return failures

    def find_plain(self, pod: PodRequest, cycle: PodCycle) -> str | list[NodeFailure]:
        """A gang member without vGPU: the node kube-scheduler's filters would allow that has the
        most cpu and memory left (its LeastAllocated score), then the name; no GPU is judged. Else
        why each node fails (the filter plugins alone, every resource judged at once)."""
        best: tuple[int, str] | None = None
        failures: list[NodeFailure] = []
        selected = self.selected(pod)
        for name in self._names(selected):
            info = self._cards.nodes[name].info
            failure = cycle.filter(info)
            if failure is not None:
                failures.append(failure)
                continue
            lean = cycle.least_allocated(info)
            if best is None or (-lean, name) < best:
                best = (-lean, name)
        if best is not None:
            return best[1]
        if selected is not None:
            failures.extend(self._unselected(selected, cycle, gpus=False))
        return failures
