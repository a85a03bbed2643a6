"""Two vGPU containers Volcano may put on one card, whose use its cache counts once (issue 43 item 5).

Volcano 1.12.x and >= 1.15.0 (hami-core), 1.12+ (MIG) ``AddPod`` count a card once per pod UID: the second
container's memory, cores and slot vanish from its cache while the ledger counts them, so Volcano
keeps sending a third pod the card cannot hold. The mutating webhook warns such a pod at admission
(only where multiContainer lets it in at all).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from tests.builders import A100_40, A100_80, config_with, gpu_node, pod, view_of
from vgpu_guard.engine.admission import request_for, review_object
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.rules.pods_mutate import normalise_pod
from vgpu_guard.engine.rules.shared_card import shared_card_pair
from vgpu_guard.engine.violations import WARNING_LIMIT

NUM, MEM, CORES = "volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-cores"
HAMI = {"volcano.sh/vgpu-mode": "hami-core"}
WARN = config_with(admission={"multiContainer": "warn"})
NOTE = (
    'vgpu-guard: "train" and "eval" may share a GPU Volcano counts once: later pods there wait; '
    "use one vGPU container"
)


def container(name: str, memory: int | None, cores: int | None = None, number: int = 1) -> dict[str, Any]:
    limits: dict[str, Any] = {NUM: number}
    if memory is not None:
        limits[MEM] = memory
    if cores is not None:
        limits[CORES] = cores
    return {"name": name, "image": "i", "resources": {"limits": limits}}


def two(first: dict[str, Any], second: dict[str, Any], notes: Mapping[str, str] = HAMI) -> dict[str, Any]:
    return pod(containers=[first, second], annotations={**HAMI, **notes}, schedulerName="volcano")


@pytest.fixture
def a30s() -> ClusterView:
    return view_of([gpu_node("a30-0"), gpu_node("a30-1")], WARN)


def notes(obj: dict[str, Any], view: ClusterView, config: GuardConfig = WARN) -> tuple[str, ...]:
    result = review_object(request_for(obj, username="alice"), view, config)
    assert result.decision.allowed
    return tuple(w for w in result.warnings if "counts once" in w)


def test_two_containers_one_card_holds_are_warned(a30s: ClusterView) -> None:
    assert len(NOTE) <= WARNING_LIMIT
    assert notes(two(container("train", 8000, 30), container("eval", 8000, 30)), a30s) == (NOTE,)


def test_containers_without_cores_share_too(a30s: ClusterView) -> None:
    """0 cores is refused only on a card already at 100 (Volcano's ``cores-full``)."""
    assert shared_card_pair(two(container("a", 4000), container("b", 4000)), a30s, WARN) == ("a", "b")


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(container("a", 8000, 100), container("b", 8000, 100), id="both-exclusive"),
        pytest.param(container("a", 8000, 30), container("b", 8000, 100), id="second-exclusive"),
        pytest.param(container("a", 8000, 60), container("b", 8000, 50), id="cores-over-100"),
        pytest.param(container("a", 16000, 30), container("b", 16000, 30), id="memory-beyond-the-card"),
        pytest.param(container("a", None), container("b", None), id="whole-cards"),
    ],
)
def test_containers_no_card_holds_together_are_not_warned(
    a30s: ClusterView, first: dict[str, Any], second: dict[str, Any]
) -> None:
    """Volcano puts them on separate cards and counts each: nothing to warn about."""
    assert shared_card_pair(two(first, second), a30s, WARN) is None
    assert notes(two(first, second), a30s) == ()


def test_a_larger_kind_of_card_elsewhere_can_hold_both() -> None:
    obj = two(container("a", 16000, 30), container("b", 16000, 30))
    fleet = view_of([gpu_node("a30-0"), gpu_node("big", count=2, memory=81920, card_type=A100_80)], WARN)
    assert shared_card_pair(obj, fleet, WARN) == ("a", "b")


def test_a_card_with_one_split_slot_holds_one_container() -> None:
    fleet = view_of([gpu_node("solo", split=1)], WARN)
    assert shared_card_pair(two(container("a", 1000, 10), container("b", 1000, 10)), fleet, WARN) is None


