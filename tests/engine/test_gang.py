"""One IB cluster per gang: deterministic best fit, reservations, pins, and the admission patch.

Two clusters: ib-a with 4 nodes, ib-b with 2; every node has one 24 GiB card, and a member asks for
a whole card, so a cluster holds as many members as it has nodes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tests.builders import config_with, gpu_node, pod, view_of
from vgpu_guard.cli.documents import Document
from vgpu_guard.cli.review import review_documents
from vgpu_guard.engine.admission import request_for, review_object
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig

LABEL = "example.com/ib-cluster"
CONFIG = config_with(topology={"ibClusterLabel": LABEL})
WHOLE_CARD = {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 24576, "volcano.sh/vgpu-cores": 100}
AFFINITY = (
    "spec",
    "affinity",
    "nodeAffinity",
    "requiredDuringSchedulingIgnoredDuringExecution",
    "nodeSelectorTerms",
)


def podgroup(name: str, min_member: int, namespace: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"minMember": min_member, "queue": "default"},
    }


def cluster(*extra: dict[str, Any], config: GuardConfig = CONFIG) -> ClusterView:
    nodes = [gpu_node(f"a{i}", count=1, labels={LABEL: "ib-a"}) for i in range(4)]
    nodes += [gpu_node(f"b{i}", count=1, labels={LABEL: "ib-b"}) for i in range(2)]
    return view_of([*nodes, *extra], config)


def member(group: str, index: int = 0, limits: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    obj = pod(
        limits if limits is not None else WHOLE_CARD,
        name=f"{group}-{index}",
        annotations={"scheduling.k8s.io/group-name": group},
        **spec,
    )
    obj["metadata"]["namespace"] = "ml"
    return obj


def terms(obj: Mapping[str, Any]) -> Any:
    for key in AFFINITY:
        obj = obj[key]
    return obj


def review(obj: dict[str, Any], view: ClusterView, config: GuardConfig = CONFIG) -> Any:
    return review_object(request_for(obj, username="alice"), view, config)


@pytest.mark.parametrize(("size", "expected"), [(4, "ib-a"), (2, "ib-b")])
def test_best_fit_is_the_cluster_left_least_free(size: int, expected: str) -> None:
    result = review(member("train"), cluster(podgroup("train", size)))
    assert result.decision.allowed
    assert terms(result.object) == [
        {"matchExpressions": [{"key": LABEL, "operator": "In", "values": [expected]}]}
    ]
    (placement,) = result.persist
    assert placement["metadata"] == {
        "name": "train",
        "namespace": "ml",
        "labels": {"app.kubernetes.io/managed-by": "vgpu-guard"},
        "ownerReferences": [
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "name": "train",
                "uid": "uid-train",
            }
        ],
    }
    assert placement["spec"] == {
        "group": "train",
        "cluster": expected,
        "minMember": size,
        "mode": "hami-core",
        "perPod": {"gpus": [{"count": 1, "cores": 100, "memoryMiB": 24576}]},
    }
    why = "the only one that fits" if size == 4 else "best fit of 2"
    assert (
        f"vgpu-guard: chose IB cluster {expected} for gang ml/train ({why}); required node affinity added"
        in result.warnings
    )


def test_a_gang_no_cluster_can_hold_is_denied_with_each_clusters_room() -> None:
    result = review(member("big"), cluster(podgroup("big", 8)))
    assert not result.decision.allowed
    assert result.decision.message == (
        "[ib-cluster] metadata.annotations[scheduling.k8s.io/group-name]: gang ml/big needs 8 members in one IB "
        "cluster but none can hold them (ib-a has room for 4 (4 eligible nodes, 98304 MiB GPU memory free); ib-b "
        "has room for 2 (2 eligible nodes, 49152 MiB GPU memory free)); lower minMember, free capacity in one "
        "cluster, or add nodes"
    )


def test_no_fit_can_be_admitted_unpinned_by_config() -> None:
    config = config_with(topology={"ibClusterLabel": LABEL, "onNoFit": "unpinned"})
    result = review(member("big"), cluster(podgroup("big", 8), config=config), config)
    assert result.decision.allowed and result.persist == ()
    assert "affinity" not in result.object["spec"]
    assert "vgpu-guard: no IB cluster holds gang ml/big (8 members); unpinned" in result.warnings


def test_other_gangs_reservations_count() -> None:
    # ib-b is recorded for gang "first" (2 members, none placed yet): "second" must go to ib-a.
    first = review(member("first"), cluster(podgroup("first", 2)))
    view = cluster(podgroup("first", 2), podgroup("second", 2), *first.persist)
    second = review(member("second"), view)
    assert first.persist[0]["spec"]["cluster"] == "ib-b"
    assert terms(second.object)[0]["matchExpressions"][0]["values"] == ["ib-a"]


def test_later_members_follow_the_recorded_cluster() -> None:
    first = review(member("train", 0), cluster(podgroup("train", 2)))
    view = cluster(podgroup("train", 2), *first.persist)
    later = review(member("train", 1), view)
    assert later.persist == ()
    assert terms(later.object)[0]["matchExpressions"][0]["values"] == ["ib-b"]
    assert "vgpu-guard: gang ml/train runs in IB cluster ib-b; node affinity added" in later.warnings


def test_existing_terms_are_kept_and_the_cluster_anded_into_each() -> None:
    obj = member("train", 1)
    obj["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]},
                ]
            }
        }
    }
    first = review(member("train", 0), cluster(podgroup("train", 2)))
    result = review(obj, cluster(podgroup("train", 2), *first.persist))
    pin = {"key": LABEL, "operator": "In", "values": ["ib-b"]}
    assert terms(result.object) == [
        {"matchExpressions": [{"key": "gpu", "operator": "Exists"}, pin]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}, pin]},
    ]
    assert review(result.object, cluster(podgroup("train", 2), *first.persist)).patch == ()


def test_a_pin_that_contradicts_the_gang_is_denied_and_one_that_agrees_is_kept() -> None:
    first = review(member("train", 0), cluster(podgroup("train", 2)))
    view = cluster(podgroup("train", 2), *first.persist)
    contradicting = review(member("train", 1, nodeSelector={LABEL: "ib-a"}), view)
    assert contradicting.decision.message == (
        "[ib-cluster] spec.nodeSelector[example.com/ib-cluster]: pins ib-a but gang ml/train runs in IB cluster "
        "ib-b; remove the pod's own cluster pin or pin ib-b"
    )
    agreeing = review(member("train", 1, nodeSelector={LABEL: "ib-b"}), view)
    assert agreeing.decision.allowed and agreeing.object["spec"]["nodeSelector"] == {LABEL: "ib-b"}


def test_the_first_member_choice_respects_its_own_pin() -> None:
    result = review(member("train", nodeSelector={LABEL: "ib-a"}), cluster(podgroup("train", 2)))
    assert result.persist[0]["spec"]["cluster"] == "ib-a"


def test_pods_without_a_group_are_untouched() -> None:
    result = review(pod(WHOLE_CARD), cluster())
    assert "affinity" not in result.object["spec"] and result.persist == ()
    cpu_only = review(pod({"cpu": "1"}), cluster())
    assert cpu_only.patch == () and cpu_only.warnings == ()


def test_missing_podgroup_sizes_the_gang_as_one_member() -> None:
    result = review(member("lonely"), cluster())
    assert result.persist[0]["spec"]["minMember"] == 1
    assert "vgpu-guard: PodGroup ml/lonely not found; gang sized as 1 member" in result.warnings


def test_cpu_only_gangs_use_allocatable_cpu() -> None:
    # 64 CPUs per node: ib-b (2 nodes) holds 4 members of 32 CPUs, ib-a 8.
    limits = {"cpu": "32"}
    four = review(member("mpi", limits=limits), cluster(podgroup("mpi", 4)))
    assert four.persist[0]["spec"] == {
        "group": "mpi",
        "cluster": "ib-b",
        "minMember": 4,
        "perPod": {"cpu": "32"},
    }
    six = review(member("mpi", limits=limits), cluster(podgroup("mpi", 6)))
    assert six.persist[0]["spec"]["cluster"] == "ib-a"
    nine = review(member("mpi", limits=limits), cluster(podgroup("mpi", 9)))
    assert (
        "ib-a has room for 8 (4 eligible nodes, 256 CPU free); ib-b has room for 4" in nine.decision.message
    )


def test_ib_disabled_leaves_gangs_alone() -> None:
    config = config_with()
    result = review(member("train"), cluster(podgroup("train", 2), config=config), config)
    assert "affinity" not in result.object["spec"] and result.persist == ()


def test_review_applies_the_recorded_choice_to_the_next_member() -> None:
    docs = [Document(f"f#{i}", member("train", i)) for i in range(2)]
    results = review_documents(docs, cluster(podgroup("train", 2)), CONFIG, username="alice")
    clusters = [terms(r.object)[0]["matchExpressions"][0]["values"] for _, r in results]
    assert clusters == [["ib-b"], ["ib-b"]]
    assert [len(r.persist) for _, r in results] == [1, 0]


def test_allocator_honours_the_stamped_cluster() -> None:
    from vgpu_guard.engine.allocator import Allocator, Placement
    from vgpu_guard.engine.pod_request import pod_request

    view = cluster(podgroup("train", 2))
    stamped = review(member("train"), view).object
    stamped["metadata"]["uid"] = "u-1"
    request = pod_request(stamped, CONFIG.nvidia)
    assert request is not None
    placement = Allocator(view, {}, config=CONFIG).place(request)
    assert isinstance(placement, Placement) and placement.node.startswith("b")


def test_a_gang_whose_pods_cannot_use_any_ib_node_is_not_an_ib_gang() -> None:
    nodes = [gpu_node(f"a{i}", count=1, labels={LABEL: "ib-a"}) for i in range(2)]
    nodes.append(gpu_node("plain", count=1, labels={"pool": "plain"}))
    result = review(
        member("batch", nodeSelector={"pool": "plain"}), view_of([*nodes, podgroup("batch", 1)], CONFIG)
    )
    assert result.decision.allowed and result.persist == ()
    assert result.object["spec"].get("affinity") is None


# --- the Volcano Job itself: judged as the gang it will make, when it is applied ------------------


def volcano_job(name: str, min_available: int | None, replicas: int = 8, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "tasks": [
            {
                "name": "worker",
                "replicas": replicas,
                "template": {"spec": {"containers": [{"name": "nccl", "resources": {"limits": WHOLE_CARD}}]}},
            }
        ],
        **extra,
    }
    if min_available is not None:
        spec["minAvailable"] = min_available
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": spec,
    }


JOB_DENIED = (
    "[ib-cluster] spec.minAvailable: gang ml/big needs 8 members in one IB cluster but none can hold them "
    "(ib-a has room for 4 (4 eligible nodes, 98304 MiB GPU memory free); ib-b has room for 2 (2 eligible "
    "nodes, 49152 MiB GPU memory free)); lower minMember, free capacity in one cluster, or add nodes"
)


@pytest.mark.parametrize("min_available", [8, None], ids=["minAvailable", "every-replica"])
def test_a_volcano_job_whose_gang_fits_no_ib_cluster_is_denied_when_applied(
    min_available: int | None,
) -> None:
    """Issue 38: the Job was admitted and its 8 pods were then each refused, where no one applying
    it looks; the Job now meets the first member's decision (the same decide_gang)."""
    result = review(volcano_job("big", min_available), cluster())
    assert (result.decision.allowed, result.decision.message) == (False, JOB_DENIED)
    assert result.persist == ()  # the first member records the cluster, not the Job


