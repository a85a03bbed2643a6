"""Allocator: seed 000, placement rules, policies, gangs, priorities, queues, golden messages."""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.allocation_testkit import (
    A10,
    assert_within_capacity,
    config,
    cpu_node,
    gpu_node,
    place_all,
    request,
    vgpu_pod,
    view,
)
from vgpu_guard.engine.allocator import Allocator, Placement, Unplaceable
from vgpu_guard.engine.assignment import allocation_annotations, decode_assignment
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, NodeLedger


def busy_ledger(node: str, gpus: range, *, memory: int = 24576) -> NodeLedger:
    """A ledger where each listed GPU is fully held by one pod."""
    allocations = {
        f"busy-{node}-{i}": Allocation(
            pod_uid=f"busy-{node}-{i}",
            namespace="team",
            name=f"busy-{i}",
            queue="default",
            containers=(ContainerGrant(0, "c", (DeviceGrant(f"GPU-{node}-{i}", memory, 0),)),),
        )
        for i in gpus
    }
    return NodeLedger(node=node, allocations=allocations, resource_version="1")


@pytest.mark.parametrize("search", ["indexed", "scan"])
def test_seed_000_two_of_three_fit_on_the_free_gpu(search: Any) -> None:
    cfg = config()
    allocator = Allocator(
        view([gpu_node("gpu-0", 8)]), {"gpu-0": busy_ledger("gpu-0", range(7))}, config=cfg, search=search
    )
    pods = [vgpu_pod(f"web-{i}", memory=12288) for i in range(3)]
    results = place_all(allocator, pods)
    placed = [r for r in results if isinstance(r, Placement)]
    assert [p.pod.name for p in placed] == ["web-0", "web-1"]
    assert {d.uuid for p in placed for d in p.allocation.grants()} == {"GPU-gpu-0-7"}
    third = results[2]
    assert isinstance(third, Unplaceable)
    assert third.message == ("0/1 nodes are available: 8 GPUs have no free memory (12288 MiB requested)")
    assert_within_capacity(allocator)


def test_seed_000_message_as_the_issue_writes_it_with_eight_single_gpu_nodes() -> None:
    nodes = [gpu_node(f"gpu-{i}", 1) for i in range(8)]
    ledgers = {f"gpu-{i}": busy_ledger(f"gpu-{i}", range(1)) for i in range(7)}
    allocator = Allocator(view(nodes), ledgers, config=config())
    results = place_all(allocator, [vgpu_pod(f"web-{i}", memory=12288) for i in range(3)])
    assert [r.node for r in results if isinstance(r, Placement)] == ["gpu-7", "gpu-7"]
    assert isinstance(results[2], Unplaceable)
    assert results[2].message == ("0/8 nodes are available: 8 GPUs have no free memory (12288 MiB requested)")


def test_a_registration_that_does_not_parse_is_named_as_such_not_as_no_gpus() -> None:
    """It leaves the node no cards, but the operator can fix it: the reason must say so."""
    broken = gpu_node("bad", 1)
    broken["metadata"]["annotations"]["volcano.sh/node-vgpu-register"] = "GPU-bad-0,10,notanumber,A10,true:"
    allocator = Allocator(view([broken, cpu_node("cpu-0")]), {}, config=config())
    (result,) = place_all(allocator, [vgpu_pod("p", memory=1000)])
    assert isinstance(result, Unplaceable)
    assert result.message == (
        "0/2 nodes are available: 1 node has no vGPU devices, 1 node has an unusable vGPU registration"
    )


def test_closest_miss_is_quoted_with_its_numbers() -> None:
    nodes = [gpu_node("a", [24576, 24576]), cpu_node("cpu-0"), gpu_node("b", 1, ready=False)]
    ledger = NodeLedger(
        node="a",
        allocations={
            "x": Allocation(
                "x", "ns", "x", "default", (ContainerGrant(0, "c", (DeviceGrant("GPU-a-0", 20480, 0),)),)
            ),
            "y": Allocation(
                "y", "ns", "y", "default", (ContainerGrant(0, "c", (DeviceGrant("GPU-a-1", 16384, 0),)),)
            ),
        },
    )
    allocator = Allocator(view(nodes), {"a": ledger}, config=config())
    result = allocator.place(request(vgpu_pod("p", memory=12288)))
    assert isinstance(result, Unplaceable)
    assert result.message == (
        "0/3 nodes are available: 1 node is not ready, 1 node has no vGPU devices, "
        "1 GPU has too little free memory, 1 GPU has 8192 MiB free < 12288 MiB requested"
    )


