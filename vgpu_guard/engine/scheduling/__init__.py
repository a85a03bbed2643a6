"""kube-scheduler's node constraints for the pods vgpu-guard binds (pure, no I/O).

Resource amounts are counted by ``vgpu_guard.engine.resources`` (also read by ClusterView).

    facts.py       PodFacts: what the filters read of a pod (requests, ports, affinity, spread, ...)
    labels.py      label selectors
    workloads.py   Workloads: the pods on each node (bound, or reserved in our ledger)
    plugin.py      the seam every plugin has: prepare(pod, snapshot) once per pod, filter(state, node)
    plugins/       one module per filter plugin, with its reason texts
    framework.py   Framework: the plugins in order; PodCycle: one pod's states, filtered node by node
"""

from vgpu_guard.engine.scheduling.facts import FactsMemo, PodFacts, pod_facts
from vgpu_guard.engine.scheduling.framework import Framework, PodCycle, node_cycle, unsupported_message
from vgpu_guard.engine.scheduling.workloads import NodeUsage, Workloads

__all__ = [
    "FactsMemo",
    "Framework",
    "NodeUsage",
    "PodCycle",
    "PodFacts",
    "Workloads",
    "node_cycle",
    "pod_facts",
    "unsupported_message",
]
