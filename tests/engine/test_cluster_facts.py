"""``FleetTally`` counts what a walk over the nodes finds, node by node, in any order of adds and
removes; a view uses a builder's facts only for the very nodes mapping they describe."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.builders import A30, A100_40, default_config, gpu_node
from vgpu_guard.engine.cluster import ClusterView, FleetFacts, FleetTally, NodeInfo, node_info

CONFIG = default_config()

# Nodes of every kind a fleet mixes: cards of several sizes, MIG, a broken registration, no GPUs.
KINDS: list[Callable[[str], dict[str, Any]]] = [
    lambda n: gpu_node(n, memory=24576),
    lambda n: gpu_node(n, memory=40960, card_type=A100_40, mode="mig", count=2),
    lambda n: gpu_node(
        n, memory=81920, count=8, labels={"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}
    ),
    lambda n: gpu_node(n, registration="GPU-0,10,not-a-number,x,true,hami-core:"),
    lambda n: {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {"zone": "z1"}}},
    lambda n: gpu_node(n, memory=24576, card_type=A30, mode="mig"),
]


def facts(f: FleetFacts) -> tuple[object, ...]:
    return (
        f.gpu_node_count,
        f.offered_modes,
        f.max_gpus_per_node,
        f.largest_card_memory,
        f.mig_card_types,
        f.label_keys,
        f.gpu_nodes,
    )


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, len(KINDS) - 1)), max_size=40), st.randoms())
def test_the_tally_agrees_with_a_walk_after_any_adds_and_removes(
    steps: list[tuple[int, int]], rng: random.Random
) -> None:
    tally, nodes = FleetTally(), dict[str, NodeInfo]()
    for slot, kind in steps:
        name = f"n{slot}"
        old = nodes.pop(name, None)
        if old is not None:
            tally.remove(old)
        if rng.random() < 0.8:  # else: the node is deleted
            nodes[name] = node_info(KINDS[kind](name), CONFIG)
            tally.add(nodes[name])
        assert facts(tally.facts(nodes)) == facts(FleetFacts.of(nodes))
    empty = FleetTally()
    assert facts(empty.facts({})) == (0, frozenset(), 0, 0, (), frozenset(), ())


def test_a_view_answers_from_its_builders_facts_only_for_their_nodes() -> None:
    nodes = {n: node_info(KINDS[2](n), CONFIG) for n in ("a", "b")}
    tally = FleetTally()
    for info in nodes.values():
        tally.add(info)
    view = ClusterView(nodes=nodes, fleet=tally.facts(nodes))
    assert view.facts is view.fleet and view.largest_card_memory == 81920 and view.max_gpus_per_node == 8
    assert view.any_node_labelled(("cluster-autoscaler.kubernetes.io/scale-down-disabled", "other"))
    smaller = {"c": node_info(KINDS[0]("c"), CONFIG)}
    moved = replace(view, nodes=smaller)  # the facts describe other nodes: not used
    assert moved.facts is not view.fleet and moved.largest_card_memory == 24576
    assert not moved.any_node_labelled(("cluster-autoscaler.kubernetes.io/scale-down-disabled",))
    assert ClusterView(nodes=nodes) == view  # the facts are not part of what a view is


def test_one_nodes_ledger() -> None:
    ledger = {"apiVersion": "vgpu-guard.io/v1alpha1", "kind": "GPULedger", "metadata": {"name": "a"}}
    view = ClusterView(ledgers={"a": ledger})
    assert view.ledger("a") is ledger and view.ledger("b") is None
