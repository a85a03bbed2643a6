"""The framework: plugins in order, the first failure per node, PreFilter refusals after the
node's own checks, the resources left for later, and plugins that skip a pod."""

from __future__ import annotations

from typing import Any

from tests.builders import default_config
from tests.engine.scheduling.kit import node, node_obj, pod, workloads
from vgpu_guard.engine.cluster import NodeInfo, node_info
from vgpu_guard.engine.scheduling import Framework, node_cycle, pod_facts
from vgpu_guard.engine.scheduling.framework import NODE_PLUGINS, POD_PLUGINS
from vgpu_guard.engine.scheduling.plugin import rejected
from vgpu_guard.engine.scheduling.plugins import (
    node_affinity,
    node_name,
    node_ready,
    node_unschedulable,
    taint_toleration,
)

GPU_TAINT = {"key": "gpu", "value": "x", "effect": "NoSchedule"}


def broken(name: str, *, ready: bool = True, cordoned: bool = False, **kw: Any) -> NodeInfo:
    obj: dict[str, Any] = node_obj(name, **kw)
    obj["spec"]["unschedulable"] = cordoned
    if not ready:
        obj["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    return node_info(obj, default_config())


def test_the_plugin_order() -> None:
    assert [p.name for p in NODE_PLUGINS] == [
        "NodeReady",
        "NodeUnschedulable",
        "NodeAffinity",
        "TaintToleration",
    ]
    assert [p.name for p in POD_PLUGINS] == [
        "NodeName",
        "NodePorts",
        "NodeResourcesFit",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
    ]


def test_a_node_reports_only_its_first_failure_in_order() -> None:
    incoming = pod("p", nodeSelector={"pool": "a"})
    cycle = node_cycle(pod_facts(incoming))
    assert cycle.filter(broken("n", ready=False, cordoned=True, taints=[GPU_TAINT])) == node_ready.NOT_READY
    assert cycle.filter(broken("n", cordoned=True, taints=[GPU_TAINT])) == node_unschedulable.UNSCHEDULABLE
    assert cycle.filter(broken("n", taints=[GPU_TAINT])) == node_affinity.SELECTOR
    tainted = broken("n", labels={"pool": "a"}, taints=[GPU_TAINT])
    assert cycle.filter(tainted) == taint_toleration.PLUGIN.filter((), tainted)
    assert cycle.filter(broken("n", labels={"pool": "a"})) is None


def test_filter_before_runs_only_the_checks_before_the_named_plugin() -> None:
    cycle = node_cycle(pod_facts(pod("p", nodeSelector={"pool": "a"})))
    assert (
        cycle.filter_before(node_affinity.NAME, broken("n", cordoned=True))
        == node_unschedulable.UNSCHEDULABLE
    )
    assert cycle.filter_before(node_affinity.NAME, broken("n", taints=[GPU_TAINT])) is None


def test_a_refusal_counts_on_every_node_that_passes_the_nodes_own_checks() -> None:
    nodes = [node("n1"), broken("n2", cordoned=True)]
    framework = Framework({n.name: n for n in nodes}, workloads())
    claimed = pod("p", node="n9", volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": "gone"}}])
    cycle = framework.prepare(pod_facts(claimed))
    assert cycle.filter(nodes[0]) == rejected('persistentvolumeclaim "gone" not found')
    assert cycle.filter(nodes[1]) == node_unschedulable.UNSCHEDULABLE


def test_without_workloads_or_facts_only_the_nodes_own_checks_run() -> None:
    nodes = [node("n1")]
    incoming = pod_facts(pod("p", node="n9"))
    assert Framework({"n1": nodes[0]}, None).prepare(incoming).filter(nodes[0]) is None
    full = Framework({"n1": nodes[0]}, workloads())
    assert full.prepare(incoming, node_only=True).filter(nodes[0]) is None
    assert full.prepare(incoming).filter(nodes[0]) == rejected(node_name.REASON)


def test_resources_left_for_later_are_judged_by_fits_later_alone() -> None:
    small = node("n1", allocatable={"cpu": "1", "pods": "10", "example.com/dev": "1"})
    framework = Framework({"n1": small}, workloads())
    incoming = pod_facts(pod("p", requests={"cpu": "2", "example.com/dev": "2"}))
    later = frozenset({"example.com/dev"})
    cycle = framework.prepare(incoming, later=later)
    assert cycle.filter(small) == rejected("Insufficient cpu")
    assert cycle.fits_later(small) == rejected("Insufficient example.com/dev")
    whole = framework.prepare(incoming)
    assert whole.filter(small) == rejected("Insufficient cpu", "Insufficient example.com/dev")
    assert whole.fits_later(small) is None


def test_least_allocated_is_zero_when_the_pods_are_not_counted() -> None:
    roomy = node("n1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "10"})
    incoming = pod_facts(pod("p", requests={"cpu": "1", "memory": "2Gi"}))
    assert Framework({"n1": roomy}, workloads()).prepare(incoming).least_allocated(roomy) == 75
    assert Framework({"n1": roomy}, None).prepare(incoming).least_allocated(roomy) == 0
