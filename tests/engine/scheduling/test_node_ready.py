"""NodeReady: vgpu-guard's own check (kube-scheduler 1.20 relies on the not-ready taint)."""

from __future__ import annotations

from typing import Any

from tests.builders import default_config
from tests.engine.scheduling.kit import judged, node, node_obj, pod
from vgpu_guard.engine.cluster import NodeInfo, node_info
from vgpu_guard.engine.node_terms import Toleration
from vgpu_guard.engine.scheduling import pod_facts
from vgpu_guard.engine.scheduling.plugin import Snapshot
from vgpu_guard.engine.scheduling.plugins import node_ready
from vgpu_guard.engine.scheduling.workloads import Workloads


def not_ready(name: str) -> NodeInfo:
    obj: dict[str, Any] = node_obj(name)
    obj["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    return node_info(obj, default_config())


def test_a_ready_node_passes_and_one_that_is_not_fails() -> None:
    assert judged(node_ready.PLUGIN, pod("p"), [node("up"), not_ready("down")]) == {
        "up": None,
        "down": node_ready.NOT_READY,
    }


def test_tolerating_the_not_ready_taint_does_not_help() -> None:
    # Stricter than kube-scheduler: a vGPU pod is never bound to a node that is down.
    facts = pod_facts(pod("p", tolerations=[{"operator": "Exists"}]))
    assert facts.tolerations == (Toleration("", "Exists", "", ""),)
    state = node_ready.PLUGIN.prepare(facts, Snapshot({}, Workloads()))
    assert node_ready.PLUGIN.filter(state, not_ready("down")) == node_ready.NOT_READY


def test_the_reason_code() -> None:
    assert node_ready.NAME == "NodeReady"
    assert node_ready.NOT_READY.code == "not-ready"
