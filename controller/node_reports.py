"""What the controller says about nodes and their GPU ledgers, and the per-GPU metrics snapshot.

Broken invariants, unreadable registrations, unwritable ledgers, nodes deleted with allocations.
Apart from the pod reports (controller/reports.py) because its memory is per node: each message is
sent once per distinct text and forgotten when the node goes, so an autoscaled fleet's churn leaves
nothing behind.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_guard.controller.events import Events
from vgpu_guard.controller.metrics import AllocationMetrics, GpuRow, LedgerSnapshot, gpu_rows
from vgpu_guard.controller.node_queue import Unwritable
from vgpu_guard.engine.cluster import ClusterView, NodeInfo
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import API_VERSION as LEDGER_API_VERSION
from vgpu_guard.engine.ledger import GpuUsage, NodeLedger, check_invariants, gpu_usage
from vgpu_guard.engine.objects import Obj
from vgpu_guard.logs import audit

__all__ = ["SNAPSHOT_SECONDS", "NodeReports", "first_few", "unwritable_remedy"]

log = logging.getLogger("vgpu_guard.controller.allocation")

_FINDINGS_SHOWN = 5
# The per-GPU metrics snapshot is rebuilt at most this often (it walks every GPU of the fleet).
SNAPSHOT_SECONDS = 2.0
# What to check when a node's GPULedger cannot be written, by vgpu_guard_ledger_write_failures_total's reason.
_UNWRITABLE_REMEDY = {
    "invalid": (
        "the API server's schema refused it; check the node's volcano.sh/node-vgpu-register annotation "
        "and the volcano.sh/vgpu-ids-new of the pods bound to it for values out of range"
    ),
    "forbidden": (
        "an admission webhook or RBAC refused it; check the webhooks that match gpuledgers.vgpu-guard.io "
        "and the controller's ClusterRole"
    ),
    "not-found": "check that the CRD gpuledgers.vgpu-guard.io is installed (kubectl get crd)",
    "unavailable": "the API server did not complete it; check its health and logs",
    "other": "check the API server's message above",
}
# The refusal of an entry or GPU line by the typed CRD of releases before issue 44 (a string where
# that schema wants an object): the CRD was left behind (crds.install=false, CRDs managed apart).
_OLD_CRD_REFUSAL = re.compile(r"spec\.(allocations|summary\.perGPU)\[\d+\] in body must be of type object")
_OLD_CRD_REMEDY = (
    "the CRD gpuledgers.vgpu-guard.io in the cluster is older than this vgpu-guard (its ledger entries "
    "are one line of text each): apply this release's CRD (the chart's templates/crds.yaml, or "
    "manifests/crds/ where CRDs are managed apart from the chart)"
)


def unwritable_remedy(state: Unwritable) -> str:
    """What to do about a failed ledger write: by its kind, and for a schema refusal that is the
    old CRD's, that CRD (checking annotations would send the reader the wrong way)."""
    if state.reason == "invalid" and _OLD_CRD_REFUSAL.search(state.error):
        return _OLD_CRD_REMEDY
    return _UNWRITABLE_REMEDY[state.reason]


def first_few(items: Sequence[str]) -> list[str]:
    """The first ``_FINDINGS_SHOWN`` items and "and N more": a message names a few and counts the
    rest, whoever wrote the many (an annotation anyone may edit, a node's whole ledger)."""
    if len(items) <= _FINDINGS_SHOWN:
        return list(items)
    return [*items[:_FINDINGS_SHOWN], f"and {len(items) - _FINDINGS_SHOWN} more"]


