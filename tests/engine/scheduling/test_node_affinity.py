"""NodeAffinity (nodeaffinity, 1.20): nodeSelector and required node affinity, both must match."""

from __future__ import annotations

from tests.engine.scheduling.kit import expr, judged, node, pod
from vgpu_guard.engine.scheduling.plugins import node_affinity
from vgpu_guard.engine.scheduling.plugins.node_affinity import SELECTOR

NODES = [node("a", {"pool": "a", "zone": "z1"}), node("b", {"pool": "b", "zone": "z1"}), node("c")]


def test_a_pod_without_selector_or_affinity_has_nothing_to_check() -> None:
    assert judged(node_affinity.PLUGIN, pod("p"), NODES) is None


def test_node_selector_needs_every_label() -> None:
    incoming = pod("p", nodeSelector={"pool": "a", "zone": "z1"})
    assert judged(node_affinity.PLUGIN, incoming, NODES) == {"a": None, "b": SELECTOR, "c": SELECTOR}


def test_required_terms_are_ored_and_their_requirements_anded() -> None:
    terms = [expr("pool", "In", "b"), {"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}]
    assert judged(node_affinity.PLUGIN, pod("p", node_affinity=terms), NODES) == {
        "a": SELECTOR,
        "b": None,
        "c": None,
    }


def test_selector_and_affinity_must_both_match() -> None:
    incoming = pod("p", nodeSelector={"zone": "z1"}, node_affinity=[expr("pool", "NotIn", "a")])
    assert judged(node_affinity.PLUGIN, incoming, NODES) == {"a": SELECTOR, "b": None, "c": SELECTOR}


def test_match_fields_on_the_node_name() -> None:
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]}]
    assert judged(node_affinity.PLUGIN, pod("p", node_affinity=terms), NODES) == {
        "a": SELECTOR,
        "b": SELECTOR,
        "c": None,
    }


def test_empty_required_terms_match_no_node() -> None:
    assert judged(node_affinity.PLUGIN, pod("p", node_affinity=[]), NODES) == {
        "a": SELECTOR,
        "b": SELECTOR,
        "c": SELECTOR,
    }


def test_the_plugin_and_reason_code() -> None:
    assert node_affinity.NAME == "NodeAffinity"
    assert SELECTOR.code == "selector"
