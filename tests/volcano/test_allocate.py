"""Volcano's enqueue and allocate decisions (vgpu_guard/volcano/allocate.py): binpack from its own
cache, the stale-cache switch (#3616), gangs all-or-nothing."""

from __future__ import annotations

from typing import Any

from tests.builders import default_config, gpu_node, pod
from vgpu_guard.volcano.allocate import Snapshot, decide

Obj = dict[str, Any]
NOW = 1_750_000_000


def _pod(name: str, memory: int, *, group: str = "", node: str = "", ids: str = "") -> Obj:
    notes = {"scheduling.k8s.io/group-name": group} if group else {}
    if ids:
        notes["volcano.sh/vgpu-ids-new"] = ids
    obj = pod({"volcano.sh/vgpu-memory": memory}, name=name, annotations=notes, schedulerName="volcano")
    obj["metadata"]["uid"] = f"uid-{name}"
    obj["metadata"]["creationTimestamp"] = f"2025-06-15T15:06:{len(name):02}Z"
    if node:
        obj["spec"]["nodeName"] = node
    return obj


def _podgroup(name: str, min_member: int, phase: str = "Inqueue") -> Obj:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": min_member},
        "status": {"phase": phase},
    }


def _seed_000(**kw: Any) -> Snapshot:
    """One node, two 24 GiB cards, card 0 full (a running pod), three 12 GiB pods pending."""
    running = _pod("train", 24576, node="n0", ids="GPU-n0-0,NVIDIA,24576,0:")
    pending = [_pod(f"web-{i}", 12288) for i in range(3)]
    return Snapshot(nodes=(gpu_node("n0", count=2),), pods=(running, *pending), **kw)


def _placed(plan: Any) -> list[tuple[str, str, str]]:
    return [
        (a.pod["metadata"]["name"], a.node, a.ids) for job in plan.jobs if job.ready for a in job.assignments
    ]


def test_the_cache_counts_bound_pods_own_assignments_and_binpacks() -> None:
    """Without the stale cache, two 12 GiB pods share the free card and the third waits, with why."""
    plan = decide(_seed_000(), default_config(), stale=False, now=NOW)
    card = "GPU-n0-1,NVIDIA,12288,0:"
    assert _placed(plan) == [("web-0", "n0", card), ("web-1", "n0", card)]
    (waiting,) = [(p["metadata"]["name"], r) for job in plan.jobs for p, r in job.unplaced]
    assert waiting == (
        "web-2",
        "0/1 nodes are unavailable: 1 hami-vgpuDeviceSharing not enough gpu fitted on this node.",
    )


def test_the_stale_cache_puts_three_12gib_pods_on_one_24gib_card() -> None:
    """#3616: a session that does not count its own placements sends all three to the free card."""
    plan = decide(_seed_000(), default_config(), stale=True, now=NOW)
    assert [node_card[1:] for node_card in _placed(plan)] == [("n0", "GPU-n0-1,NVIDIA,12288,0:")] * 3


def test_jobs_go_by_priority_then_age() -> None:
    low, high = _pod("low", 24576), _pod("high", 24576)
    low["spec"]["priority"], high["spec"]["priority"] = 1, 100
    plan = decide(
        Snapshot(nodes=(gpu_node("n0", count=1),), pods=(low, high)), default_config(), stale=False, now=NOW
    )
    assert [job.name for job in plan.jobs] == ["default/high", "default/low"]
    assert _placed(plan) == [("high", "n0", "GPU-n0-0,NVIDIA,24576,0:")]


def test_a_gang_is_placed_whole_or_not_at_all() -> None:
    """Three 16 GiB members on two 24 GiB cards: minMember 3 places none (every member says why);
    minMember 2 places two and leaves the third pending."""
    members = [_pod(f"m-{i}", 16384, group="g") for i in range(3)]
    nodes = (gpu_node("n0", count=2),)
    whole = decide(
        Snapshot(nodes, tuple(members), (_podgroup("g", 3),)), default_config(), stale=False, now=NOW
    )
    (job,) = whole.jobs
    assert not job.ready and _placed(whole) == []
    assert [p["metadata"]["name"] for p, _ in job.unplaced] == ["m-0", "m-1", "m-2"]
    assert {r for _, r in job.unplaced} == {
        "1/3 tasks in gang unschedulable: gang default/g needs 3 (minMember), 2 can run; m-2, judged on what "
        "would remain once m-0, m-1 are placed: 0/1 nodes are unavailable: 1 hami-vgpuDeviceSharing not "
        "enough gpu fitted on this node."
    }
    part = decide(
        Snapshot(nodes, tuple(members), (_podgroup("g", 2),)), default_config(), stale=False, now=NOW
    )
    assert [name for name, _, _ in _placed(part)] == ["m-0", "m-1"]


def test_a_gang_counts_its_bound_members() -> None:
    bound = _pod("m-0", 16384, group="g", node="n0", ids="GPU-n0-0,NVIDIA,16384,0:")
    pending = _pod("m-1", 16384, group="g")
    plan = decide(
        Snapshot((gpu_node("n0", count=2),), (bound, pending), (_podgroup("g", 2, "Running"),)),
        default_config(),
        stale=False,
        now=NOW,
    )
    assert _placed(plan) == [("m-1", "n0", "GPU-n0-1,NVIDIA,16384,0:")]


def test_enqueue_lets_pending_podgroups_in_and_their_pods_are_allocated_the_same_session() -> None:
    member = _pod("m-0", 16384, group="g")
    snapshot = Snapshot((gpu_node("n0", count=1),), (member,), (_podgroup("g", 1, "Pending"),))
    plan = decide(snapshot, default_config(), stale=False, now=NOW)
    assert plan.enqueue == (("default", "g"),)
    assert _placed(plan) == [("m-0", "n0", "GPU-n0-0,NVIDIA,16384,0:")]


def test_pods_of_a_missing_podgroup_other_schedulers_and_no_vgpu_are_not_placed() -> None:
    orphan = _pod("orphan", 1024, group="nowhere")
    other = _pod("other", 1024)
    other["spec"]["schedulerName"] = "default-scheduler"
    plain = pod(None, name="plain", schedulerName="volcano")
    plan = decide(
        Snapshot((gpu_node("n0", count=1),), (orphan, other, plain)), default_config(), stale=False, now=NOW
    )
    reasons = {p["metadata"]["name"]: r for job in plan.jobs for p, r in job.unplaced}
    assert reasons == {
        "orphan": "its PodGroup default/nowhere does not exist; Volcano schedules a group's pods with it",
        "plain": "the Volcano model places vGPU pods only; this pod requests no vGPU",
    }
