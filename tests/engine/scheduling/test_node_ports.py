"""NodePorts: HostPortInfo.CheckConflict over the app containers' host ports (nodeports, 1.20)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.engine.scheduling.kit import container, node, pod, verdicts, workloads
from vgpu_guard.engine.scheduling import pod_facts
from vgpu_guard.engine.scheduling.facts import HostPort
from vgpu_guard.engine.scheduling.plugins import node_ports
from vgpu_guard.engine.scheduling.plugins.node_ports import REASON, conflicts

PORTS = (REASON,)


def port_pod(name: str, *specs: str, node_name: str | None = None) -> dict[str, Any]:
    """node_ports_test.go's ``newPod(host, "PROTO/IP/PORT", ...)``."""
    ports = []
    for spec in specs:
        protocol, ip, number = spec.split("/")
        ports.append(
            {"containerPort": int(number), "hostPort": int(number), "hostIP": ip, "protocol": protocol}
        )
    return pod(name, node=node_name, containers=[container(ports=ports)])


def verdict(incoming: dict[str, Any], *existing: dict[str, Any]) -> tuple[str, ...]:
    return verdicts(incoming, [node("m1")], existing)["m1"]


TEST_NODE_PORTS: list[tuple[str, tuple[str, ...], tuple[str, ...], bool]] = [
    ("nothing running", (), (), False),
    ("other port", ("UDP/127.0.0.1/8080",), ("UDP/127.0.0.1/9090",), False),
    ("same udp port", ("UDP/127.0.0.1/8080",), ("UDP/127.0.0.1/8080",), True),
    ("same tcp port", ("TCP/127.0.0.1/8080",), ("TCP/127.0.0.1/8080",), True),
    ("different host ip", ("TCP/127.0.0.1/8080",), ("TCP/127.0.0.2/8080",), False),
    ("different protocol", ("UDP/127.0.0.1/8080",), ("TCP/127.0.0.1/8080",), False),
    ("second udp port conflict", ("UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"), ("UDP/127.0.0.1/8080",), True),
    (
        "first tcp port conflict",
        ("TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"),
        ("TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"),
        True,
    ),
    ("first tcp port conflict due to 0.0.0.0 hostIP", ("TCP/0.0.0.0/8001",), ("TCP/127.0.0.1/8001",), True),
    (
        "TCP hostPort conflict due to 0.0.0.0 hostIP",
        ("TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"),
        ("TCP/127.0.0.1/8001",),
        True,
    ),
    ("second tcp port conflict to 0.0.0.0 hostIP", ("TCP/127.0.0.1/8001",), ("TCP/0.0.0.0/8001",), True),
    ("second different protocol", ("UDP/127.0.0.1/8001",), ("TCP/0.0.0.0/8001",), False),
    (
        "UDP hostPort conflict due to 0.0.0.0 hostIP",
        ("UDP/127.0.0.1/8001",),
        ("TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"),
        True,
    ),
]


@pytest.mark.parametrize(
    ("wanted", "used", "conflict"),
    [pytest.param(w, u, c, id=name) for name, w, u, c in TEST_NODE_PORTS],
)
def test_node_ports_from_node_ports_test_go(
    wanted: tuple[str, ...], used: tuple[str, ...], conflict: bool
) -> None:
    existing = port_pod("existing", *used, node_name="m1")
    assert verdict(port_pod("incoming", *wanted), existing) == (PORTS if conflict else ())


def test_a_specific_ip_conflicts_only_with_itself_and_the_wildcard() -> None:
    used = Counter({HostPort("10.0.0.1", "TCP", 80): 1})
    assert conflicts(used, HostPort("10.0.0.1", "TCP", 80))
    assert conflicts(used, HostPort("0.0.0.0", "TCP", 80))
    assert not conflicts(used, HostPort("10.0.0.2", "TCP", 80))
    assert not conflicts(used, HostPort("10.0.0.1", "UDP", 80))
    assert not conflicts(used, HostPort("10.0.0.1", "SCTP", 80))
    assert not conflicts(used, HostPort("10.0.0.1", "TCP", 81))


def test_missing_ip_and_protocol_mean_0_0_0_0_and_tcp() -> None:
    existing = pod(
        "existing", node="m1", containers=[container(ports=[{"containerPort": 80, "hostPort": 80}])]
    )
    assert verdict(port_pod("a", "TCP/10.1.2.3/80"), existing) == PORTS
    assert verdict(port_pod("b", "UDP/10.1.2.3/80"), existing) == ()
    explicit = pod("c", containers=[container(ports=[{"containerPort": 80, "hostPort": 80, "hostIP": ""}])])
    assert verdict(explicit, existing) == PORTS


def test_container_ports_without_a_host_port_take_nothing() -> None:
    existing = pod("existing", node="m1", containers=[container(ports=[{"containerPort": 80}])])
    incoming = pod("incoming", containers=[container(ports=[{"containerPort": 80}])])
    assert verdict(incoming, existing) == ()
    assert verdict(port_pod("host", "TCP/0.0.0.0/80"), existing) == ()


def test_init_containers_ports_are_ignored_on_both_sides() -> None:
    init = [container("init", ports=[{"containerPort": 80, "hostPort": 80}])]
    existing = pod("existing", node="m1", containers=[container()], init_containers=init)
    assert verdict(port_pod("incoming", "TCP/0.0.0.0/80"), existing) == ()
    incoming = pod("incoming-init", containers=[container()], init_containers=init)
    assert verdict(incoming, port_pod("existing-app", "TCP/0.0.0.0/80", node_name="m1")) == ()


def test_ports_of_every_app_container_count() -> None:
    existing = pod(
        "existing",
        node="m1",
        containers=[
            container("a", ports=[{"containerPort": 1, "hostPort": 8080}]),
            container("b", ports=[{"containerPort": 2, "hostPort": 9090}]),
        ],
    )
    assert verdict(port_pod("incoming", "TCP/0.0.0.0/9090"), existing) == PORTS


def test_ports_are_per_node() -> None:
    existing = port_pod("existing", "TCP/0.0.0.0/80", node_name="m1")
    result = verdicts(port_pod("incoming", "TCP/0.0.0.0/80"), [node("m1"), node("m2")], [existing])
    assert result == {"m1": PORTS, "m2": ()}


def test_a_port_stays_taken_until_the_last_pod_using_it_is_forgotten() -> None:
    # Two pods bound elsewhere may share a port on one node; forgetting one keeps the other's.
    first = port_pod("first", "TCP/0.0.0.0/80", node_name="m1")
    second = port_pod("second", "TCP/0.0.0.0/80", node_name="m1")
    placed = workloads([first, second])
    placed.forget(pod_facts(first).uid)
    assert placed.usage("m1").ports == Counter({HostPort("0.0.0.0", "TCP", 80): 1})
    placed.forget(pod_facts(second).uid)
    assert placed.usage("m1").ports == Counter()


def test_ports_come_before_resources_in_the_filter_order() -> None:
    existing = port_pod("existing", "TCP/0.0.0.0/80", node_name="m1")
    incoming = pod(
        "incoming",
        containers=[container(requests={"cpu": "100"}, ports=[{"containerPort": 80, "hostPort": 80}])],
    )
    assert verdict(incoming, existing) == PORTS


def test_the_plugin_is_named_as_in_kube_scheduler() -> None:
    assert node_ports.NAME == "NodePorts"
    assert REASON == "node(s) didn't have free ports for the requested pod ports"