def test_node_level_reasons_are_counted_per_node() -> None:
    taint = {"key": "gpu", "value": "reserved", "effect": "NoSchedule"}
    nodes = [
        gpu_node("t1", 1, taints=[taint]),
        gpu_node("t2", 1, taints=[taint]),
        gpu_node("cordoned", 1, unschedulable=True),
        gpu_node("other", 1, labels={"pool": "b"}),
        gpu_node("mig", 1, card_type="NVIDIA-NVIDIA A30", mode="mig"),
        gpu_node("small", 1),
    ]
    pod = vgpu_pod(
        "p", memory=1024, number=2, mode="hami-core", node_selector={"kubernetes.io/arch": "amd64"}
    )
    nodes_with_arch = []
    for node in nodes:
        node["metadata"]["labels"]["kubernetes.io/arch"] = "amd64"
        nodes_with_arch.append(node)
    nodes_with_arch[3]["metadata"]["labels"]["kubernetes.io/arch"] = "arm64"
    allocator = Allocator(view(nodes_with_arch), {}, config=config())
    result = allocator.place(request(pod))
    assert isinstance(result, Unplaceable)
    assert result.message == (
        "0/6 nodes are available: 1 node is unschedulable, "
        "1 node doesn't match the pod's node selector/affinity, "
        "2 nodes have untolerated taint {gpu: reserved}, "
        "1 node is in mig mode (the pod requires hami-core), 1 node has only 1 GPUs < 2 requested"
    )


def test_tolerations_and_affinity_admit_the_node() -> None:
    taint = {"key": "gpu", "value": "reserved", "effect": "NoSchedule"}
    nodes = [gpu_node("t1", 1, taints=[taint], labels={"zone": "a"}), gpu_node("t2", 1, labels={"zone": "b"})]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    pod = vgpu_pod("p", memory=1024, tolerations=[{"key": "gpu", "operator": "Exists"}], affinity=affinity)
    result = Allocator(view(nodes), {}, config=config()).place(request(pod))
    assert isinstance(result, Placement)
    assert result.node == "t1"


def test_one_allocator_judges_each_pods_own_node_terms() -> None:
    # Pods without facts share the node checks' PreFilter by equal terms: a pod's tolerations,
    # selector or affinity must never be judged with another pod's.
    taint = {"key": "gpu", "value": "reserved", "effect": "NoSchedule"}
    allocator = Allocator(
        view([gpu_node("t1", 1, taints=[taint], labels={"zone": "a"})]), {}, config=config()
    )
    tolerant = [{"key": "gpu", "operator": "Exists"}]
    assert isinstance(allocator.place(request(vgpu_pod("plain", memory=1024))), Unplaceable)
    assert isinstance(
        allocator.place(request(vgpu_pod("tolerant", memory=1024, tolerations=tolerant))), Placement
    )
    assert isinstance(allocator.place(request(vgpu_pod("plain-again", memory=1024))), Unplaceable)
    elsewhere = vgpu_pod("elsewhere", memory=1024, node_selector={"zone": "b"}, tolerations=tolerant)
    assert isinstance(allocator.place(request(elsewhere)), Unplaceable)
    assert isinstance(
        allocator.place(request(vgpu_pod("again", memory=1024, tolerations=tolerant))), Placement
    )


@pytest.mark.parametrize("search", ["indexed", "scan"])
def test_binpack_fills_the_tightest_card_and_spread_the_emptiest(search: Any) -> None:
    nodes = [gpu_node("a", [24576, 24576]), gpu_node("b", [24576])]
    ledger = NodeLedger(
        node="a",
        allocations={
            "x": Allocation(
                "x", "ns", "x", "default", (ContainerGrant(0, "c", (DeviceGrant("GPU-a-1", 16384, 0),)),)
            )
        },
    )
    pod = request(vgpu_pod("p", memory=4096))
    binpack = Allocator(view(nodes), {"a": ledger}, config=config(), search=search).place(pod)
    assert isinstance(binpack, Placement)
    assert (binpack.node, binpack.allocation.containers[0].devices[0].uuid) == ("a", "GPU-a-1")
    spread = Allocator(view(nodes), {"a": ledger}, config=config(policy="spread"), search=search).place(pod)
    assert isinstance(spread, Placement)
    assert (spread.node, spread.allocation.containers[0].devices[0].uuid) == ("a", "GPU-a-0")


