"""Volcano's PodGroup spread policy (``volcano.sh/vgpu-podgroup-policy: spread``), as Volcano reads it.

Volcano (pkg/scheduler/api/devices/nvidia/vgpu/utils.go, ``checkNodeGPUSharingPredicateAndScore``
and ``deviceHasPodFromSameGroup``; its tests in spread_integration_test.go): a pod whose annotation
is exactly ``spread`` and that names a PodGroup skips every GPU on which another pod of the same
``namespace/group`` holds memory or cores, whatever that pod's own annotation. Pods of other groups,
pods without the annotation, and the pod's own containers are not affected. Also here: an empty or
separator-only ``vgpu-use-gpuuuid``/``vgpu-nouse-gpuuuid`` list is no restriction in admission too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tests.builders import pod as plain_pod
from tests.engine.allocation_testkit import config, gpu_node, place_all, request, vgpu_pod, view
from vgpu_guard.engine.admission import request_for, review_object
from vgpu_guard.engine.allocator import Allocator, Placement, Unplaceable
from vgpu_guard.engine.ledger import (
    Allocation,
    ContainerGrant,
    DeviceGrant,
    NodeLedger,
    decode_ledger,
    encode_ledger,
)
from vgpu_guard.engine.placement_reason import CardFailure, unavailable_message

POLICY = "volcano.sh/vgpu-podgroup-policy"
GROUP = "scheduling.k8s.io/group-name"
SPREAD = {POLICY: "spread", GROUP: "job"}


def member(name: str, notes: Mapping[str, str] = SPREAD, **kw: Any) -> dict[str, Any]:
    kw.setdefault("memory", 4096)
    return vgpu_pod(name, annotations=dict(notes), **kw)


def cards(results: list[Placement | Unplaceable]) -> list[list[str]]:
    """The GPUs each placed pod got (all containers), in order; an unplaced pod gets []."""
    out = []
    for r in results:
        out.append(
            [d.uuid for c in r.allocation.containers for d in c.devices] if isinstance(r, Placement) else []
        )
    return out


def allocator(*nodes: dict[str, Any], ledgers: Mapping[str, NodeLedger] | None = None) -> Allocator:
    cfg = config()
    return Allocator(view(list(nodes), cfg), dict(ledgers or {}), config=cfg)


# --- pod_request: when the policy applies -----------------------------------------------------------


@pytest.mark.parametrize(
    ("notes", "spread"),
    [
        ({POLICY: "spread", GROUP: "job"}, True),
        ({POLICY: "spread", "scheduling.volcano.sh/group-name": "job"}, True),
        ({POLICY: "spread"}, False),  # no PodGroup: Volcano's group key is empty, nothing to avoid
        ({POLICY: "spread", GROUP: ""}, False),
        ({POLICY: "Spread", GROUP: "job"}, False),  # compared exactly
        ({POLICY: " spread", GROUP: "job"}, False),
        ({POLICY: "binpack", GROUP: "job"}, False),
        ({GROUP: "job"}, False),
    ],
)
def test_the_policy_applies_only_to_an_exact_spread_with_a_group(notes: dict[str, str], spread: bool) -> None:
    assert request(member("p", notes)).podgroup_spread is spread


# --- placement ----------------------------------------------------------------------------------------


def test_two_members_with_spread_take_different_gpus() -> None:
    results = place_all(allocator(gpu_node("a", 2)), [member("w0"), member("w1")])
    assert cards(results) == [["GPU-a-0"], ["GPU-a-1"]]


def test_without_the_annotation_binpack_puts_both_members_on_one_gpu() -> None:
    plain = {GROUP: "job"}
    results = place_all(allocator(gpu_node("a", 2)), [member("w0", plain), member("w1", plain)])
    assert cards(results) == [["GPU-a-0"], ["GPU-a-0"]]


def test_the_spread_policy_also_holds_under_the_spread_gpu_policy() -> None:
    cfg = config(policy="spread")
    alloc = Allocator(view([gpu_node("a", 2)], cfg), {}, config=cfg)
    # Spread (least used first) would put w2 on a-0 again after w0, w1; the PodGroup rule refuses.
    results = place_all(alloc, [member("w0"), member("w1"), member("w2")])
    assert cards(results)[:2] == [["GPU-a-0"], ["GPU-a-1"]]
    assert isinstance(results[2], Unplaceable)


def test_members_of_other_groups_and_namespaces_may_share() -> None:
    results = place_all(
        allocator(gpu_node("a", 1)),
        [
            member("w0"),
            member("x0", {POLICY: "spread", GROUP: "other"}),
            member("w0", namespace="team-b"),  # same group name, another namespace: another group
        ],
    )
    assert cards(results) == [["GPU-a-0"], ["GPU-a-0"], ["GPU-a-0"]]


def test_a_member_without_the_annotation_may_share_but_still_counts_for_the_next_spread_member() -> None:
    results = place_all(
        allocator(gpu_node("a", 3)),
        [member("w0"), member("w1", {GROUP: "job"}), member("w2")],
    )
    # w1 ignores the rule (binpack: a-0 again); w2 avoids a-0, held by w0 and w1.
    assert cards(results) == [["GPU-a-0"], ["GPU-a-0"], ["GPU-a-1"]]


def test_the_pods_own_containers_may_share_a_gpu() -> None:
    results = place_all(allocator(gpu_node("a", 1)), [member("w0", containers=2)])
    assert cards(results) == [["GPU-a-0", "GPU-a-0"]]


def test_no_room_is_unschedulable_with_the_policy_and_the_gpu_named() -> None:
    results = place_all(allocator(gpu_node("a", 1)), [member("w0"), member("w1")])
    assert isinstance(results[1], Unplaceable) and results[1].cause == "capacity"
    assert results[1].message == (
        "0/1 nodes are available: 1 GPU holds another member of PodGroup default/job "
        "(volcano.sh/vgpu-podgroup-policy=spread): GPU-a-0"
    )


def test_the_reason_names_five_gpus_then_counts_the_rest_and_keeps_the_other_reasons() -> None:
    # w0 holds 7 of node a's 8 GPUs; w1 wants 2 GPUs: a-7 fits, but only one.
    results = place_all(allocator(gpu_node("a", 8)), [member("w0", number=7), member("w1", number=2)])
    assert isinstance(results[1], Unplaceable)
    assert results[1].message == (
        "0/1 nodes are available: 1 node has only 1 fitting GPU < 2 requested, "
        "7 GPUs hold other members of PodGroup default/job "
        "(volcano.sh/vgpu-podgroup-policy=spread): GPU-a-0, GPU-a-1, GPU-a-2, GPU-a-3, GPU-a-4 and 2 more"
    )


def test_the_gpu_comes_free_when_the_member_is_released() -> None:
    alloc = allocator(gpu_node("a", 1))
    first = place_all(alloc, [member("w0")])[0]
    assert isinstance(first, Placement)
    assert isinstance(alloc.place(request(member("w1"))), Unplaceable)
    alloc.release(first.pod.uid)
    again = alloc.place(request(member("w1")))
    assert isinstance(again, Placement) and again.node == "a"


def _held(uid: str, name: str, memory: int, cores: int, group: str = "job") -> Allocation:
    grant = DeviceGrant(uuid="GPU-a-0", memory=memory, cores=cores)
    return Allocation(
        pod_uid=uid,
        namespace="default",
        name=name,
        queue="default",
        containers=(ContainerGrant(index=0, name="c0", devices=(grant,)),),
        group=group,
    )


def test_members_read_back_from_a_stored_ledger_count() -> None:
    """The PodGroup travels in the GPULedger (``podGroup``): a later pass still sees the member."""
    ledger = NodeLedger(node="a").with_allocation(_held("u0", "w0", 4096, 0))
    stored = decode_ledger(encode_ledger(ledger))
    assert stored.allocations["u0"].group == "job"
    result = allocator(gpu_node("a", 2), ledgers={"a": stored}).place(request(member("w1")))
    assert isinstance(result, Placement)
    assert result.allocation.containers[0].devices[0].uuid == "GPU-a-1"
    assert result.allocation.group == "job"


@pytest.mark.parametrize(("memory", "cores", "blocked"), [(0, 0, False), (0, 10, True), (1, 0, True)])
def test_a_member_holding_neither_memory_nor_cores_does_not_count(
    memory: int, cores: int, blocked: bool
) -> None:
    ledger = NodeLedger(node="a").with_allocation(_held("u0", "w0", memory, cores))
    result = allocator(gpu_node("a", 1), ledgers={"a": ledger}).place(request(member("w1")))
    assert isinstance(result, Unplaceable) is blocked


def test_a_gang_that_cannot_spread_does_not_start_and_every_member_gets_the_reason() -> None:
    alloc = allocator(gpu_node("a", 1))
    members = [request(member(f"w{i}")) for i in range(2)]
    outcome = alloc.place_gang(members, min_member=2)
    assert not outcome.ok and outcome.placements == ()
    assert alloc.ledger("a").allocations == {}
    assert {f.message for f in outcome.failures} == {
        "gang default/job: only 1 of 2 members can run (minMember 2); w1, judged on what would remain "
        "once w0 is placed: 0/1 nodes are available: "
        "1 GPU holds another member of PodGroup default/job (volcano.sh/vgpu-podgroup-policy=spread): GPU-a-0"
    }


def test_a_gang_spreads_over_gpus_and_nodes() -> None:
    alloc = allocator(gpu_node("a", 2), gpu_node("b", 2))
    outcome = alloc.place_gang([request(member(f"w{i}")) for i in range(4)], min_member=4)
    assert outcome.ok
    held = sorted(d.uuid for p in outcome.placements for c in p.allocation.containers for d in c.devices)
    assert held == ["GPU-a-0", "GPU-a-1", "GPU-b-0", "GPU-b-1"]


def test_indexed_search_agrees_with_the_scan_past_many_refused_nodes() -> None:
    """40 nodes whose tightest GPU holds a member come first in the index; node "a" still wins.

    Each ``m*`` node ranks by its empty GPU; so does "a", first by name. The indexed search must
    look past those 40 refusals (more than its tie budget) to reach it, as the scan does.
    """
    cfg = config()
    nodes = [gpu_node("a", 2)] + [gpu_node(f"m{i:02}", 2) for i in range(40)]
    ledgers = {
        f"m{i:02}": NodeLedger(node=f"m{i:02}").with_allocation(
            Allocation(
                pod_uid=f"u{i}",
                namespace="default",
                name=f"w{i}",
                queue="default",
                containers=(
                    ContainerGrant(0, "c0", (DeviceGrant(uuid=f"GPU-m{i:02}-0", memory=4096, cores=0),)),
                ),
                group="job",
            )
        )
        for i in range(40)
    }
    probe = request(member("w-new"))
    picks = []
    for search in ("indexed", "scan"):
        result = Allocator(view(nodes, cfg), ledgers, config=cfg, search=search).place(probe)
        assert isinstance(result, Placement)
        picks.append((result.node, result.allocation.containers[0].devices[0].uuid))
    assert picks == [("a", "GPU-a-0"), ("a", "GPU-a-0")]


def test_a_message_groups_the_gpus_by_podgroup_in_order() -> None:
    failures = [
        CardFailure("podgroup", detail="ns/job", card="GPU-2"),
        CardFailure("podgroup", detail="ns/job", card="GPU-1"),
        CardFailure("podgroup", detail="ns/job", card="GPU-2"),
        CardFailure("split"),
    ]
    assert unavailable_message(1, [], failures) == (
        "0/1 nodes are available: 1 GPU has no free vGPU slot, 2 GPUs hold other members of PodGroup "
        "ns/job (volcano.sh/vgpu-podgroup-policy=spread): GPU-2, GPU-1"
    )


# --- vgpu-use-gpuuuid / vgpu-nouse-gpuuuid: empty lists ---------------------------------------------


@pytest.mark.parametrize("listed", ["", ",", " , ,"])
@pytest.mark.parametrize("key", ["volcano.sh/vgpu-use-gpuuuid", "volcano.sh/vgpu-nouse-gpuuuid"])
def test_an_empty_uuid_list_restricts_nothing_in_admission_or_placement(key: str, listed: str) -> None:
    parsed = request(vgpu_pod("p", memory=1, annotations={key: listed}))
    assert (parsed.use_uuids, parsed.nouse_uuids) == (None, frozenset())
    obj = plain_pod({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 1024}, annotations={key: listed})
    result = review_object(request_for(obj, username="alice"), view([gpu_node("a", 1)]), config())
    assert result.decision.allowed, result.decision.message
    assert not any("gpuuuid" in w for w in result.warnings)
