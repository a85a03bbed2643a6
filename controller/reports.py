"""What the controller tells people: Events, PodScheduled conditions, audit lines, the GPU metrics.

Kept apart from the decisions (controller/allocation.py) so that a pass reads as the steps it takes.
Every report is sent once per distinct message (a pod's condition is patched only when its message
changes; a finding is reported once per pod and text), so a steady cluster sends nothing. Events go
out in the background (``emit``), so bindings never wait behind them; ``flush_events`` waits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from vgpu_guard.controller.metrics import AllocationMetrics, LedgerSnapshot
from vgpu_guard.controller.unwritable import Unwritable
from vgpu_guard.engine.annotations import VGPU_IDS
from vgpu_guard.engine.cluster import ClusterView, NodeInfo
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import API_VERSION as LEDGER_API_VERSION
from vgpu_guard.engine.ledger import Allocation, GpuUsage, NodeLedger, check_invariants, gpu_usage
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import KubeError, NotFound
from vgpu_guard.kube.resources import EVENTS, PODS
from vgpu_guard.logs import audit

__all__ = ["PassReports", "Reporter"]

log = logging.getLogger("vgpu_guard.controller.allocation")

Obj = dict[str, Any]
_COMPONENT = "vgpu-guard"
_EVENT_MESSAGE_LIMIT = 1024
_FINDINGS_SHOWN = 5
# Events waiting to be sent (for their rate limit) beyond which new ones are dropped and counted.
MAX_PENDING_EVENTS = 1000
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


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def _first_few(items: Sequence[str]) -> list[str]:
    """The first ``_FINDINGS_SHOWN`` items and "and N more": a message names a few and counts the
    rest, whoever wrote the many (an annotation anyone may edit, a node's whole ledger)."""
    if len(items) <= _FINDINGS_SHOWN:
        return list(items)
    return [*items[:_FINDINGS_SHOWN], f"and {len(items) - _FINDINGS_SHOWN} more"]


def _retrieved(task: asyncio.Task[None]) -> None:
    """``event`` logs its own API errors; anything else ends here, logged, never unretrieved."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("sending an Event failed: %s", task.exception())


class PassReports:
    """The unschedulable pods a pass reported (for ``PassResult``) and its errors."""

    def __init__(self) -> None:
        self.unschedulable: list[str] = []
        self.errors: list[str] = []


class Reporter:
    """Events, conditions, audit lines and the ledger metrics of one controller."""

    def __init__(
        self,
        client: ClusterClient,
        config: GuardConfig,
        *,
        identity: str,
        clock: Callable[[], float],
        metrics: AllocationMetrics,
    ) -> None:
        self.client = client
        self.config = config
        self.identity = identity
        self.clock = clock
        self.metrics = metrics
        self._events: set[asyncio.Task[None]] = set()
        self._reported_pods: set[tuple[str, str]] = set()
        # Pod UID -> (the resourceVersion it was reported unschedulable from, the message): until a
        # newer version of the pod reaches the cache, the patch we sent is not in it yet, and a
        # pass in that window must not patch and send the Event again.
        self._unschedulable_sent: dict[str, tuple[str, str]] = {}
        self.reported_findings: set[tuple[str, str, str]] = set()
        self._reported_violations: dict[str, frozenset[str]] = {}
        self._usage: dict[str, dict[str, GpuUsage]] = {}
        self._counts: dict[str, int] = {}
        self._snapshot_at = float("-inf")
        self._snapshot_stale = True
        # How often the per-GPU snapshot may be rebuilt (the run loop sets SNAPSHOT_SECONDS; passes
        # driven by settle() export what they saw at once).
        self.snapshot_seconds = 0.0
        # Entries found below their pod's assignment and raised, by node, until the pod ends.
        self._repaired: dict[str, set[str]] = {}
        # Nodes deleted while their ledger held allocations, reported once until they come back.
        self._gone_reported: set[str] = set()
        # Node -> the unwritable-ledger message last reported (Events once per distinct message).
        self._unwritable_reported: dict[str, str] = {}
        # Node -> the registration problem last reported.
        self._registration_reported: dict[str, str] = {}
        self._view: ClusterView | None = None

    def emit(self, event: Coroutine[Any, Any, None]) -> None:
        """Send an Event without holding up the caller; ``flush_events`` waits for all of them.

        Events wait for their own rate limit; when MAX_PENDING_EVENTS already wait, a new one is
        dropped and counted (kube-scheduler's event broadcaster drops too, when its queue is full),
        so a burst of bindings faster than the Events budget cannot grow memory without bound.
        """
        if len(self._events) >= MAX_PENDING_EVENTS:
            event.close()
            self.metrics.events_dropped.inc()
            return
        task = asyncio.ensure_future(event)
        self._events.add(task)
        task.add_done_callback(_retrieved)
        task.add_done_callback(self._events.discard)

    async def flush_events(self) -> None:
        """Wait for the Events sent in the background so far (they log their own failures)."""
        while self._events:
            await asyncio.gather(*list(self._events), return_exceptions=True)

    async def event(
        self, obj: Mapping[str, Any], *, reason: str, message: str, type_: str = "Normal"
    ) -> None:
        meta = _meta(obj)
        kind = str(obj.get("kind") or "Pod")
        namespace = str(meta.get("namespace") or "default")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        if len(message) > _EVENT_MESSAGE_LIMIT:
            message = message[: _EVENT_MESSAGE_LIMIT - 15] + "... (truncated)"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": str(obj.get("apiVersion") or "v1"),
                "kind": kind,
                "name": meta.get("name"),
                "namespace": meta.get("namespace") or "",
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": _COMPONENT},
            "reportingComponent": _COMPONENT,
            "reportingInstance": self.identity,
        }
        try:
            await self.client.create(EVENTS, event, namespace=namespace)
        except KubeError as e:
            log.warning("cannot record event %s on %s/%s: %s", reason, namespace, meta.get("name"), e)

    async def once(self, pod: Obj, reason: str, message: str) -> None:
        key = (str(_meta(pod).get("uid")), reason)
        if key in self._reported_pods:
            return
        self._reported_pods.add(key)
        await self.event(pod, reason=reason, message=message, type_="Warning")
        audit(reason, pod=f"{_meta(pod).get('namespace')}/{_meta(pod).get('name')}", by=self.identity)

    async def unschedulable(self, pod: Obj, message: str, result: PassReports) -> None:
        """PodScheduled=False/Unschedulable with the message, and an Event, when the message is new."""
        meta = _meta(pod)
        status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
        assert isinstance(status, Mapping)
        conditions = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        result.unschedulable.append(f"{meta.get('namespace')}/{meta.get('name')}")
        if current is not None and current.get("status") == "False" and current.get("message") == message:
            return
        uid, version = str(meta.get("uid")), str(meta.get("resourceVersion") or "")
        if version and self._unschedulable_sent.get(uid) == (version, message):
            return  # sent from this very version: the cache has not shown our patch yet
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
        others = [dict(c) for c in conditions if c.get("type") != "PodScheduled"]
        try:
            await self.client.patch(
                PODS,
                str(meta.get("name")),
                {"status": {"conditions": [*others, condition]}},
                namespace=str(meta.get("namespace")),
                subresource="status",
            )
        except NotFound:
            return
        except KubeError as e:
            result.errors.append(f"pods/status {meta.get('namespace')}/{meta.get('name')}: {e}")
            return
        self._unschedulable_sent[uid] = (version, message)
        self.metrics.unschedulable.inc()
        self.emit(self.event(pod, reason="FailedScheduling", message=message, type_="Warning"))

    async def invalid_assignment(self, pod: Obj, problems: Sequence[str]) -> None:
        """Warning ``InvalidAssignmentEntry`` on the pod, once per distinct set of bad entries."""
        # Anyone who may update the pod writes this annotation: name a few entries, count the rest.
        shown = _first_few(problems)
        message = (
            f"{VGPU_IDS} has invalid entries: {'; '.join(shown)}; the device plugin skips "
            "malformed devices; every valid device is held in the GPU ledger until the pod ends"
        )
        key = (str(_meta(pod).get("uid")), "InvalidAssignmentEntry", message)
        if key in self.reported_findings:
            return
        self.reported_findings.add(key)
        name = f"{_meta(pod).get('namespace')}/{_meta(pod).get('name')}"
        self.metrics.assignment_mismatches.labels("invalid-entry").inc(len(problems))
        log.warning("pod %s: %s", name, message)
        audit("invalid-assignment", pod=name, entries=shown, by=self.identity)
        await self.event(pod, reason="InvalidAssignmentEntry", message=message, type_="Warning")

    async def repair(self, pod: Obj, entry: Allocation, node: str, findings: Sequence[str]) -> None:
        """A ledger entry held less than its bound pod's annotation: raised already; say so loudly."""
        shown = _first_few(findings)
        message = (
            f"the GPU ledger of node {node} held less than this pod's {VGPU_IDS} says "
            f"({'; '.join(shown)}); the ledger now holds the larger amount until the pod ends and no "
            f"new pod is placed on that capacity; check who edited GPULedger {node} or this pod's annotations"
        )
        self.metrics.assignment_mismatches.labels("ledger-below-assignment").inc(len(findings))
        log.error("pod %s: %s", entry.key, message)
        audit(
            "ledger-repair",
            pod=entry.key,
            uid=entry.pod_uid,
            node=node,
            findings=shown,
            by=self.identity,
        )
        await self.event(pod, reason="LedgerMismatch", message=message, type_="Warning")
        # The ledger was edited (or the pod's annotation was): the GPULedger gets its own Event, and
        # the node's vgpu_guard_ledger_violations counts the entry until its pod ends.
        self._repaired.setdefault(node, set()).add(entry.pod_uid)
        ledger = {"apiVersion": LEDGER_API_VERSION, "kind": "GPULedger", "metadata": {"name": node}}
        await self.event(
            ledger,
            reason="LedgerMismatch",
            message=(
                f"entry of pod {entry.key} held less than the pod's {VGPU_IDS} ({'; '.join(shown)}); "
                "raised to the larger amount until the pod ends; check who edited this GPULedger"
            ),
            type_="Warning",
        )

    async def adopted_over_capacity(
        self,
        adopted: Sequence[tuple[Allocation, str]],
        ledgers: Mapping[str, NodeLedger],
        view: ClusterView,
    ) -> None:
        """Warning ``AssignmentOverCapacity`` on each adopted pod whose GPUs end up over registered capacity.

        The entry holds the pod's full claim (the plugin hands it out), so the card counts as full
        and nothing new lands on it; the Node gets its own Event from the invariant report.
        """
        factor = self.config.nvidia.gpu_memory_factor
        usage: dict[str, dict[str, GpuUsage]] = {}
        for entry, node in adopted:
            info = view.nodes.get(node)
            if info is None or node not in ledgers:
                continue
            if node not in usage:
                usage[node] = gpu_usage(ledgers[node].allocations.values())
            totals = {g.uuid: g.memory * factor for g in info.gpus}
            details = []
            for uuid in dict.fromkeys(g.uuid for g in entry.grants()):
                u = usage[node].get(uuid)
                total = totals.get(uuid)
                if u is None:
                    continue
                if total is None:
                    details.append(f"{uuid}: not registered on the node")
                elif u.memory > total:
                    details.append(f"{uuid}: {u.memory} MiB reserved > {total} MiB registered")
                elif u.cores > 100:
                    details.append(f"{uuid}: {u.cores}% cores reserved > 100%")
            if not details:
                continue
            pod_obj = {
                "kind": "Pod",
                "apiVersion": "v1",
                "metadata": {"name": entry.name, "namespace": entry.namespace, "uid": entry.pod_uid},
            }
            message = (
                f"this pod's {VGPU_IDS} on node {node} was not made by vgpu-guard and takes more than the "
                f"GPU has ({'; '.join(details)}); vgpu-guard holds the full claim until the pod ends and "
                "places no new pod on that GPU; check who set the annotation"
            )
            self.metrics.assignment_mismatches.labels("adopted-over-capacity").inc()
            log.error("pod %s: %s", entry.key, message)
            audit("adopted-over-capacity", pod=entry.key, uid=entry.pod_uid, node=node, by=self.identity)
            await self.event(pod_obj, reason="AssignmentOverCapacity", message=message, type_="Warning")

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
            f"{_UNWRITABLE_REMEDY[state.reason]}; no new vGPU pod is placed on this node until a write "
            "succeeds (retried with backoff), "
            "and every other node places and binds as before"
        )
        if self._unwritable_reported.get(name) == message:
            return
        self._unwritable_reported[name] = message
        shown = _first_few(pods)
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
        self.emit(self.event(node_obj, reason="LedgerWriteFailed", message=message, type_="Warning"))
        ledger = {"apiVersion": LEDGER_API_VERSION, "kind": "GPULedger", "metadata": {"name": name}}
        self.emit(self.event(ledger, reason="LedgerWriteFailed", message=message, type_="Warning"))

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
        await self.event(
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
        shown = _first_few(pods)
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
        factor = self.config.nvidia.gpu_memory_factor
        # A node can go in a pass that ends early (after a release it writes), whose changes the
        # next pass no longer sees: what the view no longer holds is dropped here, as rarely as
        # the snapshot is rebuilt.
        for name in [n for n in self._counts if n not in self._view.nodes]:
            self._forget_node(name, gone=True)
        self.metrics.ledgers.snapshot = LedgerSnapshot.of(self._view.nodes, self._usage, self._counts, factor)
        self._snapshot_at, self._snapshot_stale = now, False

    def _forget_node(self, name: str, *, gone: bool) -> None:
        self._usage.pop(name, None)
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
        violations = check_invariants(ledger, info, memory_factor=factor, usage=self._usage[name])
        self._counts[name] = len(violations) + len(self._repaired.get(name, ()))
        messages = frozenset(v.message for v in violations)
        if messages and messages != self._reported_violations.get(name):
            text = "; ".join(sorted(messages))
            log.error("GPU ledger of node %s breaks its invariants: %s", name, text)
            audit("overcommit", node=name, violations=sorted(messages), by=self.identity)
            node_obj = nodes.get(name, {"kind": "Node", "metadata": {"name": name}})
            await self.event(
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
        """Drop what was reported for pods that are gone."""
        if gone and self.reported_findings:
            self.reported_findings = {k for k in self.reported_findings if k[0] not in gone}
        if gone and self._reported_pods:
            self._reported_pods = {k for k in self._reported_pods if k[0] not in gone}
        for uid in gone:
            self._unschedulable_sent.pop(uid, None)
        for node, uids in list(self._repaired.items()):
            uids.difference_update(gone)
            if not uids:
                del self._repaired[node]