def test_multi_card_request_takes_distinct_gpus_on_one_node() -> None:
    nodes = [gpu_node("a", 2), gpu_node("b", 4)]
    result = Allocator(view(nodes), {}, config=config()).place(request(vgpu_pod("p", memory=1000, number=3)))
    assert isinstance(result, Placement)
    assert result.node == "b"
    uuids = [d.uuid for d in result.allocation.containers[0].devices]
    assert len(set(uuids)) == 3


def test_cores_exclusive_and_split_count() -> None:
    nodes = [gpu_node("a", 1, split=2)]
    allocator = Allocator(view(nodes), {}, config=config())
    results = place_all(
        allocator,
        [
            vgpu_pod("half", memory=1000, cores=60),
            vgpu_pod("too-many-cores", memory=1000, cores=50),
            vgpu_pod("exclusive", memory=1000, cores=100),
            vgpu_pod("fits", memory=1000, cores=40),
            vgpu_pod("no-slot", memory=1000),
        ],
    )
    outcome = {r.pod.name: r.message if isinstance(r, Unplaceable) else r.node for r in results}
    assert outcome == {
        "half": "a",
        "too-many-cores": "0/1 nodes are available: 1 GPU has less than 50% cores free",
        "exclusive": "0/1 nodes are available: 1 GPU is shared (100% cores needs an empty GPU): GPU-a-0",
        "fits": "a",
        "no-slot": "0/1 nodes are available: 1 GPU has no free vGPU slot",
    }


def test_gputype_and_uuid_annotations() -> None:
    nodes = [gpu_node("a", 1, card_type=A10), gpu_node("b", 1, card_type="NVIDIA-NVIDIA L40S")]
    cfg = config()
    use = request(vgpu_pod("p", memory=1, annotations={"nvidia.com/use-gputype": "l40s"}))
    result = Allocator(view(nodes), {}, config=cfg).place(use)
    assert isinstance(result, Placement) and result.node == "b"
    nouse = request(vgpu_pod("p", memory=1, annotations={"nvidia.com/nouse-gputype": "L40S,a100"}))
    result = Allocator(view(nodes), {}, config=cfg).place(nouse)
    assert isinstance(result, Placement) and result.node == "a"
    both = {"volcano.sh/vgpu-use-gpuuuid": "GPU-a-0,GPU-b-0", "volcano.sh/vgpu-nouse-gpuuuid": "GPU-a-0"}
    result = Allocator(view(nodes), {}, config=cfg).place(request(vgpu_pod("p", memory=1, annotations=both)))
    assert isinstance(result, Placement) and result.node == "b"
    none = {"volcano.sh/vgpu-use-gpuuuid": "GPU-zzz"}
    result = Allocator(view(nodes), {}, config=cfg).place(request(vgpu_pod("p", memory=1, annotations=none)))
    assert isinstance(result, Unplaceable)
    assert result.message == "0/2 nodes are available: 2 GPUs aren't listed in volcano.sh/vgpu-use-gpuuuid"


@pytest.mark.parametrize("listed", ["", ",", " , ,"])
def test_an_empty_gpu_uuid_list_restricts_nothing(listed: str) -> None:
    """Volcano reads an empty or separator-only vgpu-use-gpuuuid (or -nouse-) as no restriction."""
    nodes = [gpu_node("a", 1)]
    for key in ("volcano.sh/vgpu-use-gpuuuid", "volcano.sh/vgpu-nouse-gpuuuid"):
        pod = request(vgpu_pod("p", memory=1, annotations={key: listed}))
        result = Allocator(view(nodes), {}, config=config()).place(pod)
        assert isinstance(result, Placement) and result.node == "a", (key, listed)


def test_whole_card_pods_keep_cards_empty() -> None:
    nodes = [gpu_node("a", 2)]
    allocator = Allocator(view(nodes), {}, config=config(), whole_card={"a": 1})
    results = place_all(allocator, [vgpu_pod("p1", memory=20000), vgpu_pod("p2", memory=20000)])
    assert isinstance(results[0], Placement)
    assert isinstance(results[1], Unplaceable)
    assert results[1].message == (
        "0/1 nodes are available: 1 GPU has 4576 MiB free < 20000 MiB requested, "
        "1 GPU is kept free for nvidia.com/gpu pods"
    )


