"""Placement of a pod, or of a whole gang, against one consistent snapshot of the cluster's GPUs.

The snapshot is a ``ClusterView`` (nodes and their registered GPUs, queues, podgroups), the
ledgers (what every GPU already holds) and the count of whole-card ``nvidia.com/gpu`` pods per
node (Volcano #4712: they share the same physical cards, so that many cards must stay empty).

Rules, in Volcano's order (../../docs/design/ledger.md and device-plugin-formats.md):
- queue: Open, and its ``capability`` for the vGPU resources not exceeded (``queue_capability``);
- node: has vGPU devices, then the filter plugins (``scheduling.framework``), mode equal to the
  pod's ``volcano.sh/vgpu-mode``, enough cards; per container ``count`` distinct cards on one
  node, all containers of a pod on that node (``node_fit``);
- card: Volcano's per-card checks, MIG instances included (``card_fit``).

Choice: one order of cards drives both the node and the card choice. binpack (default) takes the
tightest fit, the card with the least free memory that fits (then node name, then card index);
spread the loosest. A node's rank is the rank of the best card it would give the first container.

The parts, each one concept: ``card_index`` (the cards and their sorted index), ``holdings`` (the
ledgers with every commit and release), ``card_fit`` and ``node_fit`` (the checks), ``node_search``
(the indexed search, its memo, the reference scan and the diagnosis), ``gang_placement``. This
class wires them over one snapshot and is what the controller, simulate and the webhook call.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from vgpu_guard.engine.card_index import CardIndex, Policy
from vgpu_guard.engine.cluster import ClusterView, NodeInfo
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.gang_placement import place_gang
from vgpu_guard.engine.holdings import Holdings
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, NodeLedger
from vgpu_guard.engine.node_fit import NodeFit
from vgpu_guard.engine.node_search import MEMO_LIMIT, NodeSearch, Search
from vgpu_guard.engine.placement_reason import unavailable_message
from vgpu_guard.engine.placements import GangOutcome, Placement, Unplaceable
from vgpu_guard.engine.pod_request import PodRequest
from vgpu_guard.engine.queue_capability import pod_queue, queue_refusal
from vgpu_guard.engine.scheduling import Framework, PodCycle, Workloads, unsupported_message

__all__ = [
    "Allocator",
    "GangOutcome",
    "Placement",
    "Policy",
    "Search",
    "Unplaceable",
    "pod_queue",
]


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
        self.config = config
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
        factor = nvidia.gpu_memory_factor
        self._cards = CardIndex(
            view.nodes, config=config, policy=policy or config.scheduling.policy, whole=whole_card or {}
        )
        self._holdings = Holdings(ledgers, self._cards, factor=factor, workloads=workloads)
        self._cards.build()
        self._node_fit = NodeFit(self._cards, self._holdings, factor=factor)
        self._search = NodeSearch(self._cards, self._node_fit, search=search, workloads=workloads)

    @property
    def policy(self) -> Policy:
        """binpack or spread: the order of cards this state's index keeps."""
        return self._cards.policy

    @property
    def search(self) -> Search:
        """indexed (the product's) or scan (the reference the property tests compare with)."""
        return self._search.search

    @search.setter
    def search(self, search: Search) -> None:
        self._search.search = search

    @property
    def touched(self) -> set[str]:
        """Nodes whose ledger ``commit``/``release``/``mark_committed`` changed: what a pass writes
        (the controller clears it after writing)."""
        return self._holdings.touched

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
        self._holdings.replace_ledger(node, ledger)

    def replace_node(self, name: str, info: NodeInfo | None) -> None:
        """The node re-registered, changed or left: rebuild its cards and apply its ledger again."""
        ledger = self._holdings.held_ledger(name)
        self._holdings.replace_ledger(name, None)
        self._cards.replace_node(name, info)
        self._holdings.replace_ledger(name, ledger)

    def hold_nodes(self, held: Mapping[str, str]) -> None:
        """Place no new pod on these nodes (node -> why): the controller could not write their
        ledger and retries it later. An entry a pod already holds there is kept (``place`` gives
        it back), so a reservation that did reach the ledger is still bound."""
        current = self._node_fit.held
        if held == current:
            return
        for name in set(held) ^ set(current):
            self._cards.bump(name)  # the remembered verdicts go stale
        self._node_fit.held = dict(held)

    def set_whole_card(self, name: str, count: int) -> None:
        """Whole-card ``nvidia.com/gpu`` pods on the node (Volcano #4712) changed."""
        self._cards.set_whole_card(name, count)

    # --- the ledgers ----------------------------------------------------------------------------

    def commit(self, placement: Placement) -> None:
        """Apply a placement to the state (and to the node's ledger); idempotent by pod UID."""
        self._holdings.commit(placement)

    def release(self, pod_uid: str) -> Allocation | None:
        """Remove a pod's entry from the state; returns what it held (None: nothing)."""
        return self._holdings.release(pod_uid)

    def mark_committed(self, pod_uid: str) -> Allocation:
        """Flag a pod's entry as committed to a binding (capacity unchanged); returns the new entry."""
        return self._holdings.mark_committed(pod_uid)

    def ledger(self, node: str) -> NodeLedger:
        """The node's ledger including every commit and release so far."""
        return self._holdings.ledger(node)

    def plain_node(self, pod_uid: str) -> str | None:
        """Where a gang member without vGPU was placed in this state (None: not placed)."""
        return self._holdings.plain_node(pod_uid)

    def allocation_of(self, pod_uid: str) -> tuple[str, Allocation] | None:
        """The pod's node and entry (None: it holds none)."""
        return self._holdings.allocation_of(pod_uid)

    def queue_used(self, queue: str) -> tuple[int, int, int]:
        """vGPU number, memory (plugin units) and cores held by a queue's pods."""
        return self._holdings.queue_used(queue)

    # --- deciding -------------------------------------------------------------------------------

    def diagnose(self, pod: PodRequest, cycle: PodCycle) -> str:
        """The ``0/N nodes are available`` message: every node judged, every reason counted.
        ``cycle`` is the pod's PreFilter results (``_prepare``)."""
        return self._search.diagnose(pod, cycle, len(self.view.nodes))

    def _queue_refusal(self, queue: str, explicit: bool, grants: Sequence[ContainerGrant]) -> str | None:
        used = self._holdings.queue_used(queue)
        return queue_refusal(self.view, self.config, queue, explicit, grants=grants, used=used)

    def place(self, pod: PodRequest, *, now: int = 0) -> Placement | Unplaceable:
        """Decide where ``pod`` goes (nothing is applied; ``commit`` does that).

        A pod that already holds an entry gets that entry back: after a crash between the ledger
        write and the binding, the next pass binds what was reserved instead of deciding again.
        """
        existing = self.allocation_of(pod.uid)
        if existing is not None:
            return Placement(pod=pod, node=existing[0], allocation=existing[1])
        queue, explicit = pod_queue(pod, self.view)
        refusal = self._queue_refusal(queue, explicit, ())
        if refusal is not None:
            return Unplaceable(pod=pod, message=refusal, cause="queue")
        if self._workloads is not None and pod.facts is not None:
            unsupported = unsupported_message(pod.facts)
            if unsupported is not None:
                return Unplaceable(pod=pod, message=unsupported, cause="unsupported")
        cycle = self._prepare(pod)
        if not pod.containers:
            found_plain = self._search.find_plain(pod, cycle)
            if not isinstance(found_plain, str):
                message = unavailable_message(len(self.view.nodes), found_plain, ())
                return Unplaceable(pod=pod, message=message)
            return Placement(pod=pod, node=found_plain, allocation=_entry(pod, queue, (), now))
        found = self._search.find(pod, cycle, self._search.class_of(pod))
        if found is None:
            return Unplaceable(pod=pod, message=self.diagnose(pod, cycle))
        node, grants = found
        refusal = self._queue_refusal(queue, explicit, grants)
        if refusal is not None:
            return Unplaceable(pod=pod, message=refusal, cause="queue")
        return Placement(pod=pod, node=node, allocation=_entry(pod, queue, grants, now))

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

    def place_gang(
        self, members: Sequence[PodRequest], *, min_member: int, running: int = 0, now: int = 0
    ) -> GangOutcome:
        """Place a PodGroup's pending members in one decision: all that fit, if that reaches minMember.

        Members go in priority/creation order; each sees the ones placed before it. When fewer
        than ``min_member`` could run (``running`` counts members already bound), every placement
        is rolled back and each member gets the reason, so the gang never starts half-way
        (``gang_placement``).
        """
        return place_gang(self, members, min_member=min_member, running=running, now=now)


def _entry(pod: PodRequest, queue: str, grants: tuple[ContainerGrant, ...], now: int) -> Allocation:
    """The ledger entry a placement would hold (a gang member without vGPU: no grants)."""
    return Allocation(
        pod_uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        queue=queue,
        containers=grants,
        reserved_at=now,
        group=pod.group,
    )
