"""Volcano's job controller, as far as vgpu-guard's stories need it: PodGroup first, pods once Inqueue.

From Volcano's source (pkg/controllers/job/):

- ``syncJob`` creates the Job's PodGroup, named ``<job name>-<job uid>``
  (job_controller_actions.go ~64-66, ``createOrUpdatePodGroup``; job_controller_util.go
  ``GeneratePodgroupName``), with minMember = ``spec.minAvailable``, the Job's queue and
  priorityClassName;
- it creates the Job's pods only after the PodGroup's phase is neither empty nor ``Pending``
  (job_controller_actions.go ~404-419): Volcano's scheduler moves it ``Pending -> Inqueue`` in its
  enqueue action (session.py). Until then only the Job's status changes;
- each pod ``<job>-<task>-<index>`` inherits the Job's schedulerName and priorityClassName and
  carries ``scheduling.k8s.io/group-name: <podgroup>`` (job_controller_util.go ~63-65, 113-114).

The pod and PodGroup shapes are the engine's (engine/volcano_job.py, which the workload check
judges a Job's gang with); only the PodGroup's name, which needs the uid the API server gives the
Job, is set here. ``simulate`` creates what these functions return through its admission path;
``JobController`` creates it through an API server (the sandbox).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_guard.engine.objects import Obj
from vgpu_guard.engine.untrusted import as_mapping
from vgpu_guard.engine.volcano_job import GROUP_ANNOTATION, volcano_job_pods, volcano_podgroup
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import AlreadyExists, KubeError
from vgpu_guard.kube.resources import PODGROUPS, PODS, Resource

__all__ = [
    "JOBS",
    "JobController",
    "JobPlan",
    "job_podgroup",
    "job_pods",
    "plan_job",
    "podgroup_name",
    "podgroup_released",
]

log = logging.getLogger("vgpu_guard.volcano")

JOBS = Resource("batch.volcano.sh", "v1alpha1", "jobs", "Job", namespaced=True)
# PodGroup phases in which the job controller still holds the Job's pods back.
_HELD = ("", "Pending")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(obj.get("metadata"))


def podgroup_name(job: Mapping[str, Any]) -> str:
    """``<job name>-<job uid>`` (job_controller_util.go ``GeneratePodgroupName``)."""
    meta = _meta(job)
    return f"{meta.get('name') or ''}-{meta.get('uid') or ''}"


def _owner(job: Mapping[str, Any]) -> Obj:
    meta = _meta(job)
    return {
        "apiVersion": str(job.get("apiVersion") or "batch.volcano.sh/v1alpha1"),
        "kind": "Job",
        "name": str(meta.get("name") or ""),
        "uid": str(meta.get("uid") or ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def job_podgroup(job: Mapping[str, Any]) -> Obj:
    """The PodGroup the job controller creates for a stored ``job`` (it has a uid), owned by it."""
    podgroup = volcano_podgroup(job)
    podgroup["metadata"] = {
        **podgroup["metadata"],
        "name": podgroup_name(job),
        "ownerReferences": [_owner(job)],
    }
    return podgroup


def job_pods(job: Mapping[str, Any]) -> list[Obj]:
    """The Job's pods in creation order, in its PodGroup ``<job>-<uid>``, owned by the Job."""
    name = podgroup_name(job)
    pods = volcano_job_pods(job)
    for pod in pods:
        pod["metadata"]["annotations"][GROUP_ANNOTATION] = name
        pod["metadata"]["ownerReferences"] = [_owner(job)]
    return pods


def podgroup_released(podgroup: Mapping[str, Any] | None) -> bool:
    """True once the scheduler has let the PodGroup out of Pending (the job controller's gate)."""
    if podgroup is None:
        return False
    return str(as_mapping(podgroup.get("status")).get("phase") or "") not in _HELD


@dataclass(frozen=True, slots=True)
class JobPlan:
    """What the job controller creates for one Job now: its PodGroup (when missing), its pods
    (when the PodGroup is released and they are missing), in that order."""

    podgroup: Obj | None
    pods: tuple[Obj, ...]


def plan_job(job: Mapping[str, Any], podgroup: Mapping[str, Any] | None, existing: Iterable[str]) -> JobPlan:
    """One ``syncJob`` of ``job``, given its PodGroup as stored (or None) and the names of its
    pods that exist. Pods are never planned in the same sync that creates the PodGroup."""
    if podgroup is None:
        return JobPlan(podgroup=job_podgroup(job), pods=())
    if not podgroup_released(podgroup):
        return JobPlan(podgroup=None, pods=())
    have = set(existing)
    return JobPlan(podgroup=None, pods=tuple(p for p in job_pods(job) if p["metadata"]["name"] not in have))


class JobController:
    """``plan_job`` for every Volcano Job of an API server, applied through ``api`` (the sandbox)."""

    def __init__(self, api: ClusterClient) -> None:
        self.api = api

    async def sync(self) -> int:
        """One pass over every Job; returns how many objects it created."""
        jobs = (await self.api.list(JOBS)).items
        podgroups = {
            (_meta(p).get("namespace"), _meta(p).get("name")): p
            for p in (await self.api.list(PODGROUPS)).items
        }
        pods = {(_meta(p).get("namespace"), _meta(p).get("name")) for p in (await self.api.list(PODS)).items}
        created = 0
        for job in jobs:
            if _meta(job).get("deletionTimestamp"):
                continue
            namespace = str(_meta(job).get("namespace") or "default")
            plan = plan_job(
                job,
                podgroups.get((namespace, podgroup_name(job))),
                (str(name) for ns, name in pods if ns == namespace),
            )
            for obj in ([plan.podgroup] if plan.podgroup is not None else []) + list(plan.pods):
                created += await self._create(obj, namespace)
        return created

    async def _create(self, obj: Obj, namespace: str) -> int:
        """Create one object; a refusal (an admission webhook's denial) is logged and retried next
        sync, as the job controller requeues the Job."""
        resource = PODGROUPS if obj["kind"] == "PodGroup" else PODS
        try:
            await self.api.create(resource, obj, namespace=namespace)
        except AlreadyExists:
            return 0
        except KubeError as e:
            name = f"{namespace}/{obj['metadata']['name']}"
            log.warning(
                "job controller: create refused", extra={"fields": {"object": name, "error": e.message}}
            )
            return 0
        return 1
