"""The device plugin's stale picks, reported: on the pod whose assignment it would hand out, on the
bound pod whose container would get it, and on the Node.

volcano-vgpu-device-plugin serves a kubelet's Allocate with the oldest assignment of the node that
asks for the same number of devices, whoever's it is (engine/stale_pick.py replays its rule). A
1.10-1.15 assignment that Volcano discarded stays on its Pending pod, older than any made since, so
the next bound pod of that node to start with that many devices runs on GPUs chosen for the other
pod, which neither the ledger nor Volcano counts for it. Nothing vgpu-guard reserves prevents that;
an operator who is told before the bound pod starts can (the remedy is in each message and in
docs/runbook.md, "The device plugin would hand a pod another pod's GPUs").

Incremental, as the pass is: the pods that changed are re-read into a per-node index of the
assignments the plugin could still hand out (a ``vgpu-node`` and a device record left), and only the
nodes whose index moved are replayed. Each finding is reported once while it stands (a finding that
goes and comes back is reported again); ``vgpu_guard_device_plugin_stale_picks`` counts those that
stand after the pass.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from vgpu_guard.controller.events import Events
from vgpu_guard.controller.metrics import AllocationMetrics
from vgpu_guard.controller.world import World
from vgpu_guard.engine.annotations import (
    BIND_PHASE,
    BIND_TIME,
    DEVICES_TO_ALLOCATE,
    VGPU_IDS,
    VGPU_NODE,
    VGPU_TIME,
)
from vgpu_guard.engine.objects import Obj
from vgpu_guard.engine.stale_pick import (
    Malformed,
    PickFindings,
    PickPod,
    StalePick,
    consumed,
    pick_pod,
    stale_picks,
)
from vgpu_guard.logs import audit

__all__ = ["MALFORMED", "STALE_PICK", "StalePicks", "remedy"]

log = logging.getLogger("vgpu_guard.controller.allocation")

STALE_PICK = "DevicePluginStalePick"
MALFORMED = "DevicePluginAnnotationMalformed"
_ASSIGNMENT = (VGPU_NODE, VGPU_TIME, VGPU_IDS, DEVICES_TO_ALLOCATE, BIND_PHASE, BIND_TIME)


def remedy(pick: StalePick) -> str:
    """What an operator does before the bound pod starts, safe for both pods and the ledger.

    An unbound pod loses its whole assignment: Volcano 1.15 skips a pod already assigned to the node
    it chooses (``alreadyAssignedOnNode``: ``vgpu-node`` and ``vgpu-ids-new``), so it writes a fresh
    one with its next choice, and nothing holds an unbound pod's assignment (the arbiter only checks
    a PATCH of an unbound pod). Any other pod keeps ``vgpu-ids-new`` (the ledger verifies its entry
    against it) and loses only what the plugin hands out, as the plugin itself erases it.
    """
    stale = pick.stale
    if not stale.node:
        removed = " ".join(f"{key}-" for key in _ASSIGNMENT)
        action = (
            f"remove the assignment from pod {stale.key} (kubectl annotate pod -n {stale.namespace} "
            f"{stale.name} {removed}) or delete that pod"
        )
    else:
        action = (
            f"empty {DEVICES_TO_ALLOCATE} of pod {stale.key} (kubectl annotate --overwrite pod -n "
            f"{stale.namespace} {stale.name} {DEVICES_TO_ALLOCATE}=)"
        )
    return (
        f"{action} before pod {pick.bound.key} starts, as a cluster admin; Volcano >= 1.16 writes the "
        "assignment only with the Binding and leaves none on a pod it did not bind"
    )


def _messages(pick: StalePick) -> tuple[str, str, str]:
    """The stale pod's, the bound pod's and the Node's message for one pick."""
    stale, bound = pick.stale, pick.bound
    rule = (
        f"the volcano-vgpu-device-plugin of node {pick.node} serves a container asking for "
        f"{pick.devices} vGPU(s) with the oldest {VGPU_TIME} among the pods whose {VGPU_NODE} is the "
        f"node and whose {DEVICES_TO_ALLOCATE} holds that many devices"
    )
    times = (
        f"{VGPU_TIME} {stale.vgpu_time} is older than {bound.vgpu_time}"
        if stale.vgpu_time != bound.vgpu_time
        else f"{VGPU_TIME} {stale.vgpu_time} on both, and the plugin's tie-break takes pod {stale.key}"
    )
    fix = remedy(pick)
    on_stale = (
        f"{rule}: when pod {bound.key}, bound there, starts, its container gets this pod's assignment "
        f"({times}), though {pick.why}; {fix}"
    )
    on_bound = (
        f"{rule}: when this pod starts, its container gets the assignment of pod {stale.key} ({times}) "
        f"instead of its own, though {pick.why}: GPUs and limits chosen for another pod; {fix}"
    )
    on_node = f"{rule}: pod {bound.key} would get the assignment of pod {stale.key} ({pick.why}); {fix}"
    return on_stale, on_bound, on_node


