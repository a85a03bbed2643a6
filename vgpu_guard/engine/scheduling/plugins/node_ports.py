"""NodePorts: a host port (protocol, IP) may be used by one pod per node.

HostPortInfo.CheckConflict: a wanted ``0.0.0.0`` conflicts with the port on any IP; a wanted
specific IP conflicts with the same IP or ``0.0.0.0``. Only app containers' ports count.
"""

from __future__ import annotations

from collections import Counter

from vgpu_guard.engine.scheduling.facts import DEFAULT_HOST_IP, HostPort, PodFacts

NAME = "NodePorts"
REASON = "node(s) didn't have free ports for the requested pod ports"


def conflicts(used: Counter[HostPort], wanted: HostPort) -> bool:
    if wanted.ip == DEFAULT_HOST_IP:
        return any(u.protocol == wanted.protocol and u.port == wanted.port for u in used)
    return any(HostPort(ip, wanted.protocol, wanted.port) in used for ip in (DEFAULT_HOST_IP, wanted.ip))


def node_ports(pod: PodFacts, used: Counter[HostPort]) -> tuple[str, ...]:
    if pod.host_ports and used and any(conflicts(used, p) for p in pod.host_ports):
        return (REASON,)
    return ()