class NodeReports:
    """Node and ledger reports of one controller, and the per-GPU metrics snapshot."""

    def __init__(
        self, events: Events, config: GuardConfig, *, identity: str, metrics: AllocationMetrics
    ) -> None:
        self.events = events
        self.config = config
        self.identity = identity
        self.metrics = metrics
        self._reported_violations: dict[str, frozenset[str]] = {}
        self._usage: dict[str, dict[str, GpuUsage]] = {}
        self._counts: dict[str, int] = {}
        self._snapshot_at = float("-inf")
        self._snapshot_stale = True
        # How often the per-GPU snapshot may be rebuilt (the run loop sets SNAPSHOT_SECONDS; passes
        # driven by settle() export what they saw at once).
        self.snapshot_seconds = 0.0
        # Entries found below their pod's assignment and raised, by node, until the pod ends.
        self.repaired: dict[str, set[str]] = {}
        # Nodes deleted while their ledger held allocations, reported once until they come back.
        self._gone_reported: set[str] = set()
        # Node -> the unwritable-ledger message last reported (Events once per distinct message).
        self._unwritable_reported: dict[str, str] = {}
        # Node -> the registration problem last reported.
        self._registration_reported: dict[str, str] = {}
        self._view: ClusterView | None = None
        # The metrics snapshot's parts, kept by the change: each node's GPU rows (nodes with GPUs
        # and a readable registration), and the nodes whose registration does not parse.
        self._rows: dict[str, tuple[GpuRow, ...]] = {}
        self._bad_registrations: set[str] = set()

    async def violations(
        self,
        view: ClusterView,
        ledgers: Mapping[str, NodeLedger],
        nodes: Mapping[str, Obj],
        changed: set[str],
    ) -> None:
        """A loud report of any broken invariant (pre-existing overcommit) on the ``changed`` nodes;
        the metrics snapshot follows at most every SNAPSHOT_SECONDS."""
        factor = self.config.nvidia.gpu_memory_factor
        for name in changed:
            info, ledger = view.nodes.get(name), ledgers.get(name) or NodeLedger(node=name)
            if info is None:
                self._report_gone(name, ledger)
            else:
                self._gone_reported.discard(name)
            if info is not None:
                await self._registration(name, info, nodes)
            if info is not None and info.gpu_problem is not None and not info.gpus:
                self._bad_registrations.add(name)
            else:
                self._bad_registrations.discard(name)
            if info is None or (not info.gpus and not ledger.allocations):
                # Gone, or a CPU node with nothing reserved: no series of its own (an autoscaled
                # fleet's churn must not leave one per node that ever changed).
                self._forget_node(name, gone=info is None)
                continue
            await self._check_node(name, info, ledger, nodes, factor)
        self._snapshot_stale = self._snapshot_stale or bool(changed)
        self._view = view
        self.refresh_snapshot()

    async def ledger_unwritable(
        self, node: Mapping[str, Any] | None, name: str, state: Unwritable, pods: Sequence[str], *, now: float
    ) -> None:
        """A write of ``name``'s GPULedger failed (not a conflict): counted every time; a Warning
        Event on the Node and on the GPULedger, an error line and an audit line once per distinct
        error. ``pods``: the pods that were decided for the node in this pass and wait again."""
        self.metrics.ledger_write_failures.labels(name, state.reason).inc()
        message = (
            f"the GPULedger of node {name} cannot be written: {state.error}; "
            f"{unwritable_remedy(state)}; no new vGPU pod is placed on this node until a write "
            "succeeds (retried with backoff), "
            "and every other node places and binds as before"
        )
        if self._unwritable_reported.get(name) == message:
            return
        self._unwritable_reported[name] = message
        shown = first_few(pods)
        log.error(
            "%s (retry in %.1f s, failure %d in a row; pods sent back to the queue: %s)",
            message,
            state.retry_in(now),
            state.failures,
            ", ".join(shown) or "none",
        )
        audit(
            "ledger-unwritable",
            node=name,
            reason=state.reason,
            error=state.error,
            pods=shown,
            by=self.identity,
        )
        node_obj = {**(node or {"metadata": {"name": name}}), "kind": "Node", "apiVersion": "v1"}
        self.events.emit(
            self.events.event(node_obj, reason="LedgerWriteFailed", message=message, type_="Warning")
        )
        ledger = {"apiVersion": LEDGER_API_VERSION, "kind": "GPULedger", "metadata": {"name": name}}
        self.events.emit(
            self.events.event(ledger, reason="LedgerWriteFailed", message=message, type_="Warning")
        )

    def ledger_written(self, name: str, recovered: Unwritable) -> None:
        """A write of ``name``'s ledger succeeded after ``recovered.failures`` failures: say so once."""
        if self._unwritable_reported.pop(name, None) is not None:
            log.info(
                "the GPULedger of node %s is written again after %d failed attempts; the node takes new pods",
                name,
                recovered.failures,
            )
            audit("ledger-writable", node=name, failures=recovered.failures, by=self.identity)

    async def _registration(self, name: str, info: NodeInfo, nodes: Mapping[str, Obj]) -> None:
        """A Warning Event on a node whose GPU registration does not parse, once per problem: the
        node gets no vGPU pod (its registration is read as no GPUs), which nobody would otherwise
        learn but from a pod's ``0/N nodes`` message. The gauge comes with the snapshot."""
        problem = info.gpu_problem if info.gpu_problem is not None and not info.gpus else None
        if problem is None:
            self._registration_reported.pop(name, None)
            return
        if self._registration_reported.get(name) == problem:
            return
        self._registration_reported[name] = problem
        message = (
            f"the vGPU registration of node {name} cannot be read: {problem}; vgpu-guard places no vGPU "
            "pod on this node until the device plugin registers it again with values in range; check "
            "the volcano-vgpu-device-plugin on this node and who else writes its annotations"
        )
        log.error("%s", message)
        audit("invalid-registration", node=name, problem=problem, by=self.identity)
        node_obj = nodes.get(name, {"metadata": {"name": name}})
        await self.events.event(
            {**node_obj, "kind": "Node", "apiVersion": "v1"},
            reason="InvalidGPURegistration",
            message=message,
            type_="Warning",
        )

    def _report_gone(self, name: str, ledger: NodeLedger) -> None:
        """Once per deletion: a node deleted while its ledger holds allocations. Their pods are
        still bound to it (kube-controller-manager's pod garbage collector deletes them), and each
        entry is held until its pod ends; an operator replacing the node should know which."""
        if not ledger.allocations or name in self._gone_reported:
            return
        self._gone_reported.add(name)
        pods = sorted(entry.key for entry in ledger.allocations.values())
        shown = first_few(pods)
        count = f"{len(pods)} vGPU allocation{'' if len(pods) == 1 else 's'}"
        log.warning(
            "node %s was deleted with %s in its ledger (pods %s); each is held until its pod ends",
            name,
            count,
            ", ".join(shown),
        )
        audit("node-deleted-with-allocations", node=name, allocations=len(pods), by=self.identity)

    def refresh_snapshot(self) -> None:
        """Rebuild the per-GPU snapshot if it is stale and ``snapshot_seconds`` have passed (the run
        loop calls this every round too, so a quiet cluster's last change is exported soon)."""
        now = time.monotonic()
        if self._view is None or not self._snapshot_stale or now - self._snapshot_at < self.snapshot_seconds:
            return
        # A node can go in a pass that ends early (after a release it writes), whose changes the
        # next pass no longer sees: what the view no longer holds is dropped here, as rarely as
        # the snapshot is rebuilt.
        for name in [n for n in self._counts if n not in self._view.nodes]:
            self._forget_node(name, gone=True)
        self.metrics.ledgers.snapshot = LedgerSnapshot(
            dict(self._rows), dict(self._counts), tuple(sorted(self._bad_registrations))
        )
        self._snapshot_at, self._snapshot_stale = now, False

    def _forget_node(self, name: str, *, gone: bool) -> None:
        self._usage.pop(name, None)
        self._rows.pop(name, None)
        if gone:
            self._bad_registrations.discard(name)
        self._counts.pop(name, None)
        self._reported_violations.pop(name, None)
        if gone:
            self._registration_reported.pop(name, None)
            self._unwritable_reported.pop(name, None)
            self.metrics.forget_node(name)

    async def _check_node(
        self, name: str, info: NodeInfo, ledger: NodeLedger, nodes: Mapping[str, Obj], factor: int
    ) -> None:
        self._usage[name] = gpu_usage(ledger.allocations.values())
        rows = gpu_rows(name, info, self._usage[name], factor)
        if rows:
            self._rows[name] = rows
        else:
            self._rows.pop(name, None)
        violations = check_invariants(ledger, info, memory_factor=factor, usage=self._usage[name])
        self._counts[name] = len(violations) + len(self.repaired.get(name, ()))
        messages = frozenset(v.message for v in violations)
        if messages and messages != self._reported_violations.get(name):
            text = "; ".join(sorted(messages))
            log.error("GPU ledger of node %s breaks its invariants: %s", name, text)
            audit("overcommit", node=name, violations=sorted(messages), by=self.identity)
            node_obj = nodes.get(name, {"kind": "Node", "metadata": {"name": name}})
            await self.events.event(
                {**node_obj, "kind": "Node", "apiVersion": "v1"},
                reason="GPUOvercommitted",
                message=(
                    f"{text}; either these pods were bound before vgpu-guard reserved them, or the "
                    "node's GPU registration shrank under them; nothing is evicted: new pods are kept "
                    "off these GPUs until enough of them end"
                ),
                type_="Warning",
            )
        self._reported_violations[name] = messages

    def clear_snapshot(self) -> None:
        """A standby exports no GPUs (the leader does)."""
        self.metrics.ledgers.snapshot = LedgerSnapshot()
        self._snapshot_stale = True

    def forget_pods(self, gone: set[str]) -> None:
        """Stop counting the repaired entries of pods that are gone (by UID)."""
        for node, uids in list(self.repaired.items()):
            uids.difference_update(gone)
            if not uids:
                del self.repaired[node]
