"""The filter plugins, run the way kube-scheduler's framework runs them, one pod at a time.

``Framework.prepare`` is the PreFilter phase: every plugin's ``prepare`` once for the pod, giving a
``PodCycle`` (the pod's states; a caller passes it down and drops it when the pod is decided, as
kube-scheduler's CycleState). ``PodCycle.filter`` is the Filter phase for one node: the plugins in
order, stopping at the first failure, as kube-scheduler does (``runAllFilters`` off).

The order is kube-scheduler 1.20's (algorithmprovider/registry.go ``getDefaultConfig``) but for
the node's own checks, which come first and in this order: NodeReady (vgpu-guard's, see its
module), NodeUnschedulable, NodeAffinity, TaintToleration. kube-scheduler runs NodeName and
TaintToleration before NodeAffinity; here NodeAffinity follows the cordon check directly because
the allocator counts the nodes a nodeSelector leaves out by its label index without running
anything after it (``PodCycle.filter_before``), and NodeName reports in kube-scheduler's words,
which are listed after the node's own reasons. Which plugin a node fails only changes how the
node is counted in the ``0/N nodes are available`` message, never whether the pod fits.

A PreFilter refusal (a claim not found or not bound) fails the pod on every node that passes the
node's own checks. No state that reads the pods on the nodes outlives its pod: each placement
changes the counts (``Workloads.assume``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.placement_reason import NodeFailure
from vgpu_guard.engine.scheduling.facts import PodFacts
from vgpu_guard.engine.scheduling.plugin import Plugin, Refusal, Snapshot, rejected
from vgpu_guard.engine.scheduling.plugins import (
    inter_pod_affinity,
    node_affinity,
    node_name,
    node_ports,
    node_ready,
    node_resources_fit,
    node_unschedulable,
    pod_topology_spread,
    taint_toleration,
    volume_binding,
    volume_zone,
)
from vgpu_guard.engine.scheduling.workloads import Workloads

__all__ = ["NODE_PLUGINS", "POD_PLUGINS", "Framework", "PodCycle", "node_cycle", "unsupported_message"]

# The node's own checks: they read the pod's node terms and the node alone.
NODE_PLUGINS: tuple[Plugin[Any], ...] = (
    node_ready.PLUGIN,
    node_unschedulable.PLUGIN,
    node_affinity.PLUGIN,
    taint_toleration.PLUGIN,
)
# kube-scheduler's filters that read the pods on the nodes (and claims, volumes, namespaces).
POD_PLUGINS: tuple[Plugin[Any], ...] = (
    node_name.PLUGIN,
    node_ports.PLUGIN,
    node_resources_fit.PLUGIN,
    volume_binding.PLUGIN,
    volume_zone.PLUGIN,
    pod_topology_spread.PLUGIN,
    inter_pod_affinity.PLUGIN,
)

# A plugin's filter, its state for the pod, and its name.
_Check = tuple[Callable[[Any, NodeInfo], NodeFailure | None], Any, str]
# The snapshot's pods when none are counted: the node's own checks never read (or write) them.
_NO_PODS = Workloads()


def unsupported_message(pod: PodFacts) -> str | None:
    """The Unschedulable message for a pod using what no filter here evaluates, else None."""
    if not pod.unsupported:
        return None
    return (
        f"vgpu-guard does not place pods that use {' and '.join(pod.unsupported)}: it cannot check "
        "them the way kube-scheduler does, and it never binds blindly; schedule this pod with a "
        "scheduler that supports them"
    )


def _prepare(
    plugins: Sequence[Plugin[Any]], pod: PodFacts, snapshot: Snapshot
) -> tuple[list[_Check], NodeFailure | None, dict[str, Any]]:
    """Every plugin's PreFilter: the checks to run per node (skipped plugins left out), the first
    refusal, and the states by plugin name."""
    checks: list[_Check] = []
    refusal: NodeFailure | None = None
    states: dict[str, Any] = {}
    for plugin in plugins:
        state = plugin.prepare(pod, snapshot)
        if isinstance(state, Refusal):
            refusal = refusal or rejected(state.reason)
        elif state is not None:
            checks.append((plugin.filter, state, plugin.name))
            states[plugin.name] = state
    return checks, refusal, states


class PodCycle:
    """One pod's PreFilter results and its Filter phase, node by node."""

    __slots__ = ("_checks", "_fit", "_node_checks", "_refusal", "pod")

    def __init__(
        self,
        pod: PodFacts,
        node_plugins: Sequence[Plugin[Any]],
        pod_plugins: Sequence[Plugin[Any]],
        snapshot: Snapshot,
    ) -> None:
        self.pod = pod
        self._node_checks, _, _ = _prepare(node_plugins, pod, snapshot)
        self._checks: list[_Check] = []
        self._refusal: NodeFailure | None = None
        self._fit: node_resources_fit.FitState | None = None
        if pod_plugins:
            self._checks, self._refusal, states = _prepare(pod_plugins, pod, snapshot)
            self._fit = states.get(node_resources_fit.NAME)

    def filter(self, node: NodeInfo) -> NodeFailure | None:
        """The first failing plugin's failure on ``node``, or None when every plugin passes."""
        for check, state, _ in self._node_checks:
            failure = check(state, node)
            if failure is not None:
                return failure
        if self._refusal is not None:
            return self._refusal
        for check, state, _ in self._checks:
            failure = check(state, node)
            if failure is not None:
                return failure
        return None

    def filter_before(self, name: str, node: NodeInfo) -> NodeFailure | None:
        """``filter`` of the node's own checks that come before the plugin ``name``."""
        for check, state, plugin in self._node_checks:
            if plugin == name:
                break
            failure = check(state, node)
            if failure is not None:
                return failure
        return None

    def fits_later(self, node: NodeInfo) -> NodeFailure | None:
        """NodeResourcesFit for the snapshot's ``later`` resources alone (after the per-GPU fit)."""
        if self._fit is None or not self._fit.later:
            return None
        return node_resources_fit.PLUGIN.later(self._fit, node)

    def least_allocated(self, node: NodeInfo) -> int:
        """NodeResourcesLeastAllocated's score for ``node`` (0 when the pods are not counted)."""
        return node_resources_fit.PLUGIN.least_allocated(self._fit, node) if self._fit is not None else 0