def test_percentage_and_whole_card_requests() -> None:
    nodes = [gpu_node("a", [16384, 40960])]
    allocator = Allocator(view(nodes), {}, config=config())
    half = allocator.place(request(vgpu_pod("half", percentage=50, number=1)))
    assert isinstance(half, Placement)
    assert half.allocation.containers[0].devices[0].memory in (8192, 20480)
    allocator.commit(half)
    whole = allocator.place(request(vgpu_pod("whole", number=1)))
    assert isinstance(whole, Placement)
    assert whole.allocation.containers[0].devices[0].memory in (16384, 40960)
    assert_within_capacity(allocator)


def test_priority_then_creation_order() -> None:
    low = request(vgpu_pod("low", memory=20000, priority=1, created="2025-01-01T00:00:00Z"))
    high = request(vgpu_pod("high", memory=20000, priority=100, created="2025-01-03T00:00:00Z"))
    med_old = request(vgpu_pod("med-old", memory=20000, priority=10, created="2025-01-01T00:00:00Z"))
    med_new = request(vgpu_pod("med-new", memory=20000, priority=10, created="2025-01-02T00:00:00Z"))
    allocator = Allocator(view([gpu_node("a", 2)]), {}, config=config())
    placed = []
    for pod in sorted([low, med_new, high, med_old], key=lambda p: p.order):
        result = allocator.place(pod)
        if isinstance(result, Placement):
            allocator.commit(result)
            placed.append(pod.name)
    assert placed == ["high", "med-old"]


def test_gang_of_four_with_room_for_three_binds_none() -> None:
    cfg = config()
    allocator = Allocator(
        view([gpu_node("a", 3), gpu_node("b", 1)]), {"b": busy_ledger("b", range(1))}, config=cfg
    )
    members = [
        request(vgpu_pod(f"w-{i}", memory=24576, annotations={"scheduling.k8s.io/group-name": "job"}), cfg)
        for i in range(4)
    ]
    outcome = allocator.place_gang(members, min_member=4)
    assert not outcome.ok
    assert outcome.placements == ()
    assert all(allocator.allocation_of(m.uid) is None for m in members)
    assert allocator.ledger("a").allocations == {}
    assert {f.message for f in outcome.failures} == {
        "gang default/job: only 3 of 4 members can run (minMember 4); "
        "w-3, judged on what would remain once w-0, w-1, w-2 are placed: "
        "0/2 nodes are available: 4 GPUs have no free memory (24576 MiB requested)"
    }
    fits = allocator.place_gang(members[:3], min_member=3)
    assert fits.ok and len(fits.placements) == 3


def test_queue_state_and_capability() -> None:
    queue_closed = {
        "kind": "Queue",
        "metadata": {"name": "closed"},
        "spec": {},
        "status": {"state": "Closed"},
    }
    queue_small = {
        "kind": "Queue",
        "metadata": {"name": "small"},
        "spec": {"capability": {"volcano.sh/vgpu-memory": "16384"}},
        "status": {"state": "Open"},
    }
    cfg = config()
    allocator = Allocator(view([gpu_node("a", 2), queue_closed, queue_small]), {}, config=cfg)
    closed = allocator.place(
        request(vgpu_pod("c", memory=1, annotations={"scheduling.volcano.sh/queue-name": "closed"}))
    )
    assert isinstance(closed, Unplaceable)
    assert closed.message == "queue closed is Closed; only Open queues admit new pods"
    small = [
        vgpu_pod(f"s{i}", memory=8192, annotations={"scheduling.volcano.sh/queue-name": "small"})
        for i in range(3)
    ]
    results = place_all(allocator, small)
    assert [isinstance(r, Placement) for r in results] == [True, True, False]
    assert results[2].message == (  # type: ignore[union-attr]
        "queue small capability volcano.sh/vgpu-memory=16384 would be exceeded: 16384 in use + 8192 "
        "requested; wait for the queue's pods to finish or raise its capability"
    )
    missing = allocator.place(
        request(vgpu_pod("m", memory=1, annotations={"scheduling.volcano.sh/queue-name": "nope"}))
    )
    assert isinstance(missing, Unplaceable)
    assert missing.message == "queue nope does not exist; create it or name an existing queue"


def test_existing_reservation_is_returned_not_redecided() -> None:
    cfg = config()
    allocator = Allocator(view([gpu_node("a", 2)]), {}, config=cfg)
    pod = request(vgpu_pod("p", memory=1000))
    first = allocator.place(pod, now=5)
    assert isinstance(first, Placement)
    allocator.commit(first)
    again = Allocator(view([gpu_node("a", 2)]), {"a": allocator.ledger("a")}, config=cfg).place(pod, now=9)
    assert isinstance(again, Placement)
    assert again.allocation == first.allocation


