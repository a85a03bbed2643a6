"""When no node offers vGPU at all, the capacity rules say why, not "ask for at most 0"."""

from __future__ import annotations

from typing import Any

from tests.builders import config_with, gpu_node, pod, view_of
from vgpu_guard.engine.admission import request_for, review_object
from vgpu_guard.engine.cluster import ClusterView

NUM = "spec.containers[0].resources.limits[volcano.sh/vgpu-number]"
MEM = "spec.containers[0].resources.limits[volcano.sh/vgpu-memory]"
FIX = "fix the nodes' GPU registration (see vgpu-guard status)"
ASK = {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 3000}


def denial(view: ClusterView, obj: dict[str, Any] | None = None) -> list[str]:
    config = config_with(admission={"fleetScaling": "fixed"})
    decision = review_object(request_for(obj or pod(ASK), username="alice"), view, config).decision
    assert not decision.allowed
    return str(decision.message).splitlines()


def test_a_node_whose_registration_cannot_be_used_is_named_with_its_problem() -> None:
    broken = gpu_node("t4-0")
    broken["status"]["allocatable"] = {"cpu": "2", "memory": "64Gi"}  # no vGPU resources
    also = gpu_node("t4-1", registration="garbage")
    why = "node t4-0: registered GPUs but allocatable has no volcano.sh/vgpu-number, volcano.sh/vgpu-memory, volcano.sh/vgpu-cores; 1 more node(s) likewise"
    assert denial(view_of([broken, also])) == [
        f"[vgpu-number-range] {NUM}: 1 card(s) asked, but no node offers vGPU ({why}); {FIX}",
        f"[vgpu-memory-too-large] {MEM}: 3000 MiB of memory asked, but no node offers vGPU ({why}); {FIX}",
    ]


def test_nodes_without_any_registration_and_a_cluster_without_nodes() -> None:
    plain = gpu_node("cpu-0")
    del plain["metadata"]["annotations"]["volcano.sh/node-vgpu-register"]
    assert denial(view_of([plain]))[0] == (
        f"[vgpu-number-range] {NUM}: 1 card(s) asked, but no node offers vGPU (none of its 1 node(s) "
        f"registers a GPU (annotation volcano.sh/node-vgpu-register)); {FIX}"
    )
    assert denial(view_of([]))[0] == (
        f"[vgpu-number-range] {NUM}: 1 card(s) asked, but no node offers vGPU (the cluster has no nodes); {FIX}"
    )


def test_an_asked_mode_names_the_same_cause() -> None:
    obj = pod(ASK, annotations={"volcano.sh/vgpu-mode": "mig"})
    assert denial(view_of([]))[0].startswith("[vgpu-number-range]")
    lines = denial(view_of([]), obj)
    assert (
        "[vgpu-mode-unavailable] metadata.annotations[volcano.sh/vgpu-mode]: mig asked, but no node offers vGPU "
        f"(the cluster has no nodes); {FIX}"
    ) in lines


def test_a_fleet_that_scales_from_zero_admits_and_waits_instead() -> None:
    """An autoscaler's GPU node group may start at zero nodes: that is not a registration problem."""
    config = config_with(admission={"fleetScaling": "scaling"})
    decision = review_object(request_for(pod(ASK), username="alice"), view_of([]), config).decision
    assert decision.allowed
    assert any(
        w.startswith(f"[vgpu-number-range] {NUM}: 1 > 0, the most cards on any current")
        for w in decision.warnings
    )
    assert not any("no node offers vGPU" in w for w in decision.warnings)


def test_a_value_the_server_made_canonical_is_echoed_as_the_user_wrote_it() -> None:
    """Issue 38 item 8: kube-apiserver hands admission ``1k`` for a written ``vgpu-memory: 1000`` (and
    ``2k`` cards, ``1k`` percent); the denial said ``1k of memory asked``, a byte count the user never
    wrote. It says ``1000 MiB``, the number and unit the user wrote."""
    canonical = pod(
        {"volcano.sh/vgpu-number": "2k", "volcano.sh/vgpu-memory": "1k", "volcano.sh/vgpu-cores": "1k"}
    )
    lines = denial(view_of([gpu_node("t4-0")]), canonical)
    cores = "spec.containers[0].resources.limits[volcano.sh/vgpu-cores]"
    assert (
        f"[vgpu-cores-range] {cores}: 1000 is outside 0..100 (percent of one GPU); use 0..100, 100 = whole card"
        in lines
    )
    assert any(
        line.startswith(f"[vgpu-number-range] {NUM}: 2000 is more cards than any node has") for line in lines
    )
    assert denial(view_of([]), pod({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": "1k"}))[
        1
    ].startswith(f"[vgpu-memory-too-large] {MEM}: 1000 MiB of memory asked, but no node offers vGPU")
    huge = pod({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": "40k"})
    assert denial(view_of([gpu_node("t4-0")]), huge)[0] == (
        f"[vgpu-memory-too-large] {MEM}: 40000 MiB is more than the largest card offers (24576 MiB); "
        "ask for at most 24576 per card, or more cards"
    )