class Framework:
    """The plugins over the nodes of a view and, when given, the pods on them.

    Without ``workloads`` (callers that judge GPUs and node terms only) a pod is judged by the
    node's own checks alone, as is a pod prepared with ``node_only``.
    """

    def __init__(
        self,
        nodes: Mapping[str, NodeInfo],
        workloads: Workloads | None,
        *,
        node_plugins: Sequence[Plugin[Any]] = NODE_PLUGINS,
        pod_plugins: Sequence[Plugin[Any]] = POD_PLUGINS,
    ) -> None:
        self._nodes = nodes
        self.workloads = workloads
        self._node_plugins = tuple(node_plugins)
        self._pod_plugins = tuple(pod_plugins)
        # One snapshot per ``later`` (a caller has one or two): the nodes and the workloads are
        # long-lived objects, so a snapshot stays right until the nodes are replaced.
        self._snapshots: dict[frozenset[str], Snapshot] = {}

    @property
    def nodes(self) -> Mapping[str, NodeInfo]:
        return self._nodes

    @nodes.setter
    def nodes(self, nodes: Mapping[str, NodeInfo]) -> None:
        self._nodes = nodes
        self._snapshots.clear()

    def _snapshot(self, later: frozenset[str]) -> Snapshot:
        snapshot = self._snapshots.get(later)
        if snapshot is None:
            snapshot = Snapshot(self._nodes, self.workloads or _NO_PODS, later)
            self._snapshots[later] = snapshot
        return snapshot

    def prepare(
        self, pod: PodFacts, *, later: frozenset[str] = frozenset(), node_only: bool = False
    ) -> PodCycle:
        """PreFilter for ``pod``; ``later`` resources are left out of NodeResourcesFit's filter
        for ``PodCycle.fits_later``."""
        if node_only or self.workloads is None:
            return PodCycle(pod, self._node_plugins, (), self._snapshot(frozenset()))
        return PodCycle(pod, self._node_plugins, self._pod_plugins, self._snapshot(later))


def node_cycle(pod: PodFacts) -> PodCycle:
    """The node's own checks for ``pod`` alone (no cluster needed: they read the node)."""
    return PodCycle(pod, NODE_PLUGINS, (), Snapshot({}, _NO_PODS))
