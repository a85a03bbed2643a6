"""The one shape every filter plugin has (kube-scheduler's framework: PreFilter, then Filter).

A plugin is an object with a ``name`` (kube-scheduler's, where it is one of its plugins) and

- ``prepare(pod, snapshot)``, once per pod (PreFilter): what its filter needs of the pod and the
  cluster, computed once (counts over every node, parsed volume terms); ``None`` when it has
  nothing to check for this pod (kube-scheduler's Skip: no host ports, no claims, ...); or a
  ``Refusal``, which fails the pod on every node with one reason;
- ``filter(state, node)``, per node (Filter): why the node cannot take the pod, or ``None``.

Failures are ``NodeFailure`` values, counted by ``placement_reason`` into the ``0/N nodes are
available`` message: kube-scheduler's own filters give code ``scheduler`` and its reason texts
(``rejected``); the node's own checks (readiness, cordon, selector, taints) give their codes.
A plugin keeps no state between pods: everything it knows of one pod is in what ``prepare``
returned, so a new plugin is one module and one line in ``framework``'s order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.placement_reason import NodeFailure
from vgpu_guard.engine.scheduling.facts import PodFacts
from vgpu_guard.engine.scheduling.workloads import Workloads

__all__ = ["SCHEDULER", "Plugin", "Refusal", "Snapshot", "rejected"]

# The NodeFailure code of kube-scheduler's own reasons (each text counted as it words it).
SCHEDULER = "scheduler"

S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a pod is judged against: the nodes, the pods on them (with claims, volumes and
    namespace labels), and the resources the caller judges itself after the filters (``later``:
    the allocator's vGPU resources, fitted per GPU first so that their reasons name the card)."""

    nodes: Mapping[str, NodeInfo]
    workloads: Workloads
    later: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Refusal:
    """A PreFilter failure: the pod fits no node, for this one reason."""

    reason: str


class Plugin(Protocol[S]):
    """A filter plugin; ``S`` is the state its ``prepare`` hands its ``filter``."""

    @property
    def name(self) -> str: ...

    def prepare(self, pod: PodFacts, snapshot: Snapshot) -> S | Refusal | None: ...

    def filter(self, state: S, node: NodeInfo) -> NodeFailure | None: ...


def rejected(*reasons: str) -> NodeFailure:
    """A failure in kube-scheduler's words (``Insufficient cpu``, ...)."""
    return NodeFailure(SCHEDULER, reasons=reasons)
