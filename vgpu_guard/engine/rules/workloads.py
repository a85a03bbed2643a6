"""Pod templates inside workloads, so ``kubectl apply`` of the workload gets the feedback.

Without this a Deployment with ``vgpu-memory: 12Gi`` is accepted, and its ReplicaSet then fails
to create pods forever with the reason buried in events. Each template is validated as the pods
will be after our mutation (defaults, MIG rounding), with paths rooted at the template.

A Volcano Job is also a gang: when IB pinning is on, its creation meets the decision its first
member will meet (``decide_gang`` on that pod, with the PodGroup the job controller will make), so
a gang no IB cluster can hold is refused when the Job is applied, not pod by pod afterwards where
nobody applying it looks. Only on CREATE: on UPDATE the job's running members hold the very GPUs a
new sizing would count against it, and the gang's cluster is already recorded.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.gang import decide_gang, ib_enabled
from vgpu_guard.engine.rules.pods_mutate import normalise_pod
from vgpu_guard.engine.rules.pods_validate import validate_pod_spec
from vgpu_guard.engine.violations import Violation
from vgpu_guard.engine.volcano_job import is_volcano_job, volcano_job_pods, volcano_podgroup

__all__ = ["WORKLOAD_KINDS", "job_gang_violations", "pod_templates", "validate_workload"]

# (apiVersion group, kind) -> how to reach the pod templates.
WORKLOAD_KINDS: dict[tuple[str, str], str] = {
    ("apps", "Deployment"): "spec.template",
    ("apps", "StatefulSet"): "spec.template",
    ("apps", "ReplicaSet"): "spec.template",
    ("apps", "DaemonSet"): "spec.template",
    ("batch", "Job"): "spec.template",
    ("batch", "CronJob"): "spec.jobTemplate.spec.template",
    ("batch.volcano.sh", "Job"): "spec.tasks[].template",
}


def _dig(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)
    return obj


def pod_templates(obj: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Yield (path prefix, template) for every pod template of a known workload kind."""
    api_version = str(obj.get("apiVersion") or "")
    group = api_version.rpartition("/")[0]
    where = WORKLOAD_KINDS.get((group, str(obj.get("kind") or "")))
    if where is None:
        return
    if where.endswith("[].template"):
        tasks = _dig(obj, "spec.tasks")
        for index, task in enumerate(tasks if isinstance(tasks, list) else []):
            template = task.get("template") if isinstance(task, Mapping) else None
            if isinstance(template, Mapping):
                yield f"spec.tasks[{index}].template.", template
        return
    template = _dig(obj, where)
    if isinstance(template, Mapping):
        yield f"{where}.", template


def validate_workload(
    obj: Mapping[str, Any],
    view: ClusterView,
    config: GuardConfig,
    *,
    username: str,
    groups: tuple[str, ...] = (),
    cluster_checks: bool = True,
    creating: bool = False,
) -> list[Violation]:
    """Violations of every pod template in the workload, as its pods would meet them; on CREATE
    (``creating``) a Volcano Job's gang too (``job_gang_violations``)."""
    out: list[Violation] = []
    metadata = obj.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    for prefix, template in pod_templates(obj):
        pod, _ = normalise_pod(template, view, config)
        if isinstance(namespace, str) and namespace:
            # The pods will live in the workload's namespace (an exemption applies to them).
            pod_meta = pod.setdefault("metadata", {})
            if isinstance(pod_meta, dict):
                pod_meta.setdefault("namespace", namespace)
        out.extend(
            validate_pod_spec(
                pod,
                view,
                config,
                username=username,
                groups=groups,
                prefix=prefix,
                cluster_checks=cluster_checks,
            )
        )
    if creating and cluster_checks:
        out.extend(job_gang_violations(obj, view, config))
    return out


def job_gang_violations(job: Mapping[str, Any], view: ClusterView, config: GuardConfig) -> list[Violation]:
    """The IB verdict a Volcano Job's first member will get, as a violation of ``spec.minAvailable``.

    The pod and PodGroup are the job controller's (engine/volcano_job.py), the pod mutated as our
    webhook will mutate it, and the decision is ``decide_gang``'s: one function decides for the
    Job, its pods, ``review`` and ``simulate``.
    """
    if not ib_enabled(config) or not is_volcano_job(job):
        return []
    members = volcano_job_pods(job, limit=1)
    namespace = members[0]["metadata"]["namespace"] if members else ""
    if not members or namespace in config.admission.exempt_namespaces:
        return []
    first, _ = normalise_pod(members[0], view, config)
    decision = decide_gang(first, view=view.with_admitted(volcano_podgroup(job)), config=config)
    if decision is None or decision.violation is None:
        return []
    return [Violation(decision.violation.rule, "spec.minAvailable", decision.violation.message)]
