"""The allocation webhook's handler: who may write a GPU assignment, and whether it fits.

Two questions, in this order, for every pod UPDATE, ``pods/status`` UPDATE and ``pods/binding``
CREATE the webhook receives:

1. Who writes (engine/rules/pods_allocation.py): allocation annotations are the allocators' and
   the device plugin's alone. Needs no cluster state.
2. Does it fit (engine/arbiter.py): when an allocation writer writes an assignment, the node's
   GPULedger reserves those devices with compare-and-swap (kube/ledger_writer.py, coalesced per
   node) before the write is allowed. An assignment that would overflow a GPU is denied with one
   line per GPU, so it never reaches the pod; Volcano resyncs the task and decides again.

A Binding carries annotations and a node but not the pod, whose vGPU containers decide which entry
is whose: it comes from the webhook's cache of unbound pods when that is synced and holds the
Binding's UID (webhook/pending_pods.py), else from one GET. Dry run decides without reserving.
Anything that keeps the ledger from being read or written answers 503 (fail closed: the write is
retried, and an outage pauses vGPU binds, nothing else: the webhook entry only sees writes that
carry one).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from vgpu_guard.engine.allocator import pod_queue
from vgpu_guard.engine.arbiter import (
    RULE,
    Refused,
    Reserved,
    WrittenAssignment,
    arbitrate,
    written_assignment,
)
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.decision import AdmissionDecision, AdmissionRequest, decision_from
from vgpu_guard.engine.ledger import LedgerError, NodeLedger, decode_ledger
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

    async def admit(self, request: AdmissionRequest, config: GuardConfig) -> AdmissionDecision:
        """The allocation webhook's answer (see the module docstring)."""
        who = admit_allocation_write(request, config)
        if not who.allowed:
            return who
        written = written_assignment(
            operation=request.operation,
            sub_resource=request.sub_resource,
            obj=request.object,
            old=request.old_object,
        )
        if written is None:
            return who
        return await self._arbitrate(request, written, config, who)

    async def _arbitrate(
        self,
        request: AdmissionRequest,
        written: WrittenAssignment,
        config: GuardConfig,
        who: AdmissionDecision,
    ) -> AdmissionDecision:
        """``who``: the writer check's answer (allowed, maybe with warnings), given back when the
        assignment is reserved."""
        view = self.views(config)
        if not view.synced:
            return _unavailable("it has not finished reading nodes and GPU ledgers from the API server")
        pod = await self._pod(request, written)
        if isinstance(pod, AdmissionDecision):
            return pod
        if pod is None:
            return who  # the pod is gone: the write fails on its own
        try:
            wanted = pod_request(pod, config.nvidia)
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

    async def _pod(
        self, request: AdmissionRequest, written: WrittenAssignment
    ) -> Obj | AdmissionDecision | None:
        """The pod the assignment is for: the object itself on UPDATE; for a Binding, the cached
        unbound pod with the Binding's UID, else one GET."""
        if written.via != "Binding":
            return request.object
        metadata = request.object.get("metadata") if request.object is not None else None
        uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
        if self.pods is not None and isinstance(uid, str):
            cached = self.pods.get(request.namespace, request.name, uid)
            if cached is not None:
                return cached
        if self.client is None:
            return _unavailable("the webhook has no API client to read the pod")
        try:
            pod = await self.client.get(PODS, request.name, namespace=request.namespace)
        except NotFound:
            return None
        except KubeError as e:
            return _unavailable(f"reading pod {request.namespace}/{request.name}: {e}")
        pod_meta = pod.get("metadata")
        if uid and isinstance(pod_meta, Mapping) and pod_meta.get("uid") != uid:
            return None  # another pod of that name: the Binding's UID precondition fails it
        return pod

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

        def decide(ledger: NodeLedger) -> Reserved | Refused:
            return arbitrate(
                written, wanted, ledger=ledger, node=node, queue=queue, now=now, nvidia=config.nvidia
            )

        raw = view.ledgers.get(written.node)
        try:
            cached = decode_ledger(raw) if raw is not None else NodeLedger(node=written.node)
        except LedgerError as e:
            return _unavailable(f"GPULedger {written.node} does not decode: {e}")
        if request.dry_run:  # decided on what is stored, never written (sideEffects NoneOnDryRun)
            outcome = decide(self.writer.newest(cached))
        else:
            try:
                async with asyncio.timeout(config.arbiter.write_timeout_seconds):
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
            return decision_from(list(outcome.violations), config, obj=request.object)
        if outcome.ledger is not None and not request.dry_run:
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
