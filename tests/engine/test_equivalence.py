"""The equivalence memo: replicas reuse a node's verdict only while nothing that decides it moved.

The reference scan never uses the memo, so every test places the same pods with both searches
and requires the same decisions; the counts of real node evaluations show the memo is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest

from tests.builders import default_config, gpu_node, view_of
from tests.engine.scheduling.test_unavailable_message import request_of, vgpu
from vgpu_guard.engine.allocator import Allocator, Placement, Unplaceable
from vgpu_guard.engine.equivalence import equivalence_class
from vgpu_guard.engine.scheduling import Workloads, pod_facts

Obj = dict[str, Any]


def pair(nodes: list[Obj], policy: str = "spread") -> tuple[Allocator, Allocator, Workloads, Workloads]:
    cfg = default_config()
    cfg = cfg.model_copy(update={"scheduling": cfg.scheduling.model_copy(update={"policy": policy})})
    view = view_of(nodes)
    w1, w2 = Workloads(), Workloads()
    indexed = Allocator(view, {}, config=cfg, workloads=w1)
    scan = Allocator(view, {}, config=cfg, workloads=w2, search="scan")
    return indexed, scan, w1, w2


@contextmanager
def evaluations(allocator: Allocator) -> Iterator[list[str]]:
    """Record the nodes ``allocator`` really evaluates (memo hits do not show)."""
    seen: list[str] = []
    judge = allocator._node_fit
    original = judge.evaluate

    def counted(pod: Any, node: Any, cycle: Any) -> Any:
        seen.append(node.info.name)
        return original(pod, node, cycle)

    judge.evaluate = counted  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        judge.evaluate = original  # type: ignore[method-assign]


def place_both(indexed: Allocator, scan: Allocator, pod: Obj) -> Placement | Unplaceable:
    a, b = indexed.place(request_of(pod)), scan.place(request_of(pod))
    assert a == b
    if isinstance(a, Placement):
        indexed.commit(a)
        scan.commit(b)  # type: ignore[arg-type]
    return a


@pytest.mark.parametrize("policy", ["spread", "binpack"])
def test_a_burst_of_replicas_decides_as_the_scan_and_reuses_verdicts(policy: str) -> None:
    nodes = [gpu_node(f"n{i}", count=2, cpu="4") for i in range(12)]
    indexed, scan, _, _ = pair(nodes, policy)
    with evaluations(indexed) as seen:
        for i in range(60):
            place_both(indexed, scan, vgpu(f"r{i}", memory=2048, cpu="500m"))
    # Without the memo, spread weighs up to 12 nodes for each of the 60 replicas; with it, a node
    # is evaluated again only after a replica landed on it.
    assert seen, "evaluations() recorded nothing: it no longer patches what the search calls"
    assert len(seen) <= 12 + 60


def test_a_pod_counted_on_a_node_outside_the_allocator_invalidates_its_verdict() -> None:
    """World counts a bound non-GPU pod on n0 (workloads.assume): n0's remembered "fits" must go."""
    nodes = [gpu_node("n0", count=2, cpu="4"), gpu_node("n1", count=2, cpu="2")]
    indexed, scan, w1, w2 = pair(nodes)
    first = place_both(indexed, scan, vgpu("r0", memory=2048, cpu="1"))
    assert isinstance(first, Placement) and first.node == "n0"  # more cpu left on n0
    # A look that is not committed: the memo now holds n0's verdict at its current epochs.
    probe = indexed.place(request_of(vgpu("probe", memory=2048, cpu="1")))
    assert isinstance(probe, Placement) and probe.node == "n0"
    hog = pod_facts(vgpu("hog", memory=0, cpu="3", node="n0"))
    w1.assume(hog, "n0")
    w2.assume(hog, "n0")
    second = place_both(indexed, scan, vgpu("r1", memory=2048, cpu="1"))
    assert isinstance(second, Placement) and second.node == "n1"


def test_a_release_and_a_node_change_invalidate_verdicts() -> None:
    nodes = [gpu_node("n0", count=1, memory=4096), gpu_node("n1", count=1, memory=4096)]
    indexed, scan, _, _ = pair(nodes, "binpack")
    placed = [place_both(indexed, scan, vgpu(f"r{i}", memory=4096)) for i in range(3)]
    assert isinstance(placed[2], Unplaceable)  # both cards full, remembered as "does not fit"
    assert isinstance(placed[0], Placement)
    assert indexed.release(placed[0].pod.uid) == scan.release(placed[0].pod.uid)
    again = place_both(indexed, scan, vgpu("r3", memory=4096))
    assert isinstance(again, Placement) and again.node == placed[0].node
    bigger = view_of([gpu_node("n0", count=1, memory=8192), nodes[1]]).nodes["n0"]
    for allocator in (indexed, scan):
        allocator.replace_node("n0", bigger)
    last = place_both(indexed, scan, vgpu("r4", memory=4096))
    assert isinstance(last, Placement) and last.node == "n0"


def test_pods_whose_verdict_depends_on_other_nodes_have_no_class() -> None:
    plain = request_of(vgpu("p", cpu="1"))
    assert equivalence_class(plain, anti_affinity_pods=0) is not None
    # The same request under another name and UID is the same class; another request is not.
    twin = request_of(vgpu("q", cpu="1"))
    assert equivalence_class(twin, anti_affinity_pods=0) == equivalence_class(plain, anti_affinity_pods=0)
    other = request_of(vgpu("q", cpu="2"))
    assert equivalence_class(other, anti_affinity_pods=0) != equivalence_class(plain, anti_affinity_pods=0)
    # A placed pod with required anti-affinity can refuse a newcomer on every node of its domain.
    assert equivalence_class(plain, anti_affinity_pods=1) is None
    assert plain.facts is not None
    term: Any = object()
    for field in ("affinity", "anti_affinity", "spread", "claims"):
        change: dict[str, Any] = {field: (term,)}
        changed = replace(plain, facts=replace(plain.facts, **change))
        assert equivalence_class(changed, anti_affinity_pods=0) is None, field
