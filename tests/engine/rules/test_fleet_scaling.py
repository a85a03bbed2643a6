"""Capacity rules on fleets that grow (issue 21): warn when node groups can scale, deny otherwise.

"A pod asking for a GPU larger than any current node is admitted with a warning when the fleet is
marked as scaling, and denied otherwise; both texts golden-tested."
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tests.builders import A100_40, config_with, default_config, gpu_node, pod, view_of
from vgpu_guard.engine.admission import request_for, review_object
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import Action, GuardConfig
from vgpu_guard.engine.rules.fleet import CAPACITY_RULES, fleet_config, fleet_scales
from vgpu_guard.engine.violations import clip_warning

MEM = "spec.containers[0].resources.limits[volcano.sh/vgpu-memory]"
NUM = "spec.containers[0].resources.limits[volcano.sh/vgpu-number]"
HUGE = {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 40000}

DENIED = (
    f"[vgpu-memory-too-large] {MEM}: 40000 MiB is more than the largest card offers (24576 MiB); "
    "ask for at most 24576 per card, or more cards"
)
WARNED = (
    f"[vgpu-memory-too-large] {MEM}: 40000 MiB > 24576 MiB, the largest current card; admitted as the fleet can "
    "grow (admission.fleetScaling): Pending until a node with such a card joins"
)


def fleet(*, labels: dict[str, str] | None = None) -> ClusterView:
    return view_of([gpu_node("a30", labels=labels)])


def review(obj: dict[str, Any], view: ClusterView, config: GuardConfig) -> Any:
    return review_object(request_for(obj, username="alice"), view, config).decision


def test_fixed_fleet_denies_a_card_larger_than_any_node() -> None:
    decision = review(pod(HUGE), fleet(), config_with(admission={"fleetScaling": "fixed"}))
    assert (decision.allowed, decision.code, decision.message) == (False, 403, DENIED)


def test_scaling_fleet_admits_it_with_a_warning() -> None:
    decision = review(pod(HUGE), fleet(), config_with(admission={"fleetScaling": "scaling"}))
    assert decision.allowed
    assert decision.violations[0].render() == WARNED
    assert decision.warnings[-1] == clip_warning(WARNED)
    # What kubectl prints: warnings are clipped to 120 characters, the numbers come first.
    assert decision.warnings[-1] == f"[vgpu-memory-too-large] {MEM}: 40000 MiB > 24576 MiB, the largest…"


def test_auto_reads_karpenter_labels_and_falls_back_to_fixed() -> None:
    config = default_config()
    assert config.admission.fleet_scaling == "auto"
    assert not review(pod(HUGE), fleet(), config).allowed
    for label in ("karpenter.sh/nodepool", "karpenter.sh/provisioner-name"):
        karpenter = fleet(labels={label: "gpu"})
        assert fleet_scales(karpenter, config)
        assert review(pod(HUGE), karpenter, config).allowed
    # Managed node-group labels are on every managed node, autoscaled or not: no signal.
    for label in ("eks.amazonaws.com/nodegroup", "cloud.google.com/gke-nodepool"):
        assert not fleet_scales(fleet(labels={label: "gpu"}), config)


def test_an_explicit_rule_action_wins_over_the_fleet_default() -> None:
    config = config_with(admission={"fleetScaling": "scaling", "rules": {"vgpu-memory-too-large": "enforce"}})
    decision = review(pod(HUGE), fleet(), config)
    assert (decision.allowed, decision.message) == (False, DENIED)
    effective = fleet_config(config, fleet())
    assert effective.action_for("vgpu-memory-too-large") is Action.ENFORCE
    others = CAPACITY_RULES - {"vgpu-memory-too-large"}
    assert {r: effective.action_for(r) for r in others} == dict.fromkeys(others, Action.WARN)


def test_fixed_fleet_config_is_returned_unchanged() -> None:
    config = config_with(admission={"fleetScaling": "fixed"})
    assert fleet_config(config, fleet()) is config


def test_more_cards_than_any_node_on_a_scaling_fleet() -> None:
    obj = pod({"volcano.sh/vgpu-number": 8, "volcano.sh/vgpu-memory": 1024})
    decision = review(obj, fleet(), config_with(admission={"fleetScaling": "scaling"}))
    assert decision.allowed
    assert decision.violations[0].render() == (
        f"[vgpu-number-range] {NUM}: 8 > 4, the most cards on any current node; admitted as the fleet can "
        "grow (admission.fleetScaling): Pending until a node with 8 GPUs joins"
    )


def test_a_mode_no_current_node_offers_on_a_scaling_fleet() -> None:
    obj = pod(
        {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 1024},
        annotations={"volcano.sh/vgpu-mode": "mig"},
    )
    decision = review(obj, fleet(), config_with(admission={"fleetScaling": "scaling"}))
    assert decision.allowed
    assert [v.render() for v in decision.violations] == [
        "[vgpu-mode-unavailable] metadata.annotations[volcano.sh/vgpu-mode]: mig is offered by no current node "
        "(offered: hami-core); admitted as the fleet can grow (admission.fleetScaling): Pending until a node "
        "offering mig joins"
    ]


def test_no_mig_profile_on_a_scaling_fleet() -> None:
    view = view_of([gpu_node("a100", count=8, memory=40960, card_type=A100_40, mode="mig", split=7)])
    obj = pod(
        {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 50000},
        annotations={"volcano.sh/vgpu-mode": "mig"},
    )
    decision = review(obj, view, config_with(admission={"fleetScaling": "scaling"}))
    assert decision.allowed
    assert [v.rule for v in decision.violations] == ["mig-no-profile"]
    assert decision.violations[0].render() == (
        f"[mig-no-profile] {MEM}: 50000 MiB fits no current MIG profile (largest: 7g.40gb, 40960 MiB on "
        "NVIDIA A100-SXM4-40GB); admitted as the fleet can grow (admission.fleetScaling): Pending until a node with a "
        "larger MIG card joins"
    )


def test_field_errors_still_deny_on_a_scaling_fleet() -> None:
    obj = pod({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": "12Gi"})
    assert not review(obj, fleet(), config_with(admission={"fleetScaling": "scaling"})).allowed


def test_fleet_scaling_accepts_only_its_three_values() -> None:
    with pytest.raises(ValidationError, match="fleetScaling"):
        config_with(admission={"fleetScaling": "sometimes"})
