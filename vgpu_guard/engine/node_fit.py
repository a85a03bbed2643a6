"""One pod on one node: the node's checks, then every container on its cards, and the node's rank.

Volcano judges a node before its cards: the node has vGPU devices, passes the filter plugins
(``scheduling.framework``: Ready, not cordoned, nodeSelector and required node affinity, taints
tolerated, and with the pods on the nodes kube-scheduler's other filters), its mode equals the
pod's ``volcano.sh/vgpu-mode`` and it has enough cards. Then each container takes ``count``
distinct cards, the best in the allocator's order first (``card_fit`` for each card), seeing the
grants of the pod's earlier containers; as many empty cards as the node's whole-card
``nvidia.com/gpu`` pods stay empty (Volcano #4712). Last, the vGPU resources' node sums against
allocatable, as the kubelet admits them. The node's rank is the key of the best card the first
container got: the search compares nodes by it.
"""

from __future__ import annotations

from vgpu_guard.engine.card_fit import Delta, fit
from vgpu_guard.engine.card_index import CardIndex, CardNode, Key
from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.holdings import Holdings
from vgpu_guard.engine.ledger import ContainerGrant, DeviceGrant
from vgpu_guard.engine.placement_reason import CardFailure, NodeFailure
from vgpu_guard.engine.pod_request import ContainerRequest, PodRequest
from vgpu_guard.engine.scheduling import PodCycle

__all__ = ["Evaluation", "NodeFit", "gpu_failure"]

_NO_GPU = NodeFailure("no-gpu")
_GPU_PROBLEM = NodeFailure("gpu-problem")
_HELD = NodeFailure("ledger")
# The node's rank and the pod's grants there, or (why the node fails, why its cards failed).
Evaluation = tuple[Key, tuple[ContainerGrant, ...]] | tuple[NodeFailure | None, list[CardFailure]]
_Chosen = list[tuple[Key, int, DeviceGrant]]


def gpu_failure(info: NodeInfo) -> NodeFailure | None:
    """The node's own GPU checks, which come before any of the pod's. A registration that does not
    parse leaves no cards either: it is counted as the problem it is (the operator can fix it),
    not as a node without GPUs."""
    if info.gpu_problem is not None:
        return _GPU_PROBLEM
    if not info.gpus:
        return _NO_GPU
    return None


def _short(chosen: _Chosen, count: int) -> NodeFailure | None:
    """Too few cards fit: a node reason when some did (else the card failures say it all)."""
    if not chosen:
        return None
    return NodeFailure(
        "fit", f"{len(chosen)} fitting GPU{'s' if len(chosen) != 1 else ''} < {count} requested"
    )


class NodeFit:
    """Judges a pod on one node against the cards' current use and the pod's own earlier grants.

    ``held`` are the nodes whose ledger cannot be written now (node -> why): no new pod goes there.
    """

    def __init__(self, cards: CardIndex, holdings: Holdings, *, factor: int) -> None:
        self._cards = cards
        self._holdings = holdings
        self._factor = factor
        self.held: dict[str, str] = {}

    def node_failure(self, pod: PodRequest, node: CardNode, cycle: PodCycle) -> NodeFailure | None:
        """The node's GPU checks, then the filter plugins (vGPU resources left for ``evaluate``),
        then the pod's mode and card count."""
        info = node.info
        failure = gpu_failure(info)
        if failure is not None:
            return failure
        if self.held and info.name in self.held:
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

    def evaluate(self, pod: PodRequest, node: CardNode, cycle: PodCycle) -> Evaluation:
        """The node's best grants and rank, or (node failure, card failures)."""
        failure = self.node_failure(pod, node, cycle)
        if failure is not None:
            return failure, []
        deltas: dict[int, Delta] = {}
        members = self._holdings.member_cards(pod, node.info.name)
        empty = sum(1 for c in node.cards if c.grants == 0 and c.device.healthy)
        granted: list[ContainerGrant] = []
        rank: Key | None = None
        for request in pod.containers:
            chosen, failures, empty = self._choose(pod, request, node, deltas, members=members, empty=empty)
            if len(chosen) < request.count:
                return _short(chosen, request.count), failures
            if rank is None:
                rank = chosen[0][0]
            devices = []
            for _, i, grant in sorted(chosen, key=lambda t: node.cards[t[1]].device.index):
                deltas.setdefault(i, Delta()).add(grant)
                devices.append(grant)
            granted.append(ContainerGrant(index=request.index, name=request.name, devices=tuple(devices)))
        assert rank is not None
        failure = cycle.fits_later(node.info)
        if failure is not None:
            return failure, []
        return rank, tuple(granted)

    def _choose(
        self,
        pod: PodRequest,
        request: ContainerRequest,
        node: CardNode,
        deltas: dict[int, Delta],
        *,
        members: frozenset[str],
        empty: int,
    ) -> tuple[_Chosen, list[CardFailure], int]:
        """The container's best ``count`` cards (fewer: it does not fit), why the others failed,
        and the node's empty cards left: an empty card goes only while the whole-card pods keep
        theirs."""
        fitting: _Chosen = []
        failures: list[CardFailure] = []
        for i, card in enumerate(node.cards):
            delta = deltas.get(i)
            got = fit(pod, request, card, delta, members=members, factor=self._factor)
            if isinstance(got, CardFailure):
                failures.append(got)
            else:
                free = card.free - (delta.memory if delta else 0)
                fitting.append((self._cards.key(card, free), i, got))
        fitting.sort(key=lambda t: t[0])
        chosen: _Chosen = []
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
        return chosen, failures, empty
