"""Among nodes that fit, the GPU packing policy decides first; between equally packed GPUs, the node
kube-scheduler's LeastAllocated would prefer (most cpu and memory left), then the node name."""

from __future__ import annotations

import pytest

from tests.builders import gpu_node
from tests.engine.scheduling.test_unavailable_message import allocator, request_of, vgpu
from vgpu_guard.engine.allocator import Placement


@pytest.mark.parametrize("search", ["indexed", "scan"])
def test_equal_gpus_go_to_the_node_with_more_cpu_left(search: str) -> None:
    nodes = [gpu_node(f"n{i}", count=1, cpu="8") for i in range(3)]
    busy = [vgpu("busy-0", memory=0, cpu="6", node="n0"), vgpu("busy-1", memory=0, cpu="2", node="n2")]
    alloc = allocator(nodes, busy)
    alloc.search = search  # type: ignore[assignment]
    placed = alloc.place(request_of(vgpu("p", cpu="1")))
    assert isinstance(placed, Placement)
    assert placed.node == "n1"


def test_packing_wins_over_the_cpu_tie_break() -> None:
    """binpack: the card already half used takes the pod, however busy its node's cpu."""
    nodes = [gpu_node("n0", count=1, cpu="8"), gpu_node("n1", count=1, cpu="8")]
    existing = [vgpu("half", memory=12288, cpu="7", node="n0")]
    alloc = allocator(nodes, existing)
    first = alloc.place(request_of(vgpu("a", memory=12288, cpu="500m")))
    assert isinstance(first, Placement)
    alloc.commit(first)
    second = alloc.place(request_of(vgpu("b", memory=6144, cpu="500m")))
    assert isinstance(second, Placement)
    # Both nodes' cards were empty for "a"; n1 has more cpu left, so "a" went there; "b" then packs
    # onto n1's half-used card although n0 has the emptier card.
    assert (first.node, second.node) == ("n1", "n1")


def test_the_same_input_gives_the_same_node() -> None:
    nodes = [gpu_node(f"n{i}", count=2) for i in range(5)]
    picks = {allocator(nodes).place(request_of(vgpu("p"))).node for _ in range(3)}  # type: ignore[union-attr]
    assert picks == {"n0"}
