"""Workloads to pods, as their controllers would create them, for ``simulate``.

The webhook never sees a Deployment turn into pods: the API server admits the Deployment, then the
ReplicaSet controller creates pods, each of which is admitted again (and that is where our mutation
happens: MIG rounding, routing). ``simulate`` reproduces that second step here, deterministically:

- Deployment -> pods ``<name>-<pod-template-hash>-<5 chars>`` (the intermediate ReplicaSet is not
  simulated); ReplicaSet -> ``<name>-<5 chars>``; StatefulSet -> ``<name>-<ordinal>``;
  batch Job -> ``min(parallelism, completions)`` pods ``<name>-<5 chars>``;
- Volcano Jobs are not expanded here: simulate stores them and Volcano's job controller (its model,
  vgpu_guard/volcano/jobs.py) makes the PodGroup ``<job>-<uid>`` and, once Volcano's enqueue has
  let the PodGroup in, the pods;
- DaemonSet and CronJob are admitted but make no pods: a DaemonSet's pods are placed by its own
  controller on every node, and a CronJob makes nothing until its schedule fires.

The random parts of real names come from a hash of the workload and the index instead, so the same
scenario always yields the same pod names.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_guard.engine.objects import Obj
from vgpu_guard.engine.rules.workloads import WORKLOAD_KINDS
from vgpu_guard.engine.untrusted import as_mapping
from vgpu_guard.engine.volcano_job import pod_from_template

__all__ = ["CONTROLLER_USERS", "Expansion", "expand_workload"]


# The API server's name alphabet for generated suffixes (no vowels, no confusable characters).
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

# Who creates the pods, as the webhook sees it in the AdmissionRequest's userInfo.
CONTROLLER_USERS: dict[tuple[str, str], str] = {
    ("apps", "Deployment"): "system:serviceaccount:kube-system:replicaset-controller",
    ("apps", "ReplicaSet"): "system:serviceaccount:kube-system:replicaset-controller",
    ("apps", "StatefulSet"): "system:serviceaccount:kube-system:statefulset-controller",
    ("batch", "Job"): "system:serviceaccount:kube-system:job-controller",
    ("batch.volcano.sh", "Job"): "system:serviceaccount:volcano-system:volcano-controllers",
}


@dataclass(frozen=True)
class Expansion:
    """What a workload's controller creates: pods, in creation order."""

    pods: tuple[Obj, ...]
    # Pods are created by this user (the controller's service account).
    username: str
    # Why no pods were made (DaemonSet, CronJob), or "".
    note: str = ""


def _suffix(seed: str, length: int) -> str:
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:length])


def _count(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def expand_workload(workload: Mapping[str, Any]) -> Expansion:
    """The pods the workload's controller creates; see the module docstring.

    Raises ``KeyError`` for a kind outside ``engine.rules.workloads.WORKLOAD_KINDS`` and for a
    Volcano Job (Volcano's job controller makes its pods: vgpu_guard/volcano/jobs.py).
    """
    group = str(workload.get("apiVersion") or "").rpartition("/")[0]
    kind = str(workload.get("kind") or "")
    meta = as_mapping(workload.get("metadata"))
    name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or "default")
    spec = as_mapping(workload.get("spec"))
    template = as_mapping(spec.get("template"))
    if (group, kind) not in WORKLOAD_KINDS:
        raise KeyError(f"{group}/{kind} is not a workload kind")
    if (group, kind) == ("batch.volcano.sh", "Job"):
        raise KeyError(
            "a Volcano Job's pods are made by Volcano's job controller (vgpu_guard/volcano/jobs.py)"
        )
    if kind in ("DaemonSet", "CronJob"):
        why = (
            "its pods are placed on every node by the DaemonSet controller"
            if kind == "DaemonSet"
            else "it creates nothing until its schedule fires"
        )
        return Expansion(pods=(), username="", note=f"no pods simulated: {why}")
    username = CONTROLLER_USERS[(group, kind)]
    # A batch Job is the only workload kind left.
    pods = _PODS_BY_KIND.get(kind, _job_pods)(template, spec, name, namespace)
    return Expansion(pods=tuple(pods), username=username)


def _deployment_pods(
    template: Mapping[str, Any], spec: Mapping[str, Any], name: str, namespace: str
) -> list[Obj]:
    """A Deployment's pods, through its ReplicaSet: ``<name>-<template hash>-<suffix>``, each
    labelled with the pod-template-hash (the hash stands in for the controller's; stable per template)."""
    canonical = json.dumps(template, sort_keys=True, default=str)
    template_hash = _suffix(f"{namespace}/{name}:{canonical}", 10)
    return [
        pod_from_template(
            template,
            name=f"{name}-{template_hash}-{_suffix(f'{template_hash}/{index}', 5)}",
            namespace=namespace,
            labels={"pod-template-hash": template_hash},
        )
        for index in range(_count(spec.get("replicas"), 1))
    ]


def _replicaset_pods(
    template: Mapping[str, Any], spec: Mapping[str, Any], name: str, namespace: str
) -> list[Obj]:
    """A ReplicaSet's pods: ``<name>-<suffix>``, one per replica."""
    return [
        pod_from_template(template, name=f"{name}-{_suffix(f'{name}/{index}', 5)}", namespace=namespace)
        for index in range(_count(spec.get("replicas"), 1))
    ]


def _statefulset_pods(
    template: Mapping[str, Any], spec: Mapping[str, Any], name: str, namespace: str
) -> list[Obj]:
    """A StatefulSet's pods: ``<name>-<ordinal>`` with the labels and hostname its controller sets."""
    pods: list[Obj] = []
    for ordinal in range(_count(spec.get("replicas"), 1)):
        pod_name = f"{name}-{ordinal}"
        pod = pod_from_template(
            template,
            name=pod_name,
            namespace=namespace,
            labels={
                "statefulset.kubernetes.io/pod-name": pod_name,
                "apps.kubernetes.io/pod-index": str(ordinal),
            },
        )
        pod["spec"].setdefault("hostname", pod_name)
        pods.append(pod)
    return pods


def _job_pods(template: Mapping[str, Any], spec: Mapping[str, Any], name: str, namespace: str) -> list[Obj]:
    """A batch Job's first wave: min(parallelism, completions) pods, labelled with the job's name."""
    completions = _count(spec.get("completions"), 1)
    parallelism = _count(spec.get("parallelism"), 1)
    return [
        pod_from_template(
            template,
            name=f"{name}-{_suffix(f'{name}/{index}', 5)}",
            namespace=namespace,
            labels={"job-name": name, "batch.kubernetes.io/job-name": name},
        )
        for index in range(min(parallelism, completions))
    ]


_PODS_BY_KIND = {
    "Deployment": _deployment_pods,
    "ReplicaSet": _replicaset_pods,
    "StatefulSet": _statefulset_pods,
}
