"""The allocation webhook's handler: who may write a GPU assignment, and whether it fits.

Two questions, in this order, for every pod UPDATE, ``pods/status`` UPDATE and Binding (through
either door: ``pods/binding``, or the legacy ``bindings`` resource) the webhook receives:

1. Who writes (engine/rules/pods_allocation.py): allocation annotations are the allocators' and
   the device plugin's alone. Needs no cluster state.
2. Does it fit (engine/arbiter.py), decided where the assignment is committed
   (engine/assignment_writes.py): a Binding reserves what the pod is bound with in the node's
   GPULedger, with compare-and-swap (kube/ledger_writer.py, coalesced per node), before it is
   allowed; a PATCH of an unbound pod is only checked (Volcano 1.10-1.15 may discard it); a PATCH
   of a bound pod replaces its entry. An assignment that would overflow a GPU is denied with one
   line per GPU, so it never reaches the pod; Volcano resyncs the task and decides again.

A Binding carries annotations and a node but not the pod, whose vGPU containers decide which entry
is whose. When the Binding carries the whole assignment (Volcano >= 1.16) the pod's containers
come from the webhook's cache of unbound pods when that is synced and holds the Binding's UID
(webhook/pending_pods.py), else from one GET; when it does not (Volcano 1.10-1.15's plain
Binding), the pod is read with one GET, so what is reserved is the assignment as stored, which
the Binding's node gets and the device plugin reads. A plain Binding of a pod the cache knows to
request no vGPU is allowed without a read: that is every Binding of every other pod. A Binding of
a pod that is already bound reserves nothing (the API server refuses it). Dry run decides without
reserving. Anything that keeps the ledger from being read or written answers 503 (fail closed: the
write is retried).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from vgpu_guard.engine.allocator import pod_queue
from vgpu_guard.engine.arbiter import RULE, Holds, Refused, Reserved, arbitrate
from vgpu_guard.engine.assignment import decode_assignment_entries
from vgpu_guard.engine.assignment_writes import (
    WrittenAssignment,
    binding_assignment,
    binding_needs_stored_pod,
    is_binding,
    update_assignment,
)
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.decision import AdmissionDecision, AdmissionRequest, decision_from
from vgpu_guard.engine.ledger import Allocation, LedgerError, NodeLedger, decode_ledger
from vgpu_guard.engine.objects import ObjMap as Obj
from vgpu_guard.engine.pod_request import PodRequest, PodRequestError, pod_request
from vgpu_guard.engine.rules.pods_allocation import admit_allocation_write
from vgpu_guard.engine.violations import Violation
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import KubeError, NotFound
from vgpu_guard.kube.ledger_writer import LedgerWriter, WriteFailed
from vgpu_guard.kube.resources import PODS
from vgpu_guard.logs import audit
from vgpu_guard.webhook.pending_pods import PendingPods
from vgpu_guard.webhook.stuck_refusals import StuckNotices

__all__ = ["Arbiter"]


def _unavailable(why: str) -> AdmissionDecision:
    """Fail closed with a retriable answer: the writer (Volcano) tries again on its next session."""
    return AdmissionDecision(
        allowed=False,
        code=503,
        message=f"[{RULE}] vgpu-guard could not reserve the GPU assignment ({why}); retry in a few seconds",
        rules=(RULE,),
    )


def _refused(why: str, config: GuardConfig, written: WrittenAssignment) -> AdmissionDecision:
    return decision_from([Violation(RULE, f"metadata.annotations[{written.key}]", why)], config)


@dataclass
class Arbiter:
    """Everything the handler needs besides the request: the caches' view, the API, the writer."""

    views: Callable[[GuardConfig], ClusterView]
    client: ClusterClient | None
    writer: LedgerWriter | None
    clock: Callable[[], float] = time.time
    # The unbound pods a Binding's pod is read from before a GET is needed (None: always a GET).
    pods: PendingPods | None = None
    # Refusals counted per pod; a pod refused again and again is told what holds its GPUs.
    notices: StuckNotices | None = None
    # How a ledger write is bounded (arbiter.writeTimeoutSeconds): on the wall clock in a cluster;
    # ``simulate`` injects its own (no simulated time passes while a write waits, so none expires).
    timeout: Callable[[float], AbstractAsyncContextManager[object]] = asyncio.timeout

    async def admit(self, request: AdmissionRequest, config: GuardConfig) -> AdmissionDecision:
        """The allocation webhook's answer (see the module docstring)."""
        who = admit_allocation_write(request, config)
        if not who.allowed:
            return who
        if is_binding(
            operation=request.operation, resource=request.resource, sub_resource=request.sub_resource
        ):
            return await self._bind(request, config, who)
        if (
            request.operation != "UPDATE"
            or request.resource != "pods"
            or request.sub_resource not in ("", "status")
        ):
            return who
        key = f"{request.namespace}/{request.name}"
        written = update_assignment(request.object, request.old_object, pod_key=key)
        if written is None:
            return who
        if isinstance(written, list):
            return decision_from(written, config, obj=request.object)
        return await self._arbitrate(request, written, request.object, config, who)

    async def _bind(
        self, request: AdmissionRequest, config: GuardConfig, who: AdmissionDecision
    ) -> AdmissionDecision:
        """A Binding: what the pod is bound with is reserved, whether it carries it or the pod does."""
        binding = request.object
        name = request.name or _binding_name(binding)
        key = f"{request.namespace}/{name}"
        pod = await self._binding_pod(request, name, config)
        if isinstance(pod, AdmissionDecision):
            return pod
        if pod is None or _bound_node(pod):
            return who  # gone, or bound already: the API server refuses the Binding, nothing is reserved
        written = binding_assignment(binding, pod, pod_key=key)
        if written is None:
            return who
        if isinstance(written, list):
            return decision_from(written, config, obj=binding)
        return await self._arbitrate(request, written, pod, config, who)

    async def _arbitrate(
        self,
        request: AdmissionRequest,
        written: WrittenAssignment,
        pod: Obj | None,
        config: GuardConfig,
        who: AdmissionDecision,
    ) -> AdmissionDecision:
        """``who``: the writer check's answer (allowed, maybe with warnings), given back when the
        assignment is reserved (or, for a proposal, fits)."""
        view = self.views(config)
        if not view.synced:
            return _unavailable("it has not finished reading nodes and GPU ledgers from the API server")
        try:
            wanted = pod_request(pod, config.nvidia) if pod is not None else None
        except PodRequestError as e:
            return _refused(
                f"the pod's vGPU request cannot be read ({e}); {written.via} refused", config, written
            )
        if wanted is None:
            why = (
                f"{written.via} assigns GPUs to pod {request.namespace}/{request.name}, which requests no "
                "vGPU; the device plugin would hand out devices no ledger entry holds"
            )
            return _refused(why, config, written)
        return await self._reserve(request, written, wanted, view, config, who=who)

    async def _binding_pod(
        self, request: AdmissionRequest, name: str, config: GuardConfig
    ) -> Obj | AdmissionDecision | None:
        """The pod a Binding binds, read as the decision needs it (see the module docstring)."""
        metadata = request.object.get("metadata") if request.object is not None else None
        uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
        cached = (
            self.pods.get(request.namespace, name, uid)
            if self.pods is not None and isinstance(uid, str)
            else None
        )
        if cached is not None:
            if not binding_needs_stored_pod(request.object):
                return cached
            if _requests_no_vgpu(cached, config):
                return cached  # nothing to reserve; a stored assignment of it was refused when written
        if self.client is None:
            return _unavailable("the webhook has no API client to read the pod")
        try:
            pod = await self.client.get(PODS, name, namespace=request.namespace)
        except NotFound:
            return None
        except KubeError as e:
            return _unavailable(f"reading pod {request.namespace}/{name}: {e}")
        pod_meta = pod.get("metadata")
        if uid and isinstance(pod_meta, Mapping) and pod_meta.get("uid") != uid:
            return None  # another pod of that name: the Binding's UID precondition fails it
        return pod

    def _holds(self, config: GuardConfig) -> Holds:
        """Admitted entries whose pods the cache of unbound pods holds are bounded (engine/arbiter.py);
        with no synced cache no entry is known unbound, and the controller releases them instead."""
        pods = self.pods

        def unbound(entry: Allocation) -> bool:
            return pods is not None and pods.get(entry.namespace, entry.name, entry.pod_uid) is not None

        return Holds(seconds=config.arbiter.unbound_release_seconds, unbound=unbound)

    async def _reserve(
        self,
        request: AdmissionRequest,
        written: WrittenAssignment,
        wanted: PodRequest,
        view: ClusterView,
        config: GuardConfig,
        *,
        who: AdmissionDecision,
    ) -> AdmissionDecision:
        if self.writer is None:
            return _unavailable("the webhook has no API client to write the ledger")
        node = view.nodes.get(written.node)
        queue, _ = pod_queue(wanted, view)
        now = int(self.clock())
        holds = self._holds(config)

        def decide(ledger: NodeLedger) -> Reserved | Refused:
            return arbitrate(
                written,
                wanted,
                ledger=ledger,
                node=node,
                queue=queue,
                now=now,
                nvidia=config.nvidia,
                holds=holds,
            )

        raw = view.ledger(written.node)
        try:
            cached = decode_ledger(raw) if raw is not None else NodeLedger(node=written.node)
        except LedgerError as e:
            return _unavailable(f"GPULedger {written.node} does not decode: {e}")
        if request.dry_run:  # decided on what is stored, never written (sideEffects NoneOnDryRun)
            outcome = decide(self.writer.newest(cached))
        else:
            try:
                async with self.timeout(config.arbiter.write_timeout_seconds):
                    outcome = await self.writer.reserve(written.node, decide, cached=cached, info=node)
            except WriteFailed as e:
                return _unavailable(str(e))
            except TimeoutError:
                seconds = config.arbiter.write_timeout_seconds
                return _unavailable(
                    f"GPULedger {written.node} was not written within {seconds:g} s "
                    "(arbiter.writeTimeoutSeconds)"
                )
        if isinstance(outcome, Refused):
            if self.notices is not None and not request.dry_run:
                gpus = {d.uuid for c in decode_assignment_entries(written.raw).containers for d in c}
                self.notices.refused(
                    (wanted.namespace, wanted.name, wanted.uid),
                    written.node,
                    self.writer.newest(cached),
                    gpus,
                    unbound=holds.unbound,
                    hold_seconds=holds.seconds,
                )
            return decision_from(list(outcome.violations), config, obj=request.object)
        if self.notices is not None and not request.dry_run:
            self.notices.streaks.reserved(wanted.uid)
        if outcome.ledger is not None and not request.dry_run:
            for lapsed in outcome.dropped:
                audit(
                    "release",
                    pod=lapsed.key,
                    uid=lapsed.pod_uid,
                    node=written.node,
                    reason="lapsed",
                    by="arbiter",
                )
            audit(
                "reservation",
                pod=wanted.key,
                uid=wanted.uid,
                node=written.node,
                devices=written.raw,
                via=written.via,
                user=request.username,
            )
        return who


def _binding_name(binding: Obj | None) -> str:
    metadata = binding.get("metadata") if binding is not None else None
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else ""


def _bound_node(pod: Obj) -> str:
    spec = pod.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return node if isinstance(node, str) else ""


def _requests_no_vgpu(pod: Obj, config: GuardConfig) -> bool:
    try:
        return pod_request(pod, config.nvidia) is None
    except PodRequestError:
        return False
