"""TaintToleration (tainttoleration/taint_toleration.go, 1.20): NoSchedule and NoExecute taints
must be tolerated; the first untolerated one is named."""

from __future__ import annotations

from tests.engine.scheduling.kit import judged, node, pod
from vgpu_guard.engine.placement_reason import NodeFailure
from vgpu_guard.engine.scheduling.plugins import taint_toleration

GPU = {"key": "gpu", "value": "reserved", "effect": "NoSchedule"}
EVICT = {"key": "maintenance", "value": "", "effect": "NoExecute"}
SOFT = {"key": "soft", "value": "x", "effect": "PreferNoSchedule"}


def taint(detail: str) -> NodeFailure:
    return NodeFailure("taint", detail)


def test_untolerated_taints_fail_and_are_named() -> None:
    nodes = [
        node("plain"),
        node("gpu", taints=[GPU]),
        node("evict", taints=[EVICT]),
        node("soft", taints=[SOFT]),
    ]
    assert judged(taint_toleration.PLUGIN, pod("p"), nodes) == {
        "plain": None,
        "gpu": taint("{gpu: reserved}"),
        "evict": taint("{maintenance}"),
        "soft": None,  # PreferNoSchedule only scores
    }


def test_the_first_untolerated_taint_is_the_one_named() -> None:
    nodes = [node("both", taints=[GPU, EVICT])]
    tolerate_gpu = [{"key": "gpu", "operator": "Equal", "value": "reserved", "effect": "NoSchedule"}]
    assert judged(taint_toleration.PLUGIN, pod("p"), nodes) == {"both": taint("{gpu: reserved}")}
    assert judged(taint_toleration.PLUGIN, pod("p", tolerations=tolerate_gpu), nodes) == {
        "both": taint("{maintenance}")
    }


def test_equal_needs_the_value_and_exists_any() -> None:
    nodes = [node("gpu", taints=[GPU])]
    other_value = [{"key": "gpu", "operator": "Equal", "value": "other"}]
    assert judged(taint_toleration.PLUGIN, pod("p", tolerations=other_value), nodes) == {
        "gpu": taint("{gpu: reserved}")
    }
    assert judged(
        taint_toleration.PLUGIN, pod("p", tolerations=[{"key": "gpu", "operator": "Exists"}]), nodes
    ) == {"gpu": None}


def test_the_plugin_and_reason_code() -> None:
    assert taint_toleration.NAME == "TaintToleration"
    assert taint_toleration.CODE == "taint"