def test_a_volcano_job_whose_gang_fits_is_admitted_without_a_record() -> None:
    result = review(volcano_job("small", 2, replicas=2), cluster())
    assert result.decision.allowed and result.decision.warnings == () and result.persist == ()


def test_a_volcano_job_follows_on_no_fit_and_its_update_is_not_resized() -> None:
    unpinned = config_with(topology={"ibClusterLabel": LABEL, "onNoFit": "unpinned"})
    assert review(volcano_job("big", 8), cluster(config=unpinned), unpinned).decision.allowed
    # An UPDATE: its pods may hold the very GPUs a new sizing would count against it.
    update = request_for(
        volcano_job("big", 8), username="alice", operation="UPDATE", old=volcano_job("big", 8)
    )
    assert review_object(update, cluster(), CONFIG).decision.allowed


def test_a_volcano_job_and_its_first_member_are_judged_alike() -> None:
    from vgpu_guard.engine.volcano_job import volcano_job_pods, volcano_podgroup

    job = volcano_job("big", 8)
    (first,) = volcano_job_pods(job, limit=1)
    member_result = review(first, cluster(volcano_podgroup(job)))
    job_message = review(job, cluster()).decision.message
    assert member_result.decision.message.split(": ", 1)[1] == job_message.split(": ", 1)[1]


