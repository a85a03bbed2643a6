"""The allocation controller: one pass = take in changes -> release/verify/adopt -> decide -> CAS -> bind.

A pass reads its inputs (``InputSource``: the informers' caches in ``serve`` and ``simulate``) and
hands them to ``World`` (controller/world.py), which finds what changed since the last pass and
keeps the allocator and kube-scheduler's workloads in step with it, so a pass costs what changed,
not what the cluster holds. Every ledger write carries the resourceVersion it was decided on; on
409 the pass stops and the next one decides again from fresh state (``settle`` loops). A pod is
bound only after a successful write that marks its entry ``committed``; committed entries are
released only when the pod ends (deleted, Succeeded, Failed) or is found bound elsewhere.
docs/design/ledger.md walks through every crash window, and why stale caches are safe.

Per pass:
1. release entries of ended pods, cross-check entries against their bound pods' assignment
   annotations (hold the larger), adopt bound pods that carry an assignment but have no entry;
   all over the pods and entries that changed (``Changes.dirty``); report invariant violations of
   the nodes that changed (Event, metric, audit line; never evict);
2. place pending pods (ours: ``spec.schedulerName``) in priority/creation order, gangs as one
   decision; a single pod is reserved and committed in one write;
3. write the changed ledgers (CAS, all nodes at once, bounded), hand the committed entries to the
   Binder (one binding in flight per node, the plugin's handshake), and report ``PodScheduled=False``
   with the reason for pods that cannot be placed.

The pass is three named steps over objects that each own one half (docs/design/controller.md):
``LedgerReconciler`` (controller/ledger_reconciler.py) for step 1, ``Placer`` (controller/placer.py)
for steps 2 and 3, both writing through ``NodeWrites`` (controller/node_writes.py) and reading pods
through ``PodParser`` (controller/pod_parser.py); this class builds them and runs the pass.

A write that fails for one node other than by a 409 (the CRD schema, an admission webhook, a 500)
stops nothing but that node: its decisions are undone, it takes no new pod until its retry (with
backoff, controller/node_queue.py), and it is reported on the Node and its GPULedger; every other
node's writes and bindings go on in the same pass (issue 36). A 409 costs its node alone too: its
decisions are undone and decided again on a fresh read of its ledger (controller/node_writes.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from prometheus_client import REGISTRY, CollectorRegistry

from vgpu_guard.controller.binder import Binder
from vgpu_guard.controller.bindings import Bindings
from vgpu_guard.controller.gang_status import GangStatusWriter
from vgpu_guard.controller.handshakes import CLOCK_SKEW_SECONDS
from vgpu_guard.controller.inputs import InputSource
from vgpu_guard.controller.ledger_gc import LedgerCollector
from vgpu_guard.controller.ledger_reconciler import LedgerReconciler, release_reason
from vgpu_guard.controller.metrics import AllocationMetrics
from vgpu_guard.controller.node_queue import NodeQueue
from vgpu_guard.controller.node_writes import NodeConflicts, NodeWrites
from vgpu_guard.controller.pass_result import PassResult
from vgpu_guard.controller.placer import Placer
from vgpu_guard.controller.pod_parser import PodParser
from vgpu_guard.controller.reports import Reporter
from vgpu_guard.controller.world import World
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import decode_ledger
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import Conflict, KubeError
from vgpu_guard.kube.ledger_writer import LedgerWriter

__all__ = ["CLOCK_SKEW_SECONDS", "AllocationController", "Clock", "PassResult", "release_reason"]

log = logging.getLogger("vgpu_guard.controller.allocation")

Clock = Callable[[], float]

# A node whose ledger write failed is retried after this many seconds, doubling per failure in a row
# up to NODE_RETRY_CAP_SECONDS (run_controller passes its own retry period and cap).
NODE_RETRY_SECONDS = 2.0
NODE_RETRY_CAP_SECONDS = 16.0

# Requests of one pass sent at once (ledger writes of different nodes, bindings, reports): enough to
# keep the API server busy while this process decides nothing meanwhile, few enough that a pass over a
# flood of unplaceable pods does not swamp it.
WRITE_CONCURRENCY = 16


class AllocationController:
    """Builds the pass's parts around one World and runs passes: ``run_once``, ``settle``."""

    def __init__(
        self,
        client: ClusterClient,
        config: GuardConfig,
        *,
        identity: str,
        clock: Clock = time.time,
        registry: CollectorRegistry = REGISTRY,
        metrics: AllocationMetrics | None = None,
        inputs: InputSource,
        write_concurrency: int = WRITE_CONCURRENCY,
        node_retry_seconds: float = NODE_RETRY_SECONDS,
        node_retry_cap_seconds: float = NODE_RETRY_CAP_SECONDS,
        background_events: bool = False,
        wake: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self.config = config
        self.identity = identity
        self.clock = clock
        self.metrics = metrics = metrics or AllocationMetrics(registry)
        source = self.inputs = inputs
        self.reports = reports = Reporter(client, config, identity=identity, clock=clock, metrics=metrics)
        self.world = world = World(config)
        self.parser = PodParser(config, lambda: world.view.podgroups)
        self.writer = self._writer(source)
        # The work keyed by node: a node whose ledger write failed (not a 409) is held out of
        # placement until its retry, forgotten when a write of it succeeds.
        self.node_queue = NodeQueue(base=node_retry_seconds, cap=node_retry_cap_seconds)
        self.writes = NodeWrites(
            self.writer,
            world,
            reports,
            self.node_queue,
            memory_factor=config.nvidia.gpu_memory_factor,
            clock=clock,
            concurrency=write_concurrency,
        )
        self.reconciler = self._reconciler(write_concurrency)
        self.gang_status = GangStatusWriter(client, clock=clock)
        self.ledger_gc = LedgerCollector(client)
        self.bindings = self._bindings(source, write_concurrency, wake)
        self.placer = self._placer(source, write_concurrency, background_events)
        self._last_error: str | None = None

    def _writer(self, source: InputSource) -> LedgerWriter:
        """Every ledger write goes through the writer the webhook's arbiter uses too; our own
        writes reach the informer cache at once (``source.wrote_ledger``)."""
        return LedgerWriter(
            self.client,
            memory_factor=self.config.nvidia.gpu_memory_factor,
            writer="controller",
            metrics=self.metrics.ledger_writes,
            on_written=source.wrote_ledger,
        )

    def _reconciler(self, concurrency: int) -> LedgerReconciler:
        """The ledger half of a pass: release, verify, adopt, over the same World and writes."""
        return LedgerReconciler(
            self.client,
            self.config,
            self.world,
            writes=self.writes,
            reports=self.reports,
            metrics=self.metrics,
            identity=self.identity,
            clock=self.clock,
            concurrency=concurrency,
        )

    def _bindings(self, source: InputSource, concurrency: int, wake: Callable[[], None] | None) -> Bindings:
        """Binds what the placer decided; ``wake`` starts a pass when a handshake frees a node."""
        return Bindings(
            self.client,
            source,
            reports=self.reports,
            metrics=self.metrics,
            gang_status=self.gang_status,
            memory_factor=self.config.nvidia.gpu_memory_factor,
            identity=self.identity,
            clock=self.clock,
            concurrency=concurrency,
            wake=wake,
        )

    def _placer(self, source: InputSource, concurrency: int, background_events: bool) -> Placer:
        """The placement half of a pass: pending pods to ledger writes and bindings."""
        return Placer(
            self.config,
            self.world,
            inputs=source,
            parser=self.parser,
            writes=self.writes,
            bindings=self.bindings,
            gang_status=self.gang_status,
            reports=self.reports,
            metrics=self.metrics,
            clock=self.clock,
            concurrency=concurrency,
            background_events=background_events,
        )

    @property
    def background_events(self) -> bool:
        """Events and bindings leave in the background (the run loop); else a pass awaits them."""
        return self.placer.background_events

    @background_events.setter
    def background_events(self, value: bool) -> None:
        self.placer.background_events = value

    @property
    def binder(self) -> Binder:
        """The per-node binding queues (the run loop feeds them the pod informer's events)."""
        return self.bindings.binder

    def retry_due(self) -> bool:
        """A held node's retry came due since the last decision (the run loop passes then)."""
        return self.placer.retry_due()

    def next_retry_in(self) -> float | None:
        """Seconds until a held node's retry is due (None: no node waits): the run loop wakes then."""
        return self.node_queue.next_due(self.clock())

    async def flush_events(self) -> None:
        await self.reports.events.flush_events()

    # --- the pass ------------------------------------------------------------------------------

    async def run_once(self) -> PassResult:
        """One pass (see the module docstring); never raises for API errors."""
        result = PassResult()
        started = time.monotonic()
        try:
            await self._pass(result)
            log.debug(
                "pass: %.1f ms, %d pending, %d reserved, %d bound",
                (time.monotonic() - started) * 1000,
                result.pending,
                len(result.reserved),
                len(result.bound),
            )
            if not self.background_events:
                await self.flush_events()
        except NodeConflicts as e:
            # The nodes that lost were undone where they lost (a gang split across them ends the
            # pass); the world and every other node's work stand (issue 44).
            log.info("a gang's ledger write lost a race, re-deciding it on the next pass: %s", e)
        except Conflict as e:
            self.world.resync()  # what the allocator decided may not be what the ledgers hold
            self.metrics.allocator_rebuilds.labels("conflict").inc()
            self.metrics.conflicts.inc()
            result.conflicts += 1
            log.info("ledger write lost a race, re-deciding on the next pass: %s", e)
        except KubeError as e:
            self.world.resync()
            self.metrics.allocator_rebuilds.labels("api-error").inc()
            result.errors.append(str(e))
            if str(e) != self._last_error:
                log.warning(
                    "allocation pass failed, retrying with backoff (logged again if the error changes): %s", e
                )
            self._last_error = str(e)
            return result
        if self._last_error is not None:
            log.info("allocation passes succeed again")
        self._last_error = None
        return result

    async def settle(self, *, max_passes: int = 100) -> list[PassResult]:
        """Run passes until one changes nothing (or ``max_passes``): what ``simulate`` calls."""
        results = []
        for _ in range(max_passes):
            outcome = await self.run_once()
            results.append(outcome)
            # Settled, or failing: a failing pass is not retried here (the caller backs off).
            if not outcome.changed or outcome.errors:
                break
        return results

    async def _pass(self, result: PassResult) -> None:
        """Take in the changes, reconcile the ledgers, then (unless that wrote) place and bind."""
        inputs = await self.inputs.read(self.config)
        world = self.world
        changes = world.update(
            inputs.pods,
            inputs.ledgers,
            inputs.view,
            decode=decode_ledger,
            facts=self.parser.facts,
            changed_pods=inputs.changed_pods,
            changed_ledgers=inputs.changed_ledgers,
        )
        for node in self.writes.pass_started(inputs.nodes, changes.nodes):
            self.binder.forget_node(node)
        # Ledgers an older release wrote (one JSON object per entry) are rewritten as text, entries
        # unchanged, a slice a pass: found where a ledger changed (every ledger at a start, and each
        # one an old replica writes during an upgrade), never by a look through the fleet.
        self.writes.rewrite_due(world.legacy_among(changes.ledgers))
        if changes.freed:
            self.placer.capacity_freed()
        self.parser.forget(changes.gone)
        self.reports.forget_pods(changes.gone)
        self.reports.stale_picks.observe(world, changes.dirty, changes.gone, inputs.nodes)
        self.ledger_gc.consider(changes.ledgers | changes.nodes)
        if await self.reconciler.run(changes.dirty, result=result):
            return  # the next pass starts from what was just written (fresh resourceVersions)
        self.placer.hold_unwritable()
        try:
            await self.placer.decide(inputs.generation, result)
        finally:
            # After the decision: the report evicts nothing and blocks nothing (the write check
            # judges only GPUs that gain an entry), and at a start it checks every node (~2 s at
            # 5,000 nodes) that the first bind would otherwise wait for.
            await self.reports.nodes.violations(
                world.view, world.ledgers, inputs.nodes, changes.ledgers | changes.nodes
            )
        deleted = await self.ledger_gc.collect(world.ledgers, inputs.ledgers, inputs.nodes)
        self.metrics.ledgers_deleted.inc(len(deleted))
        result.ledgers_deleted.extend(deleted)