def test_binding_annotations_are_in_the_plugin_format() -> None:
    result = Allocator(view([gpu_node("a", 2)]), {}, config=config()).place(
        request(vgpu_pod("p", memory=3000, number=2, cores=30))
    )
    assert isinstance(result, Placement)
    notes = allocation_annotations(result.allocation, node="a", now=1700000000)
    assert notes["volcano.sh/vgpu-ids-new"] == "GPU-a-0,NVIDIA,3000,30:GPU-a-1,NVIDIA,3000,30:"
    assert notes["volcano.sh/devices-to-allocate"] == notes["volcano.sh/vgpu-ids-new"]
    assert notes["volcano.sh/bind-phase"] == "allocating"
    assert notes["volcano.sh/vgpu-time"] == notes["volcano.sh/bind-time"] == "1700000000"
    assert notes["volcano.sh/vgpu-node"] == "a"
    decoded = decode_assignment(notes["volcano.sh/vgpu-ids-new"])
    assert [(d.uuid, d.memory, d.cores) for d in decoded[0]] == [("GPU-a-0", 3000, 30), ("GPU-a-1", 3000, 30)]


def test_unhealthy_gpus_are_skipped() -> None:
    allocator = Allocator(view([gpu_node("a", 2, unhealthy=[0, 1])]), {}, config=config())
    result = allocator.place(request(vgpu_pod("p", memory=1)))
    assert isinstance(result, Unplaceable)
    assert result.message == "0/1 nodes are available: 2 GPUs are unhealthy"


def test_card_type_without_nvidia_is_refused() -> None:
    allocator = Allocator(view([gpu_node("a", 1, card_type="Ascend-910")]), {}, config=config())
    result = allocator.place(request(vgpu_pod("p", memory=1)))
    assert isinstance(result, Unplaceable)
    assert result.message == "0/1 nodes are available: 1 GPU is not an NVIDIA GPU"


def test_a10_constant_is_the_default_type() -> None:
    assert gpu_node("a", 1)["metadata"]["annotations"]["volcano.sh/node-vgpu-register"].count(A10) == 1


def test_a_pod_listed_in_two_ledgers_stays_held_when_one_lets_it_go() -> None:
    """An edited or moved entry: the pod is in the ledgers of a and b; dropping a's ledger must not
    make the allocator forget b's hold (it would decide the pod again)."""
    cfg = config()
    v = view([gpu_node("a", 1), gpu_node("b", 1)], cfg)
    entry = Allocation(
        "u", "default", "p", "default", (ContainerGrant(0, "c", (DeviceGrant("GPU-a-0", 1024, 0),)),)
    )
    moved = Allocation(
        "u", "default", "p", "default", (ContainerGrant(0, "c", (DeviceGrant("GPU-b-0", 1024, 0),)),)
    )
    allocator = Allocator(
        v,
        {
            "a": NodeLedger(node="a", allocations={"u": entry}),
            "b": NodeLedger(node="b", allocations={"u": moved}),
        },
        config=cfg,
    )
    assert allocator.allocation_of("u") == ("b", moved)
    allocator.replace_ledger("a", None)
    assert allocator.allocation_of("u") == ("b", moved)


def test_nodes_outside_the_selector_keep_the_reasons_that_come_before_it() -> None:
    """``diagnose`` judges only the nodes a nodeSelector picks; of every other node it says what
    judging it would: no GPUs, not ready, cordoned, and only then the selector."""
    nodes = [
        cpu_node("cpu"),
        gpu_node("down", 1, ready=False),
        gpu_node("cordoned", 1, unschedulable=True),
        gpu_node("elsewhere", 1),
        gpu_node(
            "pool", 1, labels={"pool": "a"}, taints=[{"key": "gpu", "value": "x", "effect": "NoSchedule"}]
        ),
    ]
    pod = vgpu_pod("p", memory=1024, node_selector={"pool": "a"})
    messages = {}
    for search in ("indexed", "scan"):
        result = Allocator(view(nodes), {}, config=config(), search=search).place(request(pod))
        assert isinstance(result, Unplaceable)
        messages[search] = result.message
    assert (
        messages["indexed"]
        == messages["scan"]
        == (
            "0/5 nodes are available: 1 node is not ready, 1 node is unschedulable, "
            "1 node doesn't match the pod's node selector/affinity, 1 node has untolerated taint {gpu: x}, "
            "1 node has no vGPU devices"
        )
    )
