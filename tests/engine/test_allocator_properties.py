"""The indexed search decides exactly as the reference scan, and no sequence of decisions overcommits."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engine.allocation_testkit import A30, A100_40, config, gpu_node, request, vgpu_pod, view
from vgpu_guard.engine.allocator import Allocator, Placement
from vgpu_guard.engine.ledger import check_invariants

NODES = [
    gpu_node("a", [24576, 24576, 16384], split=4),
    gpu_node("b", 4, memory=24576, labels={"pool": "x"}),
    gpu_node("c", 2, memory=81920, taints=[{"key": "big", "value": "", "effect": "NoSchedule"}]),
    gpu_node("d", 2, memory=40960, card_type=A100_40, mode="mig", split=7),
    gpu_node("e", 2, memory=24576, card_type=A30, mode="mig", split=4),
    gpu_node("f", 1, unschedulable=True),
    # For the nodeSelector's short cut in ``diagnose``: every check that comes before the selector's.
    gpu_node("g", 0, labels={"pool": "y"}),  # no GPUs
    gpu_node("h", 1, labels={"pool": "y"}, ready=False),
    gpu_node("i", 2, labels={"pool": "x"}, unschedulable=True),
    gpu_node("j", 1, labels={"pool": "x"}, ready=False),
    gpu_node("m", 1, ready=False, unschedulable=True),  # not-ready is said before the cordon
]


def _no_vgpu_allocatable(node: dict[str, Any]) -> dict[str, Any]:
    """A registration the node's allocatable does not back: the GPU problem code."""
    allocatable = node["status"]["allocatable"]
    node["status"]["allocatable"] = {k: v for k, v in allocatable.items() if not k.startswith("volcano.sh/")}
    return node


NODES.append(_no_vgpu_allocatable(gpu_node("k", 1, labels={"pool": "y"})))
NODES.append(_no_vgpu_allocatable(gpu_node("l", 1, labels={"pool": "x"})))
SELECTORS = [
    None,
    None,
    {"pool": "x"},
    {"pool": "y"},
    {"pool": "z"},
    {"pool": "x", "kubernetes.io/hostname": "b"},
]
TOLERATIONS = {
    "none": (),
    "big": [{"key": "big", "operator": "Exists"}],
    "cordon": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}],
}

pods = st.fixed_dictionaries(
    {
        "memory": st.one_of(
            st.none(), st.sampled_from([1024, 4096, 5120, 10240, 12288, 20480, 24576, 40000])
        ),
        "number": st.sampled_from([None, 1, 1, 2, 3]),
        "cores": st.sampled_from([None, 0, 25, 50, 100]),
        "percentage": st.sampled_from([None, None, None, 25, 50]),
        "mode": st.sampled_from([None, "hami-core", "mig"]),
        "selector": st.sampled_from(SELECTORS),
        "tolerate": st.sampled_from(sorted(TOLERATIONS)),
        # PodGroup members, with Volcano's spread policy or without: both searches skip the same GPUs.
        "group": st.sampled_from([None, None, "g1", "g2"]),
        "spread": st.booleans(),
    }
)
ops = st.lists(
    st.one_of(st.tuples(st.just("place"), pods), st.tuples(st.just("release"), st.integers(0, 50))),
    max_size=40,
)


def build(spec: dict[str, Any], i: int) -> dict[str, Any]:
    notes = {}
    if spec["group"] is not None:
        notes["scheduling.k8s.io/group-name"] = spec["group"]
        if spec["spread"]:
            notes["volcano.sh/vgpu-podgroup-policy"] = "spread"
    return vgpu_pod(
        f"p{i}",
        memory=spec["memory"],
        number=spec["number"] if spec["memory"] is not None or spec["number"] else 1,
        cores=spec["cores"],
        percentage=spec["percentage"],
        mode=spec["mode"],
        node_selector=spec["selector"],
        tolerations=TOLERATIONS[spec["tolerate"]],
        annotations=notes,
    )


@settings(max_examples=120, deadline=None)
@given(
    ops, st.sampled_from(["binpack", "spread"]), st.dictionaries(st.sampled_from("abcde"), st.integers(0, 2))
)
def test_indexed_equals_scan_and_never_overcommits(
    operations: list[tuple[str, Any]], policy: Any, whole_card: dict[str, int]
) -> None:
    cfg = config(policy=policy)
    v = view(NODES, cfg)
    indexed = Allocator(v, {}, config=cfg, whole_card=whole_card)
    scan = Allocator(v, {}, config=cfg, whole_card=whole_card, search="scan")
    live: list[str] = []
    for i, (kind, arg) in enumerate(operations):
        if kind == "release":
            if live:
                uid = live.pop(arg % len(live))
                assert indexed.release(uid) == scan.release(uid)
            continue
        pod = request(build(arg, i), cfg)
        a, b = indexed.place(pod), scan.place(pod)
        assert a == b
        if isinstance(a, Placement):
            if pod.podgroup_spread:
                others = indexed.ledger(a.node).allocations.values()
                held = {
                    g.uuid for o in others if o.group == pod.group for g in o.grants() if g.memory or g.cores
                }
                assert held.isdisjoint(g.uuid for g in a.allocation.grants())
            indexed.commit(a)
            scan.commit(a)
            live.append(pod.uid)
    for name, info in v.nodes.items():
        assert check_invariants(indexed.ledger(name), info) == []
        assert indexed.ledger(name) == scan.ledger(name)
    # A fresh allocator over the resulting ledgers rebuilds the same index as the incremental one.
    rebuilt = Allocator(v, {n: indexed.ledger(n) for n in v.nodes}, config=cfg, whole_card=whole_card)
    probe = request(vgpu_pod("probe", memory=2048), cfg)
    assert rebuilt.place(probe) == indexed.place(probe)


def test_index_search_does_not_stop_at_the_first_feasible_node() -> None:
    """Node a is met first (its tight card lacks cores) but b has the tighter card that fits."""
    cfg = config()
    v = view([gpu_node("a", [24576, 24576]), gpu_node("b", [24576])], cfg)
    for search in ("indexed", "scan"):
        allocator = Allocator(v, {}, config=cfg, search=search)
        for pod in (
            vgpu_pod("cores", memory=14576, cores=60, annotations={"volcano.sh/vgpu-use-gpuuuid": "GPU-a-0"}),
            vgpu_pod("mem", memory=9576, annotations={"volcano.sh/vgpu-use-gpuuuid": "GPU-b-0"}),
        ):
            placed = allocator.place(request(pod, cfg))
            assert isinstance(placed, Placement)
            allocator.commit(placed)
        # a-0: 10000 MiB free, 40 % cores; b-0: 15000 free; a-1: 24576 free.
        result = allocator.place(request(vgpu_pod("p", memory=5000, cores=50), cfg))
        assert isinstance(result, Placement)
        assert (result.node, result.allocation.containers[0].devices[0].uuid) == ("b", "GPU-b-0")