def _pod_obj(pod: PickPod) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
    }


class StalePicks:
    """The index of handable assignments by node, and what was reported of each node."""

    def __init__(self, events: Events, metrics: AllocationMetrics, *, identity: str) -> None:
        self.events = events
        self.metrics = metrics
        self.identity = identity
        self._on: dict[str, dict[str, PickPod]] = {}  # vgpu-node -> uid -> pod
        self._node_of: dict[str, str] = {}  # uid -> the vgpu-node it is indexed under
        self.findings: dict[str, PickFindings] = {}  # nodes with findings only
        self._reported: dict[str, frozenset[tuple[str, ...]]] = {}

    def observe(
        self, world: World, changed: Iterable[str], gone: Iterable[str], nodes: Mapping[str, Obj]
    ) -> None:
        """Take in the pods that ``changed`` or are ``gone`` (UIDs), replay the nodes that moved,
        report the new findings (in the background) and set the gauge."""
        moved: set[str] = set()
        for uid in gone:
            self._drop(uid, moved)
        for uid in changed:
            self._drop(uid, moved)
            record, obj = world.records.get(uid), world.pods.get(uid)
            # The record's vgpu-node first: most pods of a start have none, and are skipped unread.
            pod = pick_pod(obj) if record is not None and record.vgpu_node and obj is not None else None
            if pod is None or consumed(pod.to_allocate):
                continue
            self._on.setdefault(pod.vgpu_node, {})[uid] = pod
            self._node_of[uid] = pod.vgpu_node
            moved.add(pod.vgpu_node)
        for node in sorted(moved):
            self._replay(node, nodes.get(node))
        self.metrics.stale_picks.set(sum(len(f.picks) for f in self.findings.values()))

    def _drop(self, uid: str, moved: set[str]) -> None:
        node = self._node_of.pop(uid, None)
        if node is None:
            return
        moved.add(node)
        pods = self._on[node]
        del pods[uid]
        if not pods:
            del self._on[node]

    def _replay(self, node: str, node_obj: Mapping[str, Any] | None) -> None:
        found = stale_picks(node, self._on.get(node, {}).values())
        if found.picks or found.malformed:
            self.findings[node] = found
        else:
            self.findings.pop(node, None)
        before = self._reported.get(node, frozenset())
        now: set[tuple[str, ...]] = set()
        for pick in found.picks:
            key: tuple[str, ...] = (
                "pick",
                pick.stale.uid,
                pick.bound.uid,
                str(pick.stale.vgpu_time),
                pick.why,
            )
            now.add(key)
            if key not in before:
                self._report_pick(pick, node_obj)
        for bad in found.malformed:
            key = ("malformed", bad.pod.uid, bad.annotation, bad.problem)
            now.add(key)
            if key not in before:
                self._report_malformed(bad)
        if now:
            self._reported[node] = frozenset(now)
        else:
            self._reported.pop(node, None)

    def _report_pick(self, pick: StalePick, node_obj: Mapping[str, Any] | None) -> None:
        on_stale, on_bound, on_node = _messages(pick)
        log.warning("node %s: %s", pick.node, on_node)
        audit(
            "stale-device-plugin-pick",
            node=pick.node,
            stale=pick.stale.key,
            bound=pick.bound.key,
            devices=pick.devices,
            by=self.identity,
        )
        node = {**(node_obj or {"metadata": {"name": pick.node}}), "kind": "Node", "apiVersion": "v1"}
        for obj, message in (
            (_pod_obj(pick.stale), on_stale),
            (_pod_obj(pick.bound), on_bound),
            (node, on_node),
        ):
            self.events.emit(self.events.event(obj, reason=STALE_PICK, message=message, type_="Warning"))

    def _report_malformed(self, bad: Malformed) -> None:
        message = f"{bad.annotation} of this pod, whose {VGPU_NODE} is {bad.pod.vgpu_node}: {bad.problem}"
        log.warning("pod %s: %s", bad.pod.key, message)
        audit(
            "device-plugin-annotation-malformed", pod=bad.pod.key, annotation=bad.annotation, by=self.identity
        )
        self.events.emit(
            self.events.event(_pod_obj(bad.pod), reason=MALFORMED, message=message, type_="Warning")
        )
