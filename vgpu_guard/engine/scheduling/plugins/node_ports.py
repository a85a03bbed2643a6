"""NodePorts: a host port (protocol, IP) may be used by one pod per node.

HostPortInfo.CheckConflict: a wanted ``0.0.0.0`` conflicts with the port on any IP; a wanted
specific IP conflicts with the same IP or ``0.0.0.0``. Only app containers' ports count. A pod
without host ports has nothing to check.
"""

from __future__ import annotations

from collections import Counter

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.placement_reason import NodeFailure
from vgpu_guard.engine.scheduling.facts import DEFAULT_HOST_IP, HostPort, PodFacts
from vgpu_guard.engine.scheduling.plugin import Snapshot, rejected
from vgpu_guard.engine.scheduling.workloads import Workloads

NAME = "NodePorts"
REASON = "node(s) didn't have free ports for the requested pod ports"
_FAILURE = rejected(REASON)

State = tuple[tuple[HostPort, ...], Workloads]


def conflicts(used: Counter[HostPort], wanted: HostPort) -> bool:
    if wanted.ip == DEFAULT_HOST_IP:
        return any(u.protocol == wanted.protocol and u.port == wanted.port for u in used)
    return any(HostPort(ip, wanted.protocol, wanted.port) in used for ip in (DEFAULT_HOST_IP, wanted.ip))


class NodePorts:
    name = NAME

    def prepare(self, pod: PodFacts, snapshot: Snapshot) -> State | None:
        return (pod.host_ports, snapshot.workloads) if pod.host_ports else None

    def filter(self, state: State, node: NodeInfo) -> NodeFailure | None:
        wanted, workloads = state
        used = workloads.usage(node.name).ports
        return _FAILURE if used and any(conflicts(used, p) for p in wanted) else None


PLUGIN = NodePorts()
