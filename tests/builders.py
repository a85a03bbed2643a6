"""Typed builders for the objects tests feed the engine: nodes with registrations, pods, views."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vgpu_guard.configfile import load_config
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig

A30 = "NVIDIA-NVIDIA A30"
A100_40 = "NVIDIA-NVIDIA A100-SXM4-40GB"
A100_80 = "NVIDIA-NVIDIA A100-SXM4-80GB"

_DEFAULT: GuardConfig | None = None


def default_config() -> GuardConfig:
    """The plugin's default device config (seed 003) and our defaults, ignoring the environment."""
    global _DEFAULT  # noqa: PLW0603 - cache one immutable value
    if _DEFAULT is None:
        _DEFAULT = load_config(env={})
    return _DEFAULT


def config_with(**sections: Mapping[str, Any]) -> GuardConfig:
    """Default config with some sections replaced (camelCase keys as users write them)."""

    def merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(base)
        for key, value in extra.items():
            out[key] = (
                merge(out.get(key) or {}, value) if isinstance(value, Mapping) and key != "rules" else value
            )
        return out

    return GuardConfig.model_validate(
        merge(default_config().model_dump(by_alias=True, mode="json"), sections)
    )


def register(gpus: Sequence[tuple[str, int, int, str, str]]) -> str:
    """The register annotation for (uuid, split, memory, type, mode) records."""
    return "".join(f"{u},{c},{m},{t},true,{mode}:" for u, c, m, t, mode in gpus)


def gpu_node(
    name: str,
    *,
    count: int = 4,
    memory: int = 24576,
    card_type: str = A30,
    mode: str = "hami-core",
    split: int = 10,
    ready: bool = True,
    unschedulable: bool = False,
    labels: Mapping[str, str] | None = None,
    cpu: str = "64",
    registration: str | None = None,
) -> dict[str, Any]:
    gpus = [(f"GPU-{name}-{i}", split, memory, card_type, mode) for i in range(count)]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": dict(labels or {}),
            "annotations": {
                "volcano.sh/node-vgpu-register": registration if registration is not None else register(gpus)
            },
        },
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "allocatable": {
                "cpu": cpu,
                "memory": "256Gi",
                "pods": "110",
                "volcano.sh/vgpu-number": str(count * split),
                "volcano.sh/vgpu-memory": str(count * memory),
                "volcano.sh/vgpu-cores": str(count * 100),
            },
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def view_of(nodes: Iterable[Mapping[str, Any]], config: GuardConfig | None = None, **kw: Any) -> ClusterView:
    return ClusterView.from_objects(list(nodes), config or default_config(), **kw)


def pod(
    limits: Mapping[str, Any] | None = None,
    *,
    name: str = "gpu-pod",
    annotations: Mapping[str, str] | None = None,
    requests: Mapping[str, Any] | None = None,
    containers: Sequence[Mapping[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Pod with one container ``cuda`` carrying ``limits``/``requests`` (or the given containers)."""
    if containers is None:
        resources: dict[str, Any] = {}
        if limits is not None:
            resources["limits"] = dict(limits)
        if requests is not None:
            resources["requests"] = dict(requests)
        containers = [
            {"name": "cuda", "image": "nvidia/cuda:12.4.0-base-ubuntu22.04", "resources": resources}
        ]
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": copy.deepcopy(list(containers)), **spec},
    }


def mutate(obj: Mapping[str, Any], view: ClusterView, config: GuardConfig | None = None) -> Any:
    """The mutating webhook's decision for a pod CREATE (object, patch, warnings)."""
    from vgpu_guard.engine.admission import decide, request_for

    return decide(request_for(obj, username="alice"), view, config or default_config(), phase="mutate")