@pytest.mark.parametrize("group", ["A100", "-job", "job_1", "x" * 254])
def test_a_group_name_no_podgroup_can_have_is_denied_saying_so(group: str) -> None:
    """The API server refuses a GangPlacement of that name, so the webhook's recording would
    answer "retry in a few seconds" for ever; the rules deny it at once, naming the annotation
    and what a name must be (offline review and the webhook alike)."""
    result = review(member(group), cluster())
    assert not result.decision.allowed
    assert result.persist == ()
    assert result.decision.rules == ("ib-cluster",)
    assert result.decision.message == (
        f"[ib-cluster] metadata.annotations[scheduling.k8s.io/group-name]: scheduling.k8s.io/group-name "
        f"{group!r} is not a valid PodGroup name (a lowercase RFC 1123 subdomain: lower case alphanumeric "
        "characters, '-' or '.', starting and ending with an alphanumeric character, at most 253 "
        f"characters): no PodGroup can be named so, and the IB cluster of gang ml/{group} cannot be "
        "recorded under it; set the annotation to the name of the pod's PodGroup"
    )


@pytest.mark.parametrize("group", ["a", "job-1", "team.job-1", "x" * 253])
def test_a_valid_group_name_is_recorded(group: str) -> None:
    result = review(member(group), cluster())
    assert result.decision.allowed
    assert result.persist[0]["metadata"]["name"] == group
