"""The queue audit: re-judge every Queue when capacity or the queues change.

Why, beyond the webhook: the webhook sees only Queue writes. Capacity shrinks without any (a node
removed, NotReady or cordoned), queues may predate vgpu-guard, and a webhook with
``failurePolicy: Ignore`` can be bypassed. Seed 001's scheduler crash-looped exactly then. So the
controller re-evaluates with the same core function (``audit_queues``) on every cache change and
says so where users look:

- a Kubernetes Event on each affected Queue (Warning; reason per rule, e.g.
  ``GuaranteeExceedsCapacity``), once per distinct finding, and a Normal ``GuaranteesFit`` when a
  queue's findings clear;
- the gauge ``vgpu_guard_queue_guarantee_ratio{resource}``: guaranteed / capacity (> 1 is
  over-committed; +Inf when nothing provides a guaranteed resource);
- a parent cycle (two ``spec.parent`` updates admitted at the same moment each pass a check made
  against the queues as they were; admission cannot make the pair atomic): a Warning
  ``QueueParentCycle`` on every queue of the cycle naming it and the patch that breaks it, an
  error line, and the gauge ``vgpu_guard_queue_parent_cycles``;
- one JSON audit line (logger ``vgpu_guard.audit``) whenever the outcome changes.

It only ever creates Events: the user's Queue is never modified. It never judges an unsynced
view (a half-listed node cache would make every queue look over capacity). Errors are logged and
retried on the next pass; nothing here ends the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Gauge

from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.rules.queues_validate import QueueAudit, QueueTree, audit_queues, format_amount
from vgpu_guard.engine.violations import Violation
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.resources import EVENTS, QUEUES
from vgpu_guard.kube.view_cache import ClusterCache
from vgpu_guard.logs import audit

__all__ = ["REASONS", "RESOLVED_REASON", "QueueAuditor", "run_queue_audit"]

log = logging.getLogger("vgpu_guard.controller.queue_audit")

# Event reason per rule id (CamelCase, as kubectl users expect of reasons).
REASONS: Mapping[str, str] = {
    "queue-guarantee-capacity": "GuaranteeExceedsCapacity",
    "queue-hierarchy": "GuaranteeExceedsParent",
    "queue-guarantee-capability": "GuaranteeExceedsCapability",
    "queue-deserved-range": "DeservedOutOfRange",
    "queue-quantity": "InvalidQuantity",
}
RESOLVED_REASON = "GuaranteesFit"
CYCLE_REASON = "QueueParentCycle"
# Kubernetes truncates event messages at 1 KiB; we cut first so the cut is marked.
_EVENT_MESSAGE_LIMIT = 1024
# Cluster-scoped objects' events live in "default" (as the kubelet does for Nodes).
_EVENT_NAMESPACE = "default"
_COMPONENT = "vgpu-guard"


def _clip(text: str) -> str:
    return text if len(text) <= _EVENT_MESSAGE_LIMIT else text[: _EVENT_MESSAGE_LIMIT - 1] + "…"


def _cycle_message(cycle: tuple[str, ...]) -> str:
    """The cycle, why it exists, what it does to Volcano, and the patch that breaks it."""
    loop = " -> ".join((*cycle, cycle[0]))
    patch = '{"spec":{"parent":"root"}}'
    return (
        f"[queue-hierarchy] spec.parent: queues {loop} form a parent cycle (each parent update was "
        "admitted against the queues as they were; two updates admitted at the same moment cannot be "
        "checked as one); Volcano's capacity plugin with hierarchy enabled refuses allocation to every "
        "queue while a job is in one of them; vgpu-guard changes no Queue: give one of them a parent "
        f"outside the cycle, e.g. kubectl patch queue {cycle[0]} --type merge -p '{patch}'"
    )


def _ratio(audited: QueueAudit, resource: str) -> float:
    usage = audited.resources[resource]
    ratio = usage.ratio
    if ratio is None:
        return math.inf if usage.guaranteed > 0 else 0.0
    return float(ratio)  # a gauge is a float; the decisions above stayed exact


class QueueAuditor:
    """One audit pass at a time (``audit_once``); remembers what it reported, to deduplicate."""

    def __init__(
        self,
        client: ClusterClient,
        *,
        registry: CollectorRegistry | None = REGISTRY,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        instance: str = "",
    ) -> None:
        self.client = client
        self.clock = clock
        self.instance = instance
        self.ratio = Gauge(
            "vgpu_guard_queue_guarantee_ratio",
            "Sum of queue guarantees over cluster capacity, per resource (above 1: over-committed).",
            ["resource"],
            registry=registry,
        )
        self.cycles = Gauge(
            "vgpu_guard_queue_parent_cycles",
            "Parent cycles among the Volcano Queues (spec.parent chains that loop; two parent updates "
            "admitted at the same moment can close one). Each queue of a cycle has a Warning Event "
            "QueueParentCycle naming it and the patch that breaks it.",
            registry=registry,
        )
        self._cycles: list[tuple[str, ...]] = []
        # (queue, reason) -> the message last reported; a pass reports only what differs.
        self._reported: dict[tuple[str, str], str] = {}
        self._last_line: dict[str, Any] | None = None
        self._gauged: set[str] = set()

    async def audit_once(self, view: ClusterView, config: GuardConfig) -> QueueAudit | None:
        """Judge the view once: gauges, events, audit line. None (and nothing done) when unsynced."""
        if not view.synced:
            return None
        audited = audit_queues(view, config)
        cycles = QueueTree.from_queues(view.queues.values()).cycles()
        self._set_gauges(audited)
        self._set_cycles(cycles)
        await self._report_events(view, audited, cycles)
        self._audit_line(audited, cycles)
        return audited

    def stand_down(self) -> None:
        """Not the leader (any more): export no ratio (a former leader's would win a dashboard's
        max() over replicas), and report afresh on leading again."""
        for resource in self._gauged:
            self.ratio.remove(resource)
        self._gauged = set()
        self.cycles.set(0)
        self._cycles = []
        self._reported = {}
        self._last_line = None

    def _set_gauges(self, audited: QueueAudit) -> None:
        for resource in audited.resources:
            self.ratio.labels(resource=resource).set(_ratio(audited, resource))
        for gone in self._gauged - set(audited.resources):
            self.ratio.remove(gone)
        self._gauged = set(audited.resources)

    def _set_cycles(self, cycles: list[tuple[str, ...]]) -> None:
        self.cycles.set(len(cycles))
        if cycles != self._cycles:
            for cycle in cycles:
                log.error("%s", _cycle_message(cycle))
            self._cycles = cycles

    async def _report_events(
        self, view: ClusterView, audited: QueueAudit, cycles: list[tuple[str, ...]]
    ) -> None:
        current: dict[tuple[str, str], tuple[str, str]] = {}  # key -> (message, type)
        in_cycle = {name: cycle for cycle in cycles for name in cycle}
        for name, cycle in in_cycle.items():
            current[(name, CYCLE_REASON)] = (_clip(_cycle_message(cycle)), "Warning")
        for name, violations in audited.findings.items():
            by_reason: dict[str, list[Violation]] = {}
            for violation in violations:
                if (
                    name in in_cycle
                    and violation.rule == "queue-hierarchy"
                    and violation.path == "spec.parent"
                ):
                    continue  # the cycle's own Event says it, with the way out
                by_reason.setdefault(REASONS.get(violation.rule, "QueueMisconfigured"), []).append(violation)
            for reason, found in by_reason.items():
                current[(name, reason)] = (_clip("\n".join(v.render() for v in found)), "Warning")
        for key, (message, kind) in sorted(current.items()):
            if self._reported.get(key) != message and await self._event(view, key[0], key[1], message, kind):
                self._reported[key] = message
        affected = {q for (q, _) in current}
        for key in [k for k in self._reported if k not in current and k[0] in affected]:
            del self._reported[key]  # that finding cleared; the queue still has others
        for name in sorted({q for (q, _) in self._reported} - affected):
            if name in view.queues:
                message = "the queue's guarantees fit the cluster's capacity and its parent again"
                if not await self._event(view, name, RESOLVED_REASON, message, "Normal"):
                    continue  # keep the record: the next pass says it again
            for key in [k for k in self._reported if k[0] == name]:
                del self._reported[key]

    async def _event(self, view: ClusterView, queue: str, reason: str, message: str, kind: str) -> bool:
        obj = view.queues.get(queue) or {}
        metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        assert isinstance(metadata, Mapping)
        now = self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{queue}.", "namespace": _EVENT_NAMESPACE},
            "involvedObject": {
                "apiVersion": QUEUES.api_version,
                "kind": QUEUES.kind,
                "name": queue,
                "uid": metadata.get("uid") or "",
                "resourceVersion": metadata.get("resourceVersion") or "",
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": _COMPONENT},
            "reportingComponent": _COMPONENT,
            "reportingInstance": self.instance,
        }
        try:
            await self.client.create(EVENTS, event, namespace=_EVENT_NAMESPACE)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("queue %s: could not record event %s: %s", queue, reason, e)
            return False
        return True

    def _audit_line(self, audited: QueueAudit, cycles: list[tuple[str, ...]]) -> None:
        line = {
            "parent_cycles": [list(cycle) for cycle in cycles],
            "resources": {
                r: {
                    "guaranteed": format_amount(r, u.guaranteed),
                    "capacity": format_amount(r, u.capacity.amount),
                    "nodes": u.capacity.nodes,
                    "exceeded": u.exceeded,
                }
                for r, u in audited.resources.items()
            },
            "findings": {q: [v.render() for v in vs] for q, vs in audited.findings.items()},
        }
        if line == self._last_line:
            return
        self._last_line = line
        over = sorted(r for r, u in audited.resources.items() if u.exceeded)
        audit("queue-audit", over_committed=over, affected_queues=sorted(audited.findings), **line)


async def run_queue_audit(
    client: ClusterClient,
    config: GuardConfig,
    *,
    cache: ClusterCache | None = None,
    registry: CollectorRegistry | None = REGISTRY,
    debounce_seconds: float = 1.0,
    resync_seconds: float = 300.0,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    is_leader: Callable[[], bool] = lambda: True,
) -> None:
    """Audit on every cache change (bursts coalesced by ``debounce_seconds``) and every
    ``resync_seconds`` (which also retries events that failed). Runs until cancelled.

    With ``cache`` None a private ``ClusterCache`` is started; pass the process's shared one
    to avoid a second set of watches. Only the leader audits (``is_leader``), so two controller
    replicas do not post every Event twice; the gauge is the leader's.
    """
    own_cache = cache is None
    cache = cache if cache is not None else ClusterCache(client)
    cache_task = asyncio.create_task(cache.run(), name="queue-audit-cache") if own_cache else None
    auditor = QueueAuditor(client, registry=registry, clock=clock)
    try:
        await cache.wait_synced()
        while True:
            version = cache.version
            try:
                if is_leader():
                    await auditor.audit_once(cache.snapshot(config), config)
                else:
                    auditor.stand_down()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("queue audit pass failed; retrying on the next change")
            # A change, or the periodic resync (which also retries events that failed).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(resync_seconds):  # not wait_for: it can swallow a cancel on 3.11
                    await cache.wait_for_change(version)
            await sleep(debounce_seconds)
    finally:
        if cache_task is not None:
            cache_task.cancel()
            await asyncio.gather(cache_task, return_exceptions=True)
