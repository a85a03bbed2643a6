"""Golden ``0/N nodes are available: ...`` messages through the Allocator, with kube-scheduler's reasons.

kube-scheduler's FitError counts every reason of every node and lists ``"<count> <reason>"``
sorted as strings (so "10 ..." sorts before "2 ..."). vgpu-guard's node-level reasons (Ready,
cordon, selector, taints: node_filter's older wording) come first, then kube-scheduler's, then the
GPU ones. The vGPU resources are judged per GPU first; the node's allocatable sum only when every
card fit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from tests.builders import default_config, gpu_node, view_of
from tests.engine.scheduling.kit import term
from vgpu_guard.engine.allocator import Allocator, Placement, Unplaceable
from vgpu_guard.engine.pod_request import PodRequest, pod_request
from vgpu_guard.engine.scheduling import Workloads, pod_facts

Obj = dict[str, Any]


def vgpu(
    name: str,
    *,
    memory: int = 1024,
    cpu: str | None = None,
    ports: Sequence[int] = (),
    node: str | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> Obj:
    """A vGPU pod as the API server stores it (requests defaulted from limits)."""
    limits = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": str(memory)}
    requests = {**limits, **({"cpu": cpu} if cpu else {})}
    body: Obj = {
        "schedulerName": "vgpu-guard",
        "containers": [
            {
                "name": "cuda",
                "image": "cuda",
                "resources": {"limits": limits, "requests": requests},
                "ports": [{"containerPort": p, "hostPort": p} for p in ports],
            }
        ],
        **spec,
    }
    if node is not None:
        body["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "labels": dict(labels or {}),
        },
        "spec": body,
    }


def request_of(obj: Obj) -> PodRequest:
    parsed = pod_request(obj, default_config().nvidia)
    assert parsed is not None
    return replace(parsed, facts=pod_facts(obj))


def allocator(nodes: Iterable[Obj], existing: Iterable[Obj] = (), **kw: Any) -> Allocator:
    workloads = Workloads([(pod_facts(p), p["spec"]["nodeName"]) for p in existing], **kw)
    return Allocator(view_of(nodes), {}, config=default_config(), workloads=workloads)


def message(nodes: Iterable[Obj], incoming: Obj, existing: Iterable[Obj] = (), **kw: Any) -> str:
    result = allocator(nodes, existing, **kw).place(request_of(incoming))
    assert isinstance(result, Unplaceable), result
    assert result.cause == "capacity"
    return result.message


def hosts(n: int, **kw: Any) -> list[Obj]:
    return [gpu_node(f"n{i}", labels={"kubernetes.io/hostname": f"n{i}"}, **kw) for i in range(n)]


# --- kube-scheduler's reasons ----------------------------------------------------------------------


def test_insufficient_cpu_and_ports() -> None:
    nodes = [gpu_node("n0", cpu="4"), gpu_node("n1"), gpu_node("n2")]
    existing = [
        vgpu("cpu-hog", cpu="4", node="n0"),
        vgpu("web-1", ports=[80], node="n1"),
        vgpu("web-2", ports=[80], node="n2"),
    ]
    incoming = vgpu("web", cpu="1", ports=[80])
    assert message(nodes, incoming, existing) == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't have free ports for the requested pod ports"
    )


def test_inter_pod_anti_affinity_gives_both_reasons() -> None:
    nodes = hosts(3, cpu="2")
    existing = [
        vgpu("web-0", node="n0", labels={"app": "web"}),
        vgpu("web-1", node="n1", labels={"app": "web"}),
        vgpu("batch", node="n2", cpu="2"),
    ]
    incoming = vgpu(
        "web-2",
        cpu="1",
        labels={"app": "web"},
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    term({"matchLabels": {"app": "web"}}, "kubernetes.io/hostname")
                ]
            }
        },
    )
    assert message(nodes, incoming, existing) == (
        "0/3 nodes are available: 1 Insufficient cpu, "
        "2 node(s) didn't match pod affinity/anti-affinity, 2 node(s) didn't match pod anti-affinity rules"
    )


def test_existing_pods_anti_affinity_and_pod_affinity() -> None:
    nodes = [gpu_node(f"n{i}", labels={"zone": z}) for i, z in enumerate("aab")]
    guard = vgpu(
        "guard",
        node="n2",
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    term({"matchLabels": {"app": "cache"}}, "zone")
                ]
            }
        },
    )
    incoming = vgpu(
        "cache",
        labels={"app": "cache"},
        affinity={
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    term({"matchLabels": {"app": "db"}}, "zone")
                ]
            }
        },
    )
    assert message(nodes, incoming, [guard, vgpu("db", node="n2", labels={"app": "db"})]) == (
        "0/3 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules, "
        "2 node(s) didn't match pod affinity rules, 3 node(s) didn't match pod affinity/anti-affinity"
    )


def test_several_resource_reasons_per_node_are_each_counted() -> None:
    nodes = [gpu_node("n0", cpu="1"), gpu_node("n1", cpu="1")]
    for n in nodes:
        n["status"]["allocatable"]["pods"] = "1"
    existing = [vgpu("a", node="n0"), vgpu("b", node="n1")]
    assert message(nodes, vgpu("big", cpu="2"), existing) == (
        "0/2 nodes are available: 2 Insufficient cpu, 2 Too many pods"
    )


def test_counts_sort_as_strings_as_kube_scheduler_sorts_them() -> None:
    nodes = hosts(12)
    for n in nodes[10:]:
        n["status"]["allocatable"]["cpu"] = "1"
    existing = [vgpu(f"web-{i}", ports=[80], node=f"n{i}") for i in range(10)]
    assert message(nodes, vgpu("web", ports=[80], cpu="2"), existing) == (
        "0/12 nodes are available: 10 node(s) didn't have free ports for the requested pod ports, 2 Insufficient cpu"
    )


def test_topology_spread_beside_node_filter_reasons_in_their_older_wording() -> None:
    nodes = [
        gpu_node("n0", labels={"zone": "a"}),
        gpu_node("n1", labels={"zone": "b"}),
        gpu_node("n2", labels={"zone": "c"}, unschedulable=True),
        gpu_node("n3", labels={}),
        gpu_node("n4", labels={"zone": "d"}, ready=False),
    ]
    existing = [
        vgpu("web-0", node="n0", labels={"app": "web"}),
        vgpu("web-1", node="n0", labels={"app": "web"}),
    ]
    incoming = vgpu(
        "web-2",
        labels={"app": "web"},
        topologySpreadConstraints=[
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}},
            }
        ],
    )
    # Zone b is empty: n1 passes, so the pod is placed there.
    result = allocator(nodes, existing).place(request_of(incoming))
    assert isinstance(result, Placement) and result.node == "n1"
    crowded = [
        *existing,
        vgpu("x", node="n1", labels={"app": "web"}),
        vgpu("y", node="n1", labels={"app": "web"}),
    ]
    crowded.append(vgpu("z", node="n2", labels={"app": "web"}))
    crowded.append(vgpu("w", node="n2", labels={"app": "web"}))
    crowded.append(vgpu("v", node="n4", labels={"app": "web"}))
    # Domains: a=2, b=2, c=2 (cordoned n2 still is one), d=1 (n4 is not ready but matches): min 1.
    assert message(nodes, incoming, crowded) == (
        "0/5 nodes are available: 1 node is not ready, 1 node is unschedulable, "
        "1 node(s) didn't match pod topology spread constraints (missing required label), "
        "2 node(s) didn't match pod topology spread constraints"
    )


def test_a_claim_refusal_counts_on_every_node_that_passes_the_node_filter() -> None:
    nodes = [gpu_node("n0"), gpu_node("n1"), gpu_node("n2", unschedulable=True)]
    incoming = vgpu("train", volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])
    assert message(nodes, incoming) == (
        '0/3 nodes are available: 1 node is unschedulable, 2 persistentvolumeclaim "data" not found'
    )


def test_node_name_reason() -> None:
    assert message(hosts(2), vgpu("pinned", node="elsewhere")) == (
        "0/2 nodes are available: 2 node(s) didn't match the requested hostname"
    )


# --- vGPU resources: per GPU first, allocatable sum after ----------------------------------------


def test_the_gpu_message_wins_when_a_card_is_short() -> None:
    # The node's vgpu-memory sum is short as well (24576 < 30000 + 20000), but the card says more.
    node = gpu_node("n0", count=1)
    outsider = vgpu("outsider", memory=20000, node="n0")  # bound by another scheduler, not in our ledger
    assert message([node], vgpu("big", memory=30000), [outsider]) == (
        "0/1 nodes are available: 1 GPU has 24576 MiB free < 30000 MiB requested"
    )


def test_insufficient_vgpu_memory_only_when_the_cards_fit_but_the_allocatable_sum_does_not() -> None:
    node = gpu_node("n0", count=1)
    outsider = vgpu("outsider", memory=20000, node="n0")
    assert message([node], vgpu("small", memory=8192), [outsider]) == (
        "0/1 nodes are available: 1 Insufficient volcano.sh/vgpu-memory"
    )
    result = allocator([node], [outsider]).place(request_of(vgpu("fits", memory=4576)))
    assert isinstance(result, Placement)


def test_vgpu_number_against_allocatable() -> None:
    node = gpu_node("n0", count=1, split=2)  # allocatable volcano.sh/vgpu-number 2
    outsiders = [vgpu("o1", node="n0"), vgpu("o2", node="n0")]
    assert message([node], vgpu("third"), outsiders) == (
        "0/1 nodes are available: 1 Insufficient volcano.sh/vgpu-number"
    )


# --- placements are counted as they are made -------------------------------------------------------


def test_each_placement_counts_for_the_next_pod_and_a_release_gives_it_back() -> None:
    alloc = allocator([gpu_node("n0")])
    first = alloc.place(request_of(vgpu("web-0", ports=[80])))
    assert isinstance(first, Placement)
    alloc.commit(first)
    second = alloc.place(request_of(vgpu("web-1", ports=[80])))
    assert isinstance(second, Unplaceable)
    assert second.message == (
        "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports"
    )
    alloc.release(first.pod.uid)
    assert isinstance(alloc.place(request_of(vgpu("web-1", ports=[80]))), Placement)


def test_the_pod_count_includes_reservations() -> None:
    node = gpu_node("n0")
    node["status"]["allocatable"]["pods"] = "2"
    alloc = allocator([node], [vgpu("running", node="n0")])
    placed = alloc.place(request_of(vgpu("a")))
    assert isinstance(placed, Placement)
    alloc.commit(placed)
    refused = alloc.place(request_of(vgpu("b")))
    assert isinstance(refused, Unplaceable)
    assert refused.message == "0/1 nodes are available: 1 Too many pods"


def test_without_workloads_only_gpus_and_node_labels_are_checked() -> None:
    alloc = Allocator(view_of([gpu_node("n0", cpu="1")]), {}, config=default_config())
    assert isinstance(alloc.place(request_of(vgpu("big", cpu="8"))), Placement)


# --- refused pods ----------------------------------------------------------------------------------


def test_a_pod_with_unsupported_features_is_refused_with_words_that_say_so() -> None:
    incoming = vgpu("dra", resourceClaims=[{"name": "gpu", "resourceClaimName": "shared"}])
    result = allocator(hosts(2)).place(request_of(incoming))
    assert isinstance(result, Unplaceable)
    assert result.cause == "unsupported"
    assert result.message == (
        "vgpu-guard does not place pods that use dynamic resource allocation (spec.resourceClaims): it "
        "cannot check them the way kube-scheduler does, and it never binds blindly; schedule this pod "
        "with a scheduler that supports them"
    )
