"""Workloads expanded into pods as their controllers would: names, gang metadata, what is left out."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_guard.cli.workload_pods import expand_workload


def template(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "i"}], **spec},
    }


def workload(api_version: str, kind: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": spec,
    }


def names(obj: dict[str, Any]) -> list[str]:
    return [p["metadata"]["name"] for p in expand_workload(obj).pods]


def test_deployment_pods_share_a_template_hash_and_are_stable() -> None:
    deploy = workload("apps/v1", "Deployment", replicas=3, template=template())
    first = names(deploy)
    assert first == names(deploy)
    assert len(set(first)) == 3
    hashes = {n.split("-")[1] for n in first}
    assert len(hashes) == 1 and len(hashes.pop()) == 10
    assert all(len(n.split("-")[2]) == 5 for n in first)
    pod = expand_workload(deploy).pods[0]
    assert pod["metadata"]["labels"]["app"] == "x"
    assert pod["metadata"]["namespace"] == "ns"
    # A different template is a different ReplicaSet: a different hash.
    changed = workload("apps/v1", "Deployment", replicas=1, template=template(schedulerName="volcano"))
    assert names(changed)[0].split("-")[1] != first[0].split("-")[1]


def test_statefulset_ordinals_and_job_parallelism() -> None:
    assert names(workload("apps/v1", "StatefulSet", replicas=2, template=template())) == ["w-0", "w-1"]
    assert len(names(workload("batch/v1", "Job", parallelism=4, completions=2, template=template()))) == 2
    assert len(names(workload("batch/v1", "Job", template=template()))) == 1
    assert len(names(workload("apps/v1", "ReplicaSet", replicas=2, template=template()))) == 2
    assert expand_workload(workload("apps/v1", "StatefulSet", replicas=1, template=template())).username == (
        "system:serviceaccount:kube-system:statefulset-controller"
    )


def test_a_volcano_job_is_left_to_volcanos_job_controller() -> None:
    """Its PodGroup and pods come from vgpu_guard/volcano/jobs.py (tests/volcano/test_jobs.py)."""
    with pytest.raises(KeyError, match="Volcano's job controller"):
        expand_workload(workload("batch.volcano.sh/v1alpha1", "Job", tasks=[]))


@pytest.mark.parametrize(("api_version", "kind"), [("apps/v1", "DaemonSet"), ("batch/v1", "CronJob")])
def test_daemonsets_and_cronjobs_make_no_pods_and_say_why(api_version: str, kind: str) -> None:
    expansion = expand_workload(workload(api_version, kind, template=template()))
    assert expansion.pods == () and expansion.note.startswith("no pods simulated: ")


def test_a_non_workload_kind_is_refused() -> None:
    with pytest.raises(KeyError):
        expand_workload({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}})
