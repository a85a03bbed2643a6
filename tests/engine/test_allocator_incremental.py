"""A long-lived allocator kept in step (replace_node, replace_ledger, set_whole_card) decides exactly
as a fresh one built over the same view and ledgers: what the controller's incremental passes rely on.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engine.allocation_testkit import A30, config, gpu_node, request, vgpu_pod, view
from vgpu_guard.engine.allocator import Allocator, Placement
from vgpu_guard.engine.ledger import NodeLedger

# Each node has a few registrations it may switch between (re-registered, resized, MIG, gone).
SHAPES: dict[str, list[Any]] = {
    "a": [gpu_node("a", [24576, 24576, 16384], split=4), gpu_node("a", 2, memory=16384), None],
    "b": [gpu_node("b", 4, memory=24576), gpu_node("b", 4, memory=24576, unschedulable=True)],
    "c": [gpu_node("c", 2, memory=24576, card_type=A30, mode="mig", split=4), None],
    "d": [None, gpu_node("d", 3, memory=40960)],
}

pods = st.fixed_dictionaries(
    {
        "memory": st.sampled_from([1024, 4096, 10240, 12288, 20480]),
        "number": st.sampled_from([1, 1, 2]),
        "mode": st.sampled_from([None, "hami-core", "mig"]),
    }
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("place"), pods),
        st.tuples(st.just("reshape"), st.sampled_from(sorted(SHAPES)), st.integers(0, 2)),
        st.tuples(st.just("drop"), st.integers(0, 30)),
        st.tuples(st.just("whole"), st.sampled_from(sorted(SHAPES)), st.integers(0, 2)),
    ),
    max_size=30,
)


def _view(shape: dict[str, int], cfg: Any) -> Any:
    objects = [SHAPES[n][i % len(SHAPES[n])] for n, i in shape.items()]
    return view([o for o in objects if o is not None], cfg)


@settings(max_examples=150, deadline=None)
@given(steps, st.sampled_from(["binpack", "spread"]))
def test_kept_in_step_equals_built_fresh(operations: list[tuple[Any, ...]], policy: Any) -> None:
    cfg = config(policy=policy)
    shape = dict.fromkeys(SHAPES, 0)
    v = _view(shape, cfg)
    ledgers: dict[str, NodeLedger] = {}
    whole: dict[str, int] = {}
    live = Allocator(v, ledgers, config=cfg, whole_card=whole)
    for i, op in enumerate(operations):
        if op[0] == "place":
            spec = op[1]
            placed = live.place(request(vgpu_pod(f"p{i}", memory=spec["memory"], number=spec["number"],
                                                 mode=spec["mode"]), cfg))  # fmt: skip
            if isinstance(placed, Placement):
                live.commit(placed)
                ledgers[placed.node] = live.ledger(placed.node)
        elif op[0] == "reshape":
            shape[op[1]] = op[2]
            v = _view(shape, cfg)
            live.set_view(v)
            live.replace_node(op[1], v.nodes.get(op[1]))
        elif op[0] == "drop":
            held = sorted(u for ledger in ledgers.values() for u in ledger.allocations)
            if held:
                uid = held[op[1] % len(held)]
                node = next(n for n, ledger in ledgers.items() if uid in ledger.allocations)
                ledgers[node] = ledgers[node].without(uid)  # released elsewhere: a new ledger version
                live.replace_ledger(node, ledgers[node])
        else:
            whole[op[1]] = op[2]
            live.set_whole_card(op[1], op[2])
    fresh = Allocator(v, ledgers, config=cfg, whole_card=whole)
    for name in set(v.nodes) | set(ledgers):
        assert live.ledger(name).allocations == fresh.ledger(name).allocations
    for queue in ("default",):
        assert live.queue_used(queue) == fresh.queue_used(queue)
    for memory in (1024, 10240, 24576):
        for number in (1, 2):
            probe = request(vgpu_pod(f"probe-{memory}-{number}", memory=memory, number=number), cfg)
            assert live.place(probe) == fresh.place(probe)