def test_a_single_vgpu_container_is_not_warned(a30s: ClusterView) -> None:
    one = pod(containers=[container("a", 1000, 10), {"name": "side", "image": "i"}], annotations=HAMI)
    assert shared_card_pair(one, a30s, WARN) is None


def test_the_first_pair_in_volcano_order_is_named(a30s: ClusterView) -> None:
    obj = pod(
        containers=[container("a", 8000, 100), container("b", 8000, 30), container("c", 8000, 30)],
        annotations=HAMI,
    )
    assert shared_card_pair(obj, a30s, WARN) == ("b", "c")


def test_mig_instances_of_one_card_are_counted_once_too() -> None:
    """MIGFactory.AddPod returns at once for a UID it has: the second instance is not counted."""
    fleet = view_of([gpu_node("a100", count=2, memory=40960, card_type=A100_40, mode="mig", split=7)], WARN)
    mig = {"volcano.sh/vgpu-mode": "mig"}
    small = two(container("a", 3000), container("b", 3000), mig)
    assert shared_card_pair(small, fleet, WARN) == ("a", "b")
    # 25000 MiB needs 7g.40gb, the only instance of its group: one container per card.
    assert shared_card_pair(two(container("a", 25000), container("b", 25000), mig), fleet, WARN) is None


def test_only_cards_of_the_pods_mode_count() -> None:
    fleet = view_of(
        [gpu_node("small"), gpu_node("big", count=1, memory=81920, card_type=A100_80, mode="mig", split=7)],
        WARN,
    )
    assert shared_card_pair(two(container("a", 16000, 30), container("b", 16000, 30)), fleet, WARN) is None


def test_named_uuids_restrict_the_cards() -> None:
    """``vgpu-use-gpuuuid`` / ``vgpu-nouse-gpuuuid``: only the cards the pod may use count."""
    fleet = view_of([gpu_node("a30-0"), gpu_node("big", count=2, memory=81920, card_type=A100_80)], WARN)
    pair = (container("a", 16000, 30), container("b", 16000, 30))
    assert shared_card_pair(two(*pair, {"volcano.sh/vgpu-use-gpuuuid": "GPU-a30-0-1"}), fleet, WARN) is None
    assert shared_card_pair(two(*pair, {"volcano.sh/vgpu-use-gpuuuid": "GPU-big-1"}), fleet, WARN) == (
        "a",
        "b",
    )
    nouse = {"volcano.sh/vgpu-nouse-gpuuuid": "GPU-big-0,GPU-big-1"}
    assert shared_card_pair(two(*pair, nouse), fleet, WARN) is None
    assert shared_card_pair(two(*pair, {"volcano.sh/vgpu-nouse-gpuuuid": "GPU-big-0"}), fleet, WARN) == (
        "a",
        "b",
    )


def test_each_view_is_judged_on_its_own_cards() -> None:
    """The kinds are remembered per view: a view with other nodes is not answered from the last."""
    obj = two(container("a", 16000, 30), container("b", 16000, 30))
    small = view_of([gpu_node("a30-0")], WARN)
    big = view_of([gpu_node("big", count=1, memory=81920, card_type=A100_80)], WARN)
    assert [shared_card_pair(obj, v, WARN) for v in (small, big, small)] == [None, ("a", "b"), None]
    assert shared_card_pair(obj, dataclasses.replace(small, nodes=big.nodes), WARN) == ("a", "b")


def test_denied_by_multi_container_the_pod_gets_no_note(a30s: ClusterView) -> None:
    """The default (multiContainer deny): the pod is refused, so the cards are not even looked at."""
    deny = config_with(admission={"multiContainer": "deny"})
    obj = two(container("train", 8000, 30), container("eval", 8000, 30))
    _, warnings = normalise_pod(obj, a30s, deny)
    assert not [w for w in warnings if "counts once" in w]
    assert not review_object(request_for(obj, username="alice"), a30s, deny).decision.allowed


def test_with_routing_on_our_allocator_counts_both(a30s: ClusterView) -> None:
    routed = config_with(admission={"multiContainer": "warn"}, scheduling={"routing": True})
    obj = two(container("train", 8000, 30), container("eval", 8000, 30))
    assert notes(obj, a30s, routed) == ()
