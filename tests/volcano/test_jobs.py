"""What Volcano's job controller makes of a Job (vgpu_guard/volcano/jobs.py): the PodGroup
``<job>-<uid>`` and annotated gang members, with the job's defaults."""

from __future__ import annotations

from typing import Any

from vgpu_guard.volcano.jobs import job_podgroup, job_pods


def template(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "i"}], **spec},
    }


def job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "w", "namespace": "ns", "uid": "u-1"},
        "spec": spec,
    }


def test_a_job_makes_a_podgroup_named_with_its_uid_and_annotated_gang_members() -> None:
    obj = job(
        minAvailable=2,
        queue="training",
        priorityClassName="high",
        tasks=[
            {"name": "ps", "replicas": 1, "template": template()},
            {"name": "worker", "replicas": 2, "template": template(schedulerName="custom")},
        ],
    )
    owner = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "name": "w",
        "uid": "u-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert job_podgroup(obj) == {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "w-u-1", "namespace": "ns", "ownerReferences": [owner]},
        "spec": {"minMember": 2, "queue": "training", "priorityClassName": "high"},
    }
    pods = job_pods(obj)
    assert [p["metadata"]["name"] for p in pods] == ["w-ps-0", "w-worker-0", "w-worker-1"]
    first, worker = pods[0], pods[1]
    assert first["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "w-u-1"
    assert first["metadata"]["ownerReferences"] == [owner]
    assert first["spec"]["schedulerName"] == "volcano"  # the job's default
    assert worker["spec"]["schedulerName"] == "custom"  # the template wins
    assert first["spec"]["priorityClassName"] == "high"
    # minAvailable defaults to every replica.
    del obj["spec"]["minAvailable"]
    assert job_podgroup(obj)["spec"]["minMember"] == 3
