"""kube-scheduler's node constraints for the pods vgpu-guard binds (pure, no I/O).

Resource amounts are counted by ``vgpu_guard.engine.resources`` (also read by ClusterView).

    facts.py       PodFacts: what the filters read of a pod (requests, ports, affinity, spread, ...)
    labels.py      label selectors
    workloads.py   Workloads: the pods on each node (bound, or reserved in our ledger)
    plugins/       one module per kube-scheduler filter plugin, with its reason texts
    framework.py   NodeConstraints: PreFilter once per pod, then the filters per node
"""

from vgpu_guard.engine.scheduling.facts import FactsMemo, PodFacts, pod_facts
from vgpu_guard.engine.scheduling.framework import NodeConstraints, Prepared, unsupported_message
from vgpu_guard.engine.scheduling.workloads import NodeUsage, Workloads

__all__ = [
    "FactsMemo",
    "NodeConstraints",
    "NodeUsage",
    "PodFacts",
    "Prepared",
    "Workloads",
    "pod_facts",
    "unsupported_message",
]
