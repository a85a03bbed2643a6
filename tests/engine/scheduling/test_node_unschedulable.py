"""NodeUnschedulable (nodeunschedulable/node_unschedulable.go, 1.20): a cordoned node takes only
pods that tolerate node.kubernetes.io/unschedulable:NoSchedule."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import default_config
from tests.engine.scheduling.kit import judged, node, node_obj, pod
from vgpu_guard.engine.cluster import NodeInfo, node_info
from vgpu_guard.engine.scheduling.plugins import node_unschedulable
from vgpu_guard.engine.scheduling.plugins.node_unschedulable import UNSCHEDULABLE


def cordoned(name: str) -> NodeInfo:
    obj: dict[str, Any] = node_obj(name)
    obj["spec"]["unschedulable"] = True
    return node_info(obj, default_config())


def test_a_cordoned_node_fails_a_pod_without_the_toleration() -> None:
    assert judged(node_unschedulable.PLUGIN, pod("p"), [node("open"), cordoned("shut")]) == {
        "open": None,
        "shut": UNSCHEDULABLE,
    }


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
        {"operator": "Exists"},
    ],
)
def test_a_pod_that_tolerates_the_cordon_has_nothing_to_check(toleration: dict[str, str]) -> None:
    assert judged(node_unschedulable.PLUGIN, pod("p", tolerations=[toleration]), [cordoned("shut")]) is None


def test_a_toleration_of_another_effect_does_not_cover_the_cordon() -> None:
    toleration = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoExecute"}
    assert judged(node_unschedulable.PLUGIN, pod("p", tolerations=[toleration]), [cordoned("shut")]) == {
        "shut": UNSCHEDULABLE
    }


def test_the_plugin_and_reason_code() -> None:
    assert node_unschedulable.NAME == "NodeUnschedulable"
    assert UNSCHEDULABLE.code == "unschedulable"
