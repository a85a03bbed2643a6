"""The pass's two halves, each built with what it needs and driven alone (issue 37 item 2).

The ``LedgerReconciler`` releases an ended pod's entry with no placer anywhere; the ``Placer``
places and binds a pod with no reconciler. Each is built from the same parts the controller wires
(World, NodeWrites, Reporter, ...), against the API double.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from tests.controller.allocation_testkit import Cluster, gpu_node, vgpu_pod
from tests.controller.listed_inputs import ListedInputs
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.controller.bindings import Bindings
from vgpu_guard.controller.gang_status import GangStatusWriter
from vgpu_guard.controller.ledger_reconciler import LedgerReconciler
from vgpu_guard.controller.metrics import AllocationMetrics
from vgpu_guard.controller.node_queue import NodeQueue
from vgpu_guard.controller.node_writes import NodeWrites
from vgpu_guard.controller.pass_result import PassResult
from vgpu_guard.controller.placer import Placer
from vgpu_guard.controller.pod_parser import PodParser
from vgpu_guard.controller.reports import Reporter
from vgpu_guard.controller.world import World
from vgpu_guard.engine.ledger import decode_ledger
from vgpu_guard.kube.ledger_writer import LedgerWriter


class _Parts:
    """The parts both halves share, over one cluster."""

    def __init__(self, cluster: Cluster) -> None:
        self.client = MemoryClusterClient(cluster.store)
        self.config = cluster.config
        self.clock = cluster.clock
        self.metrics = AllocationMetrics(CollectorRegistry())
        self.inputs = ListedInputs(self.client)
        self.reports = Reporter(
            self.client, self.config, identity="t", clock=self.clock, metrics=self.metrics
        )
        self.world = World(self.config)
        self.parser = PodParser(self.config, lambda: self.world.view.podgroups)
        writer = LedgerWriter(self.client, memory_factor=1, writer="controller")
        self.writes = NodeWrites(
            writer,
            self.world,
            self.reports,
            NodeQueue(base=2.0, cap=16.0),
            memory_factor=1,
            clock=self.clock,
            concurrency=4,
        )

    async def read(self) -> tuple[dict[str, None], tuple[int, ...] | None]:
        inputs = await self.inputs.read(self.config)
        changes = self.world.update(
            inputs.pods,
            inputs.ledgers,
            inputs.view,
            decode=decode_ledger,
            facts=self.parser.facts,
            changed_pods=inputs.changed_pods,
            changed_ledgers=inputs.changed_ledgers,
        )
        self.writes.pass_started(inputs.nodes, changes.nodes)
        return dict(changes.dirty), inputs.generation

    def placer(self) -> Placer:
        gangs = GangStatusWriter(self.client, clock=self.clock)
        bindings = Bindings(
            self.client,
            self.inputs,
            reports=self.reports,
            metrics=self.metrics,
            gang_status=gangs,
            memory_factor=1,
            identity="t",
            clock=self.clock,
            concurrency=4,
        )
        return Placer(
            self.config,
            self.world,
            inputs=self.inputs,
            parser=self.parser,
            writes=self.writes,
            bindings=bindings,
            gang_status=gangs,
            reports=self.reports,
            metrics=self.metrics,
            clock=self.clock,
            concurrency=4,
        )


async def test_the_placer_alone_reserves_commits_and_binds_a_pod() -> None:
    cluster = Cluster([gpu_node("a", 1)])
    cluster.create_pod(vgpu_pod("web", memory=8192))
    parts = _Parts(cluster)
    _, generation = await parts.read()
    result = PassResult()
    await parts.placer().decide(generation, result)
    assert result.reserved == ["default/web"] and result.bound == ["default/web"]
    assert cluster.bound() == {"web": "a"}
    [entry] = cluster.ledgers()["a"].allocations.values()
    assert entry.committed and entry.name == "web"


async def test_the_reconciler_alone_releases_an_ended_pods_entry() -> None:
    cluster = Cluster([gpu_node("a", 1)])
    await cluster.converge(cluster.replica())  # nothing yet: the CRDs and nodes settle
    cluster.create_pod(vgpu_pod("web", memory=8192))
    await cluster.converge(cluster.replica())
    cluster.finish_pod("web")
    parts = _Parts(cluster)
    reconciler = LedgerReconciler(
        parts.client,
        parts.config,
        parts.world,
        writes=parts.writes,
        reports=parts.reports,
        metrics=parts.metrics,
        identity="t",
        clock=parts.clock,
        concurrency=4,
    )
    dirty, _ = await parts.read()
    result = PassResult()
    assert await reconciler.run(dirty, result=result)
    assert result.released == ["default/web"]
    assert cluster.ledgers()["a"].allocations == {}
