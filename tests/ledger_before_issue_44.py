"""GPULedgers as the release before issue 44 wrote and read them: one JSON object per entry and GPU.

``encode_ledger`` and ``decode_ledger`` are that release's (``engine/ledger.py`` at commit c53c8e7),
copied but for comments, so migration tests create exactly what an upgraded cluster holds and can
show what an old replica makes of a ledger this release wrote. The decoder calls today's per-entry
object readers, which are that release's plus the bounds its CRD enforced (index and MIG numbers).
Its CRD is tests/data/before_issue_44/gpuledgers.vgpu-guard.io.yaml. The summary it stored is
``summary_fields`` (each GPU an object), which is what that release's ``ledger_summary`` returned.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.ledger import (
    API_VERSION,
    KIND,
    Allocation,
    LedgerError,
    NodeLedger,
    _decode_allocation,
    _well_formed_allocation,
)
from vgpu_guard.engine.ledger_summary import summary_fields

__all__ = ["OLD_CRD", "decode_ledger", "old_crd", "old_encoded_ledger"]

OLD_CRD = Path(__file__).resolve().parent / "data" / "before_issue_44" / "gpuledgers.vgpu-guard.io.yaml"


def old_crd() -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(OLD_CRD.read_text())
    return crd


def _encode_allocation(a: Allocation) -> dict[str, Any]:
    containers = []
    for c in a.containers:
        devices = []
        for d in c.devices:
            device: dict[str, Any] = {"uuid": d.uuid, "memoryMiB": d.memory, "cores": d.cores}
            if d.mig is not None:
                mig: dict[str, Any] = {
                    "group": d.mig.group,
                    "profile": d.mig.profile,
                    "position": d.mig.position,
                }
                if d.mig.start is not None and d.mig.size is not None:
                    mig |= {"start": d.mig.start, "size": d.mig.size}
                device["mig"] = mig
            devices.append(device)
        container: dict[str, Any] = {"index": c.index, "devices": devices}
        if c.name:
            container["name"] = c.name
        containers.append(container)
    out: dict[str, Any] = {
        "podUID": a.pod_uid,
        "namespace": a.namespace,
        "name": a.name,
        "reservedAt": a.reserved_at,
        "containers": containers,
    }
    if a.queue:
        out["queue"] = a.queue
    if a.group:
        out["podGroup"] = a.group
    if a.adopted:
        out["adopted"] = True
    if a.committed:
        out["committed"] = True
    if a.admitted:
        out["admitted"] = True
    return out


def encode_ledger(ledger: NodeLedger, summary: Mapping[str, Any] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": ledger.node, "labels": {"vgpu-guard.io/node": ledger.node}}
    if ledger.resource_version is not None:
        metadata["resourceVersion"] = ledger.resource_version
    allocations = sorted(ledger.allocations.values(), key=lambda a: (a.namespace, a.name, a.pod_uid))
    spec: dict[str, Any] = {
        "nodeName": ledger.node,
        "allocations": [_encode_allocation(a) for a in allocations],
    }
    if summary is not None:
        spec["summary"] = dict(summary)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def old_encoded_ledger(
    ledger: NodeLedger, node: NodeInfo | None = None, memory_factor: int = 1
) -> dict[str, Any]:
    """The object the release before issue 44 wrote for ``ledger`` (summary included)."""
    return encode_ledger(ledger, summary_fields(ledger, node, memory_factor))


def decode_ledger(obj: Mapping[str, Any]) -> NodeLedger:
    metadata = obj.get("metadata")
    spec = obj.get("spec")
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        raise LedgerError("GPULedger: metadata and spec must be objects")
    node = spec.get("nodeName") or metadata.get("name")
    if not isinstance(node, str) or not node:
        raise LedgerError("GPULedger: spec.nodeName is missing")
    name = metadata.get("name")
    if name is not None and name != node:
        raise LedgerError(f"GPULedger {name}: spec.nodeName {node!r} differs from the object's name")
    allocations: dict[str, Allocation] = {}
    raw_list = spec.get("allocations") or []
    if not isinstance(raw_list, list):
        raise LedgerError(f"GPULedger {node}: spec.allocations must be a list")
    for i, raw in enumerate(raw_list):
        allocation = _well_formed_allocation(raw) or _decode_allocation(
            raw, f"GPULedger {node}: spec.allocations[{i}]"
        )
        if allocation.pod_uid in allocations:
            raise LedgerError(f"GPULedger {node}: pod uid {allocation.pod_uid} appears twice")
        allocations[allocation.pod_uid] = allocation
    rv = metadata.get("resourceVersion")
    return NodeLedger(node=node, allocations=allocations, resource_version=str(rv) if rv else None)
