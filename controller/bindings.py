"""The placer's bindings: what a Binding carries, what it leaves behind, for both kinds of member.

A committed entry is bound through the Binder (controller/binder.py: one binding in flight per
node, the device plugin's handshake) with the device annotations the plugin reads; a gang member
that asks no vGPU gets a plain Binding at once, as kube-scheduler would send it. Each success is
told to the inputs (our own write overlays the cache), audited, and announced with a Scheduled
Event; a binding that may complete a gang wakes the next pass (the echo of our own binding does
not), so its members without vGPU are bound and its PodGroup says Running.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from vgpu_guard.controller.binder import Binder
from vgpu_guard.controller.gang_status import GangStatusWriter
from vgpu_guard.controller.inputs import InputSource
from vgpu_guard.controller.metrics import AllocationMetrics
from vgpu_guard.controller.pass_result import PassResult
from vgpu_guard.controller.reports import Reporter
from vgpu_guard.engine.annotations import VGPU_IDS
from vgpu_guard.engine.assignment import allocation_annotations
from vgpu_guard.engine.ledger import Allocation
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import Conflict, KubeError, NotFound
from vgpu_guard.logs import audit

__all__ = ["Bindings"]

log = logging.getLogger("vgpu_guard.controller.allocation")


class Bindings:
    """Sends Bindings; ``binder`` queues the committed entries per node."""

    def __init__(
        self,
        client: ClusterClient,
        inputs: InputSource,
        *,
        reports: Reporter,
        metrics: AllocationMetrics,
        gang_status: GangStatusWriter,
        memory_factor: int,
        identity: str,
        clock: Callable[[], float] = time.time,
        concurrency: int,
        wake: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self.inputs = inputs
        self.reports = reports
        self.metrics = metrics
        self.gang_status = gang_status
        self.memory_factor = memory_factor
        self.identity = identity
        self.clock = clock
        self.binder = Binder(self.bind, concurrency=concurrency)
        # A pod's handshake ending (or a failed binding's retry) wakes the next pass.
        self.binder.retry = wake
        self.bound_keys: list[str] = []  # every binding made, in order (passes report their share)

    async def bind(self, node: str, entry: Allocation, pod: Obj) -> bool:
        """POST the Binding with the device annotations; True when the pod was bound."""
        notes = allocation_annotations(
            entry, node=node, now=int(self.clock()), memory_factor=self.memory_factor
        )
        try:
            await self.client.bind(
                entry.namespace, entry.name, node=node, annotations=notes, uid=entry.pod_uid
            )
        except (Conflict, NotFound) as e:
            # Bound by another replica already, or gone: the next pass sees which.
            log.info("binding %s to %s did not happen: %s", entry.key, node, e)
            return False
        self.inputs.bound(pod, node, notes)
        self._gang_member_bound(entry)
        self.metrics.allocations.labels(node).inc()
        self.bound_keys.append(entry.key)
        devices = notes[VGPU_IDS]
        audit(
            "allocation",
            pod=entry.key,
            uid=entry.pod_uid,
            node=node,
            devices=devices,
            queue=entry.queue,
            by=self.identity,
        )
        message = f"Successfully assigned {entry.key} to {node} ({devices})"
        self.reports.events.emit(self.reports.events.event(pod, reason="Scheduled", message=message))
        return True

    async def bind_plain(self, node: str, entry: Allocation, pod: Obj, result: PassResult) -> None:
        """Bind a gang member that asks no vGPU: a plain Binding (no device annotations, no
        plugin handshake to wait for), as kube-scheduler would send it."""
        try:
            await self.client.bind(entry.namespace, entry.name, node=node, annotations={}, uid=entry.pod_uid)
        except (Conflict, NotFound) as e:
            log.info("binding %s to %s did not happen: %s", entry.key, node, e)
            return
        except KubeError as e:
            result.errors.append(f"binding {entry.key} to {node}: {e}")
            return
        self.inputs.bound(pod, node, {})
        self.bound_keys.append(entry.key)
        result.bound.append(entry.key)
        audit("binding", pod=entry.key, uid=entry.pod_uid, node=node, group=entry.group, by=self.identity)
        message = (
            f"Successfully assigned {entry.key} to {node} (a member of gang "
            f"{entry.namespace}/{entry.group}; it asks no vGPU)"
        )
        self.reports.events.emit(self.reports.events.event(pod, reason="Scheduled", message=message))

    def _gang_member_bound(self, entry: Allocation) -> None:
        """The echo of our own binding wakes no pass, but this one may complete a gang: its
        members without vGPU are bound, and its PodGroup says Running, in the next pass."""
        wake = self.binder.retry
        if entry.group and wake is not None and self.gang_status.follows((entry.namespace, entry.group)):
            wake()
