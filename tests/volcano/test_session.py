"""Volcano's sessions and job controller against an API server (vgpu_guard/volcano/session.py, jobs.py):
what each session writes, a refused bind decided again next session, a Job's PodGroup before its
pods, and the pods only once the scheduler has let the PodGroup in."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import default_config, gpu_node, pod
from tests.volcano.cluster import Cluster, Write
from vgpu_guard.apidouble import ADMIN
from vgpu_guard.kube.resources import PODGROUPS
from vgpu_guard.volcano.binder import parse_version
from vgpu_guard.volcano.jobs import JOBS, JobController, job_pods, plan_job, podgroup_name
from vgpu_guard.volcano.session import VolcanoScheduler

Obj = dict[str, Any]


def _scheduler(cluster: Cluster, release: str = "1.16", *, stale: bool = False) -> VolcanoScheduler:
    return VolcanoScheduler(
        cluster.client(),
        default_config(),
        version=parse_version(release),
        stale_cache=stale,
        clock=cluster.clock,
    )


def _web(cluster: Cluster, replicas: int = 3) -> None:
    """Seed 000 in small: card 0 of n0 full, three 12 GiB pods pending."""
    running = pod({"volcano.sh/vgpu-memory": 24576}, name="train", schedulerName="volcano", nodeName="n0")
    running["metadata"]["annotations"] = {"volcano.sh/vgpu-ids-new": "GPU-n0-0,NVIDIA,24576,0:"}
    cluster.add(gpu_node("n0", count=2), running)
    cluster.add(
        *(
            pod({"volcano.sh/vgpu-memory": 12288}, name=f"web-{i}", schedulerName="volcano")
            for i in range(replicas)
        )
    )


def _refuse_third_on_card(cluster: Cluster) -> None:
    """An arbiter stand-in: the card holds two 12 GiB pods, the third assignment to it is denied."""
    held: list[str] = []

    def refuse(write: Write) -> bool:
        if write.subresource != "binding" or "GPU-n0-1" not in write.annotations.get(
            "volcano.sh/vgpu-ids-new", ""
        ):
            return False
        if len(held) == 2:
            return True
        held.append(write.name)
        return False

    cluster.recorder.refuse = refuse


async def test_a_session_binds_concurrently_and_a_refused_bind_is_decided_again_on_fresh_data() -> None:
    cluster = Cluster()
    _web(cluster)
    _refuse_third_on_card(cluster)
    volcano = _scheduler(cluster, stale=True)
    first = await volcano.session()
    assert [(b.pod, b.result) for b in first.binds] == [
        ("default/web-0", "bound"),
        ("default/web-1", "bound"),
        ("default/web-2", "denied"),
    ]
    assert first.binds[2].message == 'admission webhook "test" denied the request: no'
    second = await volcano.session()  # the cache now holds web-0 and web-1: no card fits web-2
    assert second.binds == ()
    assert second.unplaced == (
        (
            "default/web-2",
            "0/1 nodes are unavailable: 1 hami-vgpuDeviceSharing not enough gpu fitted on this node.",
        ),
    )
    condition = next(c for c in cluster.pod("web-2")["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert second.changed and not (await volcano.session()).changed  # the reason is written once


@pytest.mark.parametrize(
    ("release", "writes"), [("1.16", ["CREATE binding"]), ("1.15", ["UPDATE ", "CREATE binding"])]
)
async def test_each_task_gets_its_versions_writes(release: str, writes: list[str]) -> None:
    cluster = Cluster()
    _web(cluster, replicas=1)
    await _scheduler(cluster, release).session()
    assert [f"{w.operation} {w.subresource}" for w in cluster.recorder.writes] == writes
    assert cluster.pod("web-0")["spec"]["nodeName"] == "n0"


@pytest.mark.parametrize(
    ("release", "writes", "left"),
    [("1.16", [], 0), ("1.15", ["UPDATE "] * 2, 2), ("1.15.1", ["UPDATE "] * 4, 0)],
)
async def test_a_gang_that_cannot_start_is_not_bound_and_its_patches_stay_until_1_15_1(
    release: str, writes: list[str], left: int
) -> None:
    """Three 16 GiB members, minMember 3, two 24 GiB cards: two are placed, the statement is
    discarded. >= 1.16 wrote nothing; v1.10.0-v1.15.0 patched two assignments and left them on the
    Pending pods (``Release`` is a no-op, issue 43 (a)); v1.15.1 patches them away again."""
    cluster = Cluster()
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"minMember": 3},
    }
    members = [
        pod(
            {"volcano.sh/vgpu-memory": 16384},
            name=f"m-{i}",
            schedulerName="volcano",
            annotations={"scheduling.k8s.io/group-name": "g"},
        )
        for i in range(3)
    ]
    cluster.add(gpu_node("n0", count=2), group, *members)
    record = await _scheduler(cluster, release).session()
    assert record.enqueued == ("default/g",) and record.discarded == ("default/g",)
    assignments = [w for w in cluster.recorder.writes if w.subresource != "status"]  # not the reasons
    assert [f"{w.operation} {w.subresource}" for w in assignments] == writes
    carrying = 0
    for i in range(3):
        stored = cluster.pod(f"m-{i}")
        assert not stored["spec"].get("nodeName")
        carrying += "volcano.sh/vgpu-ids-new" in (stored["metadata"].get("annotations") or {})
    assert carrying == left


def _job(name: str = "train", replicas: int = 2) -> Obj:
    template = pod({"volcano.sh/vgpu-memory": 12288}, name="x")
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "minAvailable": replicas,
            "schedulerName": "volcano",
            "tasks": [{"name": "worker", "replicas": replicas, "template": {"spec": template["spec"]}}],
        },
    }


async def test_a_volcano_job_gets_its_podgroup_then_its_pods_once_inqueue_then_binds() -> None:
    cluster = Cluster()
    cluster.add(gpu_node("n0", count=1))
    job = cluster.store.create(JOBS, _job(), namespace="default")
    group = podgroup_name(job)
    assert group == f"train-{job['metadata']['uid']}"
    controller, volcano = JobController(cluster.client(ADMIN)), _scheduler(cluster)
    assert await controller.sync() == 1  # the PodGroup only
    assert cluster.store.get(PODGROUPS, group, namespace="default")["spec"]["minMember"] == 2
    assert await controller.sync() == 0  # Pending: the pods wait
    assert (await volcano.session()).enqueued == (f"default/{group}",)
    assert await controller.sync() == 2
    for i in range(2):
        member = cluster.pod(f"train-worker-{i}")
        assert member["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == group
        assert member["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    record = await volcano.session()
    assert [b.result for b in record.binds] == ["bound", "bound"]
    assert record.running == (f"default/{group}",)
    assert cluster.store.get(PODGROUPS, group, namespace="default")["status"]["phase"] == "Running"


def test_plan_job_never_makes_pods_before_the_podgroup_is_let_in() -> None:
    job = _job()
    job["metadata"]["uid"] = "u1"
    first = plan_job(job, None, [])
    assert (
        first.podgroup is not None and first.podgroup["metadata"]["name"] == "train-u1" and first.pods == ()
    )
    for phase in (None, "Pending"):
        podgroup = {**first.podgroup, "status": {"phase": phase}} if phase else first.podgroup
        assert (
            plan_job(job, podgroup, []) == plan_job(job, podgroup, [])
            and not plan_job(job, podgroup, []).pods
        )
    inqueue = {**first.podgroup, "status": {"phase": "Inqueue"}}
    assert [p["metadata"]["name"] for p in plan_job(job, inqueue, ["train-worker-0"]).pods] == [
        "train-worker-1"
    ]
    assert [p["metadata"]["name"] for p in job_pods(job)] == ["train-worker-0", "train-worker-1"]
