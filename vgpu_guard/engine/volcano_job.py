"""What Volcano's job controller makes of a Volcano Job: its PodGroup and its member pods.

One description, read by two callers that must agree: the workload check, which judges a Job's
gang when the Job is applied (the IB cluster its first member will be given, engine/rules/
workloads.py), and ``simulate``, which creates the same PodGroup and pods (cli/workload_pods.py).
Were each to build them, a Job could be admitted against one gang and simulated as another.

As the job controller does: a PodGroup named after the job (minMember = ``spec.minAvailable``,
else every replica; the job's queue and priorityClassName), and per task ``replicas`` pods
``<job>-<task>-<index>`` carrying the group annotation the allocator and Volcano read, with the
job's ``schedulerName`` and ``priorityClassName`` where the template names none.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from vgpu_guard.engine.objects import Obj
from vgpu_guard.engine.untrusted import as_mapping

__all__ = ["GROUP_ANNOTATION", "is_volcano_job", "pod_from_template", "volcano_job_pods", "volcano_podgroup"]


GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
_API_GROUP = "batch.volcano.sh"


def is_volcano_job(obj: Mapping[str, Any]) -> bool:
    return str(obj.get("apiVersion") or "").rpartition("/")[0] == _API_GROUP and obj.get("kind") == "Job"


def _count(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def _tasks(job: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], int]]:
    tasks = as_mapping(job.get("spec")).get("tasks")
    listed = [t for t in tasks if isinstance(t, Mapping)] if isinstance(tasks, list) else []
    return [(t, _count(t.get("replicas"), 1)) for t in listed]


def _identity(job: Mapping[str, Any]) -> tuple[str, str, str]:
    """(name, namespace, queue) of the job."""
    meta = as_mapping(job.get("metadata"))
    queue = as_mapping(job.get("spec")).get("queue")
    return str(meta.get("name") or ""), str(meta.get("namespace") or "default"), str(queue or "default")


def volcano_podgroup(job: Mapping[str, Any]) -> Obj:
    """The PodGroup the job controller creates for ``job``."""
    name, namespace, queue = _identity(job)
    spec = as_mapping(job.get("spec"))
    replicas = sum(count for _, count in _tasks(job))
    podgroup_spec: Obj = {"minMember": _count(spec.get("minAvailable"), replicas), "queue": queue}
    priority_class = spec.get("priorityClassName")
    if isinstance(priority_class, str) and priority_class:
        podgroup_spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": podgroup_spec,
    }


def pod_from_template(
    template: Mapping[str, Any],
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    """A pod as a controller creates it from a pod template: the template's metadata and spec, its
    own name and namespace, and the controller's labels and annotations on top."""
    meta = as_mapping(template.get("metadata"))
    spec = copy.deepcopy(dict(as_mapping(template.get("spec"))))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                **{str(k): str(v) for k, v in as_mapping(meta.get("labels")).items()},
                **(labels or {}),
            },
            "annotations": {
                **{str(k): str(v) for k, v in as_mapping(meta.get("annotations")).items()},
                **(annotations or {}),
            },
        },
        "spec": spec,
    }


def volcano_job_pods(job: Mapping[str, Any], *, limit: int | None = None) -> list[Obj]:
    """The member pods in creation order (task by task); ``limit``: only the first ones."""
    name, namespace, queue = _identity(job)
    spec = as_mapping(job.get("spec"))
    priority_class = spec.get("priorityClassName")
    scheduler = str(spec.get("schedulerName") or "volcano")
    pods: list[Obj] = []
    for task_index, (task, count) in enumerate(_tasks(job)):
        task_name = str(task.get("name") or f"task{task_index}")
        for index in range(count):
            if limit is not None and len(pods) >= limit:
                return pods
            where = {"volcano.sh/task-spec": task_name, "volcano.sh/task-index": str(index)}
            pod = pod_from_template(
                as_mapping(task.get("template")),
                name=f"{name}-{task_name}-{index}",
                namespace=namespace,
                labels={
                    "volcano.sh/job-name": name,
                    "volcano.sh/job-namespace": namespace,
                    "volcano.sh/queue-name": queue,
                    **where,
                },
                annotations={
                    GROUP_ANNOTATION: name,
                    "volcano.sh/job-name": name,
                    "volcano.sh/queue-name": queue,
                    **where,
                },
            )
            # The job controller fills these from the job when the template leaves them out.
            pod["spec"].setdefault("schedulerName", scheduler)
            if isinstance(priority_class, str) and priority_class:
                pod["spec"].setdefault("priorityClassName", priority_class)
            pods.append(pod)
    return pods
