"""What the controller tells people about pods: PodScheduled conditions and findings in assignments.

Kept apart from the decisions (controller/allocation.py) so that a pass reads as the steps it takes.
Every report is sent once per distinct message (a pod's condition is patched only when its message
changes; a finding is reported once per pod and text), so a steady cluster sends nothing. Events go
out in the background (``events.emit``), so bindings never wait behind them; ``events.flush_events``
waits. The Reporter is what the controller's parts are given: its ``events`` (controller/events.py)
and ``nodes`` (controller/node_reports.py) are the two other halves, each small enough to read;
``stale_picks`` (controller/stale_picks.py) reports the assignments the device plugin would hand to
the wrong pod.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from vgpu_guard.controller.events import Events
from vgpu_guard.controller.events import meta as _meta
from vgpu_guard.controller.metrics import AllocationMetrics
from vgpu_guard.controller.node_reports import SNAPSHOT_SECONDS, NodeReports, first_few
from vgpu_guard.controller.stale_picks import StalePicks
from vgpu_guard.engine.annotations import VGPU_IDS
from vgpu_guard.engine.assignment import held_less
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import API_VERSION as LEDGER_API_VERSION
from vgpu_guard.engine.ledger import Allocation, GpuUsage, NodeLedger, gpu_usage
from vgpu_guard.engine.objects import Obj
from vgpu_guard.engine.timestamps import rfc3339
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import KubeError, NotFound
from vgpu_guard.kube.resources import PODS
from vgpu_guard.logs import audit

__all__ = ["SNAPSHOT_SECONDS", "PassReports", "Reporter"]

log = logging.getLogger("vgpu_guard.controller.allocation")


class PassReports:
    """The unschedulable pods a pass reported (for ``PassResult``) and its errors."""

    def __init__(self) -> None:
        self.unschedulable: list[str] = []
        self.errors: list[str] = []


class Reporter:
    """Pod reports of one controller; ``events`` sends Events, ``nodes`` reports nodes and ledgers."""

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
        self.events = Events(client, identity=identity, clock=clock, metrics=metrics)
        self.nodes = NodeReports(self.events, config, identity=identity, metrics=metrics)
        self.stale_picks = StalePicks(self.events, metrics, identity=identity)
        # Pod UID -> (the resourceVersion it was reported unschedulable from, the message): until a
        # newer version of the pod reaches the cache, the patch we sent is not in it yet, and a
        # pass in that window must not patch and send the Event again.
        self._unschedulable_sent: dict[str, tuple[str, str]] = {}
        self.reported_findings: set[tuple[str, str, str]] = set()

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
        self.events.emit(self.events.event(pod, reason="FailedScheduling", message=message, type_="Warning"))

    async def invalid_assignment(self, pod: Obj, problems: Sequence[str]) -> None:
        """Warning ``InvalidAssignmentEntry`` on the pod, once per distinct set of bad entries."""
        # Anyone who may update the pod writes this annotation: name a few entries, count the rest.
        shown = first_few(problems)
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
        await self.events.event(pod, reason="InvalidAssignmentEntry", message=message, type_="Warning")

    async def repair(self, pod: Obj, entry: Allocation, node: str, findings: Sequence[str]) -> None:
        """A ledger entry differed from its bound pod's annotation and was made exactly that: held
        less (raised: someone edited the ledger or the pod, said loudly) or only more (lowered: a
        second Binding or an earlier assignment of the pod had been held beside the one it got)."""
        below = [f for f in findings if held_less(f)]
        above = [f for f in findings if not held_less(f)]
        if below:
            await self._raised(pod, entry, node, below)
        if above:
            await self._lowered(pod, entry, node, above)

    async def _lowered(self, pod: Obj, entry: Allocation, node: str, findings: Sequence[str]) -> None:
        shown = first_few(findings)
        message = (
            f"the GPU ledger of node {node} held more than this pod's {VGPU_IDS} hands out "
            f"({'; '.join(shown)}); the entry now holds exactly the pod's assignment and the rest is free "
            "(an assignment of this pod that did not land, e.g. a second Binding, had been held beside it)"
        )
        self.metrics.assignment_mismatches.labels("ledger-above-assignment").inc(len(findings))
        log.info("pod %s: %s", entry.key, message)
        audit("ledger-shrink", pod=entry.key, uid=entry.pod_uid, node=node, findings=shown, by=self.identity)
        await self.events.event(pod, reason="LedgerEntryShrunk", message=message, type_="Normal")

    async def _raised(self, pod: Obj, entry: Allocation, node: str, findings: Sequence[str]) -> None:
        shown = first_few(findings)
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
        await self.events.event(pod, reason="LedgerMismatch", message=message, type_="Warning")
        # The ledger was edited (or the pod's annotation was): the GPULedger gets its own Event, and
        # the node's vgpu_guard_ledger_violations counts the entry until its pod ends.
        self.nodes.repaired.setdefault(node, set()).add(entry.pod_uid)
        ledger = {"apiVersion": LEDGER_API_VERSION, "kind": "GPULedger", "metadata": {"name": node}}
        await self.events.event(
            ledger,
            reason="LedgerMismatch",
            message=(
                f"entry of pod {entry.key} held less than the pod's {VGPU_IDS} ({'; '.join(shown)}); "
                "raised to the larger amount until the pod ends; check who edited this GPULedger"
            ),
            type_="Warning",
        )

    async def unlanded_hold(self, pod: Obj, entry: Allocation, node: str, *, ends_at: int) -> None:
        """An admitted entry whose Binding did not land holds GPUs until ``ends_at``: said on the pod
        and on its GPULedger, naming the holder and when it goes (docs/design/ledger.md, bounded holds)."""
        gpus = ", ".join(sorted({g.uuid for g in entry.grants()}))
        since = rfc3339(entry.reserved_at)
        ends = rfc3339(ends_at)
        self.metrics.unlanded_holds.inc()
        await self.events.event(
            pod,
            reason="GPUHeldForUnlandedBinding",
            message=(
                f"GPUs {gpus} on node {node} are held for this pod since {since} by a Binding vgpu-guard "
                "admitted that has not landed (another admission webhook or the API server refused it); "
                f"the hold ends by {ends} (arbiter.unboundReleaseSeconds), then pods waiting for these GPUs "
                "go first"
            ),
            type_="Warning",
        )
        ledger = {"apiVersion": LEDGER_API_VERSION, "kind": "GPULedger", "metadata": {"name": node}}
        await self.events.event(
            ledger,
            reason="GPUHeldForUnlandedBinding",
            message=(
                f"entry of pod {entry.key} holds {gpus} since {since} for a Binding that has not landed; "
                f"it goes by {ends} (arbiter.unboundReleaseSeconds)"
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
            await self.events.event(
                pod_obj, reason="AssignmentOverCapacity", message=message, type_="Warning"
            )

    def forget_pods(self, gone: set[str]) -> None:
        """Drop what was reported for pods that are gone (by UID), here and in the Events and nodes."""
        if gone and self.reported_findings:
            self.reported_findings = {k for k in self.reported_findings if k[0] not in gone}
        for uid in gone:
            self._unschedulable_sent.pop(uid, None)
        self.events.forget_pods(gone)
        self.nodes.forget_pods(gone)
