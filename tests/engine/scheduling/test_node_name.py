"""NodeName (nodename/node_name.go, 1.20) and the framework's filter order around it."""

from __future__ import annotations

from tests.engine.scheduling.kit import container, judged, node, pod, verdicts
from vgpu_guard.engine.placement_reason import NodeFailure
from vgpu_guard.engine.scheduling.plugins import node_name
from vgpu_guard.engine.scheduling.plugins.node_name import REASON


def test_no_host_specified_skips_the_plugin() -> None:
    assert judged(node_name.PLUGIN, pod("p"), [node("foo")]) is None


def test_host_matches() -> None:
    assert judged(node_name.PLUGIN, pod("p", node="foo"), [node("foo")]) == {"foo": None}


def test_host_does_not_match() -> None:
    assert judged(node_name.PLUGIN, pod("p", node="bar"), [node("foo")]) == {
        "foo": NodeFailure("scheduler", reasons=(REASON,))
    }


def test_a_pod_naming_a_node_fits_only_that_node() -> None:
    nodes = [node("n1"), node("n2"), node("n3")]
    assert verdicts(pod("p", node="n2"), nodes) == {"n1": (REASON,), "n2": (), "n3": (REASON,)}


def test_node_name_is_the_first_filter_and_only_its_reason_is_given() -> None:
    # kube-scheduler stops at the first failing plugin: a node the pod does not name reports only
    # NodeName, however full it is; the named node reports what it lacks.
    busy = pod("busy", node="n1", containers=[container(ports=[{"containerPort": 80, "hostPort": 80}])])
    incoming = pod(
        "p",
        node="n2",
        containers=[container(requests={"cpu": "100"}, ports=[{"containerPort": 80, "hostPort": 80}])],
    )
    assert verdicts(incoming, [node("n1"), node("n2")], [busy]) == {
        "n1": (REASON,),
        "n2": ("Insufficient cpu",),
    }


def test_the_plugin_and_reason_are_kube_schedulers() -> None:
    assert node_name.NAME == "NodeName"
    assert REASON == "node(s) didn't match the requested hostname"
