"""MIG placement: Volcano's group rules, NVIDIA's legal placements, no overlap ever."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engine.allocation_testkit import (
    A30,
    A100_40,
    assert_within_capacity,
    config,
    gpu_node,
    place_all,
    request,
    vgpu_pod,
    view,
)
from vgpu_guard.engine.allocator import Allocator, Placement, Unplaceable
from vgpu_guard.engine.assignment import encode_assignment
from vgpu_guard.engine.config import MigGeometry, MigGeometryGroup
from vgpu_guard.engine.ledger import check_invariants
from vgpu_guard.engine.mig_placement import group_layout, profile_slices


def mig_node(name: str, gpus: int = 1, card_type: str = A100_40, memory: int = 40960) -> dict[str, object]:
    return gpu_node(name, gpus, memory=memory, card_type=card_type, mode="mig", split=7)


def test_group_layout_follows_nvidia_placements() -> None:
    group2 = MigGeometryGroup(
        group="group2",
        geometries=(
            MigGeometry(name="2g.10gb", memory=10240, count=3),
            MigGeometry(name="1g.5gb", memory=5120, count=1),
        ),
    )
    layout = group_layout(A100_40, group2)
    assert [(s.profile, s.start, s.size) for s in layout if s is not None] == [
        ("2g.10gb", 0, 2),
        ("2g.10gb", 2, 2),
        ("2g.10gb", 4, 2),
        ("1g.5gb", 6, 1),
    ]
    too_many = MigGeometryGroup(group="g", geometries=(MigGeometry(name="1g.5gb", memory=5120, count=8),))
    assert group_layout(A100_40, too_many)[7] is None
    assert sum(s is not None for s in group_layout(A100_40, too_many)) == 7
    clash = MigGeometryGroup(
        group="g",
        geometries=(
            MigGeometry(name="3g.20gb", memory=20480, count=2),
            MigGeometry(name="2g.10gb", memory=10240, count=1),
        ),
    )
    assert [s is not None for s in group_layout(A100_40, clash)] == [True, True, False]
    assert profile_slices(A100_40, "1g.10gb") == ((0, 2, 4, 6), 2)
    assert profile_slices(A100_40, "1g.5gb") == ((0, 1, 2, 3, 4, 5, 6), 1)
    assert profile_slices(A30, "2g.12gb") == ((0, 2), 2)
    assert profile_slices("NVIDIA-NVIDIA A100-SXM4-80GB", "7g.79gb") == ((0,), 8)
    assert profile_slices("NVIDIA-Tesla T4", "1g.5gb") is None


def test_first_group_wins_on_an_empty_card_and_locks_it() -> None:
    cfg = config()
    allocator = Allocator(view([mig_node("m")], cfg), {}, config=cfg)
    results = place_all(allocator, [vgpu_pod(f"p{i}", memory=5120, mode="mig") for i in range(8)])
    placed = [r for r in results if isinstance(r, Placement)]
    # group1 = 7 x 1g.5gb: seven fit, the eighth finds no free instance in the locked group.
    assert len(placed) == 7
    slots = sorted(p.allocation.containers[0].devices[0].mig.position for p in placed)  # type: ignore[union-attr]
    assert slots == list(range(7))
    assert isinstance(results[7], Unplaceable)
    assert results[7].message == "0/1 nodes are available: 1 GPU has no free vGPU slot"
    assert_within_capacity(allocator)
    assert encode_assignment(placed[0].allocation.containers) == "GPU-m-0[group1-0],NVIDIA,5120,0:"


def test_a_locked_group_refuses_a_bigger_instance() -> None:
    cfg = config()
    allocator = Allocator(view([mig_node("m")], cfg), {}, config=cfg)
    results = place_all(
        allocator, [vgpu_pod("small", memory=5120, mode="mig"), vgpu_pod("big", memory=20480, mode="mig")]
    )
    assert isinstance(results[0], Placement)
    assert isinstance(results[1], Unplaceable)
    assert results[1].message == "0/1 nodes are available: 1 GPU has no free MIG instance >= 20480 MiB"


def test_mig_mode_must_match() -> None:
    cfg = config()
    allocator = Allocator(view([mig_node("m"), gpu_node("h", 1)], cfg), {}, config=cfg)
    result = allocator.place(request(vgpu_pod("p", memory=5120, mode="mig"), cfg))
    assert isinstance(result, Placement) and result.node == "m"
    result = allocator.place(request(vgpu_pod("q", memory=5120, mode="hami-core"), cfg))
    assert isinstance(result, Placement) and result.node == "h"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.sampled_from([1000, 5120, 10240, 20480, 40960, 6144, 12288, 24576])),
        min_size=1,
        max_size=30,
    )
)
def test_mig_placements_never_overlap(ops: list[tuple[bool, int]]) -> None:
    """Random places and releases on A100 and A30 MIG cards: every ledger state passes the invariants."""
    cfg = config()
    nodes = [mig_node("a100", 2), mig_node("a30", 2, card_type=A30, memory=24576)]
    allocator = Allocator(view(nodes, cfg), {}, config=cfg)
    live: list[str] = []
    for i, (release, memory) in enumerate(ops):
        if release and live:
            allocator.release(live.pop(0))
        else:
            result = allocator.place(request(vgpu_pod(f"p{i}", memory=memory, mode="mig"), cfg))
            if isinstance(result, Placement):
                allocator.commit(result)
                live.append(result.pod.uid)
        for name, info in allocator.view.nodes.items():
            assert check_invariants(allocator.ledger(name), info) == []
