"""Pod templates inside workloads, so ``kubectl apply`` of the workload gets the feedback.

Without this a Deployment with ``vgpu-memory: 12Gi`` is accepted, and its ReplicaSet then fails
to create pods forever with the reason buried in events. Each template is validated as the pods
will be after our mutation (defaults, MIG rounding), with paths rooted at the template.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.rules.pods_mutate import normalise_pod
from vgpu_guard.engine.rules.pods_validate import validate_pod_spec
from vgpu_guard.engine.violations import Violation

__all__ = ["WORKLOAD_KINDS", "pod_templates", "validate_workload"]

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
) -> list[Violation]:
    """Violations of every pod template in the workload, as its pods would meet them."""
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
    return out
