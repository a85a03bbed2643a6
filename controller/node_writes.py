"""The pass's GPULedger writes, node by node, and what a node whose write fails gets.

Both halves of a pass write ledgers (the reconciler its releases and adoptions, the placer its
reservations) and both need the same rules (issue 36): every write is a CAS through the one
``LedgerWriter``; a 409 is that node's alone (issue 44: with the arbiter writing the same ledgers
races are routine): once all writes have ended ``NodeConflicts`` names the nodes that lost, and the
caller undoes its decisions there and decides them again from a fresh read of that node's ledger
(one GET, taken into the cache: ``LedgerWriter.refresh``), leaving every other
node's work and the world as they are; any other failure is that node's alone too: it is held
out of placement until its retry (controller/node_queue.py) and reported on the Node and its
GPULedger, and every other node's writes go on. The ledger summary (kubectl's FREE-MIB) follows
registration changes here too, with the same write rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from vgpu_guard.controller.node_queue import NodeQueue
from vgpu_guard.controller.reports import Reporter
from vgpu_guard.controller.world import World
from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.ledger import NodeLedger
from vgpu_guard.engine.ledger_summary import ledger_summary
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.bounded import gather_bounded
from vgpu_guard.kube.errors import Conflict, KubeError, NotFound
from vgpu_guard.kube.ledger_writer import LedgerWriter

__all__ = ["SUMMARY_CHECKS_PER_PASS", "NodeConflicts", "NodeWrites", "Write"]

# One ledger write: the ledger as read, the ledger to write, the node's registration (for the summary).
Write = tuple[NodeLedger, NodeLedger, NodeInfo | None]

# Ledger summaries compared with their node's registration per pass (the rest wait for the next).
SUMMARY_CHECKS_PER_PASS = 256


class NodeConflicts(Conflict):
    """Some nodes' ledger writes lost a race (409, or the ledger was deleted under the write); the
    other writes landed or ``failed`` (not held yet: the caller holds them as it would have)."""

    def __init__(self, lost: Mapping[str, Conflict], failed: Mapping[str, KubeError]) -> None:
        names = ", ".join(sorted(lost))
        super().__init__(f"GPULedger writes lost a race on {names}: {next(iter(lost.values()))}", code=409)
        self.lost = dict(lost)
        self.failed = dict(failed)


class NodeWrites:
    """CAS writes per node with per-node failure; the held nodes; summaries after registration changes."""

    def __init__(
        self,
        writer: LedgerWriter,
        world: World,
        reports: Reporter,
        node_queue: NodeQueue,
        *,
        memory_factor: int,
        clock: Callable[[], float],
        concurrency: int,
    ) -> None:
        self.writer = writer
        self.world = world
        self.reports = reports
        self.node_queue = node_queue
        self.memory_factor = memory_factor
        self.clock = clock
        self.concurrency = concurrency
        # Nodes whose registration changed since their ledger's summary was last checked: the
        # summary is rewritten when it no longer matches (issue 36 item 5).
        self._summary_due: set[str] = set()
        self._node_objs: Mapping[str, Obj] = {}  # the pass's Node objects (for their Events)
        self._seen: set[str] = set()  # nodes known from an earlier pass

    def pass_started(self, nodes: Mapping[str, Obj], changed_nodes: set[str]) -> set[str]:
        """Take in the pass's Node objects and which nodes changed (their summaries are due);
        returns the changed nodes that are gone (whatever else waits for them can go too).

        A node seen for the first time (every node at a start) is not due: its ledger's summary
        was written with the registration of its last write, and comparing and rewriting every
        ledger of the cluster at a start is a write per node (5,000 at once, for a printed
        column) that delayed new pods' bindings by up to ~0.6 s in bench/controller_scale_bench.py.
        A registration that changes while we run is due; one that changed while we were down is
        shown at the node's next write.
        """
        self._node_objs = nodes
        known = self.world.view.nodes.keys()
        gone: set[str] = set()
        # By the change only (issue 44): a pass touches the nodes that changed, never the fleet.
        for name in changed_nodes:
            if name not in known:
                gone.add(name)
                self._seen.discard(name)
                self._summary_due.discard(name)
                self.node_queue.drop(name)  # a node that is gone has nothing to retry
            elif name in self._seen:
                self._summary_due.add(name)
            else:
                self._seen.add(name)
        return gone

    async def write(self, writes: Mapping[str, Write]) -> dict[str, KubeError]:
        """CAS-write each node's ledger (all at once, bounded); returns the nodes whose write failed
        and why. Nodes that lost a race are raised as ``NodeConflicts`` once every write has ended
        (with the failed ones); any other error is that node's alone (``hold``)."""
        failed: dict[str, KubeError] = {}
        conflicts: dict[str, Conflict] = {}

        async def one(name: str, old: NodeLedger, new: NodeLedger, info: NodeInfo | None) -> None:
            try:
                await self.writer.write(old, new, info)
            except Conflict as e:
                conflicts[name] = e
                return
            except NotFound as e:
                if old.resource_version is None:
                    failed[name] = e  # a POST: the resource itself is not served
                    return
                # Deleted since it was read: as stale as a 409, decided again from the next read.
                conflicts[name] = Conflict(f"GPULedger {name} was deleted under this write: {e}", code=409)
                return
            except KubeError as e:
                failed[name] = e
                return
            recovered = self.node_queue.forget(name)
            if recovered is not None:
                self.reports.nodes.ledger_written(name, recovered)

        await gather_bounded((one(name, *args) for name, args in sorted(writes.items())), self.concurrency)
        if conflicts:
            # Each loser is decided again on a fresh read of its own ledger, not the cached one that
            # lost (the watch may not have brought the winner yet); no other node is read.
            await gather_bounded((self.writer.refresh(name) for name in sorted(conflicts)), self.concurrency)
            raise NodeConflicts(conflicts, failed)
        return failed

    async def hold(self, name: str, error: KubeError, pods: Sequence[str]) -> None:
        """Hold ``name`` until its retry and report it (the Node, its GPULedger, the metric)."""
        now = self.clock()
        state = self.node_queue.add_rate_limited(name, error, now)
        self.world.held = self.node_queue.held(now)  # the allocator holds it from the next decision
        await self.reports.nodes.ledger_unwritable(self._node_objs.get(name), name, state, pods, now=now)

    def blocked(self, name: str) -> bool:
        """The node's retry is not due: leave its writes for a later pass."""
        return self.node_queue.blocked(name, self.clock())

    def held_now(self) -> dict[str, str]:
        """The nodes held out of placement now (node -> why)."""
        return self.node_queue.held(self.clock())

    def rewrite_due(self, names: Iterable[str]) -> None:
        """Rewrite these ledgers as summaries are (entries unchanged, a slice a pass): ledgers stored
        in the encoding of a release before issue 44 (LedgerReconciler finds them)."""
        self._summary_due.update(names)

    async def refresh_summaries(self, written: set[str]) -> None:
        """Rewrite the summary of ledgers whose node's registration changed since (one CAS write per
        node, entries unchanged): ``kubectl get gpuledgers`` shows FREE-MIB against what the node
        registers now, not what it registered at the last write. A node written in this pass got
        its summary then; a held node waits for its retry; a 409 leaves it for the next pass."""
        due = sorted(self._summary_due - written)
        # A start finds every node changed: its summaries are checked a slice per pass (a check is
        # ~80 us; 5,000 nodes at once would hold the first pass up ~0.4 s for a cosmetic field).
        due, rest = due[:SUMMARY_CHECKS_PER_PASS], due[SUMMARY_CHECKS_PER_PASS:]
        self._summary_due = set(rest)
        world = self.world
        writes: dict[str, Write] = {}
        for name in due:
            ledger = world.ledgers.get(name)
            if ledger is None or name in world.bad:
                continue  # no ledger to rewrite (the first write brings the summary)
            if self.blocked(name):
                self._summary_due.add(name)
                continue
            info = world.view.nodes.get(name)
            summary = ledger_summary(ledger, info, self.memory_factor)
            if ledger.legacy or world.stored_summary(name) != summary:
                writes[name] = (ledger, ledger, info)
        if not writes:
            return
        try:
            failed = await self.write(writes)
        except Conflict:
            self._summary_due |= set(writes)  # someone wrote first; the next pass looks again
            raise
        for name in sorted(failed):
            self._summary_due.add(name)
            await self.hold(name, failed[name], ())
