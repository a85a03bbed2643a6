"""Annotation keys we read or write, named once."""

from __future__ import annotations

__all__ = [
    "ALLOCATION_ANNOTATIONS",
    "BIND_PHASE",
    "BIND_TIME",
    "DEVICES_TO_ALLOCATE",
    "MIG_PROFILE",
    "PODGROUP_POLICY",
    "PODGROUP_POLICY_SPREAD",
    "VGPU_IDS",
    "VGPU_MODE",
    "VGPU_NODE",
    "VGPU_TIME",
]

VGPU_MODE = "volcano.sh/vgpu-mode"
USE_GPUTYPE = "nvidia.com/use-gputype"
NOUSE_GPUTYPE = "nvidia.com/nouse-gputype"
USE_GPUUUID = "volcano.sh/vgpu-use-gpuuuid"
NOUSE_GPUUUID = "volcano.sh/vgpu-nouse-gpuuuid"
# Volcano (pkg/scheduler/api/devices/nvidia/vgpu/type.go): "spread" keeps this pod off every GPU
# that another member of its PodGroup already holds. Any other value, or none, means no such rule.
PODGROUP_POLICY = "volcano.sh/vgpu-podgroup-policy"
PODGROUP_POLICY_SPREAD = "spread"

# Written at allocation (by Volcano's deviceshare, or by our binder on the Binding object).
VGPU_NODE = "volcano.sh/vgpu-node"
VGPU_TIME = "volcano.sh/vgpu-time"
VGPU_IDS = "volcano.sh/vgpu-ids-new"
DEVICES_TO_ALLOCATE = "volcano.sh/devices-to-allocate"
BIND_PHASE = "volcano.sh/bind-phase"
BIND_TIME = "volcano.sh/bind-time"

# Ours. MIG_PROFILE is stamped by the mutating webhook (recomputed on every pass, so a user value
# is simply overwritten); ALLOCATION records which ledger entry backs a binding.
MIG_PROFILE = "vgpu-guard.io/mig-profile"
ALLOCATION = "vgpu-guard.io/allocation"

ALLOCATION_ANNOTATIONS: tuple[str, ...] = (
    VGPU_NODE,
    VGPU_TIME,
    VGPU_IDS,
    DEVICES_TO_ALLOCATE,
    BIND_PHASE,
    BIND_TIME,
    ALLOCATION,
)
