"""The derived summary a GPULedger carries for operators: which GPU of a node is full.

``kubectl get gpuledgers`` can only print fields stored in the object, so every ledger write also
stores ``spec.summary``: per GPU the memory reserved against what the device plugin registered,
cores, pods, vGPUs and MIG instances, and node totals for the printer columns. It is computed here,
from the entries and the node's registration, on every write, and never read back: the entries
stay the only truth (``decode_ledger`` ignores the summary), so a hand-edited or stale summary can
mislead a reader of ``kubectl get`` until the next write but can never change a decision.

In the object each GPU is one line of text (issue 44: eight typed GPU objects were most of what a
small ledger's write cost the API server), with the same names the JSON of ``vgpu-guard status``
uses (``summary_fields``), e.g. ``GPU-8f1c... index=0 memoryMiB=12288/24576 memoryPercent=50
coresPercent=0 pods=1 vGPUs=1 full``; the node totals stay typed integers, for the columns.

Why ``spec`` and not ``status``: the CRD has no status subresource, and adding one would split
the ledger into two writes (the body, then /status) with a window in which they disagree; one
compare-and-swap write of the whole object keeps the summary exactly as fresh as the entries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from vgpu_guard.engine.cluster import NodeInfo
from vgpu_guard.engine.ledger import MAX_CORES, GpuUsage, NodeLedger, gpu_usage

__all__ = ["GpuSummary", "fullest", "gpu_summaries", "gpu_text", "ledger_summary", "summary_fields"]


@dataclass(frozen=True, slots=True)
class GpuSummary:
    """One GPU: what the ledger reserves on it and, when the node registers it, its capacity.

    ``registered_mib`` is None for a uuid the ledger holds but the node does not register (the card
    vanished or the node re-registered): its fullness cannot be judged.
    """

    uuid: str
    index: int | None
    memory_mib: int
    registered_mib: int | None
    cores: int
    pods: int
    vgpus: int
    split_count: int | None
    mig_instances: int

    @property
    def memory_percent(self) -> int | None:
        """Reserved memory in whole percent of the card, rounded down (100 means nothing is left)."""
        if self.registered_mib is None:
            return None
        if self.registered_mib <= 0:
            return 100 if self.memory_mib > 0 else 0
        return self.memory_mib * 100 // self.registered_mib

    @property
    def free_mib(self) -> int | None:
        return None if self.registered_mib is None else max(0, self.registered_mib - self.memory_mib)

    @property
    def full(self) -> bool:
        """No further vGPU fits: no memory left, all cores reserved, or every split handed out."""
        if self.registered_mib is None or self.split_count is None:
            return False
        return (
            self.memory_mib >= self.registered_mib
            or self.cores >= MAX_CORES
            or self.vgpus >= self.split_count
        )


def _summary(
    uuid: str, u: GpuUsage | None, *, index: int | None, registered: int | None, split: int | None
) -> GpuSummary:
    u = u or GpuUsage()
    return GpuSummary(
        uuid=uuid,
        index=index,
        memory_mib=u.memory,
        registered_mib=registered,
        cores=u.cores,
        pods=len(set(u.pods)),
        vgpus=u.grants,
        split_count=split,
        mig_instances=len(u.mig),
    )


def gpu_summaries(ledger: NodeLedger, node: NodeInfo | None, *, memory_factor: int = 1) -> list[GpuSummary]:
    """Every registered GPU in device order (idle ones too), then held but unregistered uuids."""
    usage = gpu_usage(ledger.allocations.values())
    out: list[GpuSummary] = []
    registered: set[str] = set()
    for gpu in sorted(node.gpus if node is not None else (), key=lambda g: (g.index, g.uuid)):
        registered.add(gpu.uuid)
        out.append(
            _summary(
                gpu.uuid,
                usage.get(gpu.uuid),
                index=gpu.index,
                registered=gpu.memory * memory_factor,
                split=gpu.split_count,
            )
        )
    for uuid in sorted(set(usage) - registered):
        out.append(_summary(uuid, usage[uuid], index=None, registered=None, split=None))
    return out


def fullest(gpus: Iterable[GpuSummary]) -> GpuSummary | None:
    """The registered GPU with the most memory reserved (percent), then cores; None without any.

    The lowest index wins a tie, so the column does not flip between equal cards from write to write.
    """
    cards = [g for g in gpus if g.registered_mib is not None]
    return min(cards, key=lambda g: (-(g.memory_percent or 0), -g.cores, g.index or 0), default=None)


def _encode_gpu(g: GpuSummary) -> dict[str, Any]:
    out: dict[str, Any] = {"uuid": g.uuid}
    if g.index is not None:
        out["index"] = g.index
    out |= {"memoryMiB": g.memory_mib}
    if g.registered_mib is not None:
        out |= {"registeredMemoryMiB": g.registered_mib, "memoryPercent": g.memory_percent}
    out |= {"coresPercent": g.cores, "pods": g.pods, "vGPUs": g.vgpus, "migInstances": g.mig_instances}
    if g.registered_mib is None:
        out["registered"] = False
    else:
        out["full"] = g.full
    return out


def gpu_text(g: GpuSummary) -> str:
    """One GPU as ``spec.summary.perGPU`` writes it: its uuid, then ``key=value`` words with the
    names of ``summary_fields``' objects (MiB reserved/registered in one word; MIG instances only
    when there are some), then ``full`` or ``unregistered``. Written for readers, never parsed."""
    words = [g.uuid]
    if g.index is not None:
        words.append(f"index={g.index}")
    if g.registered_mib is None:
        words.append(f"memoryMiB={g.memory_mib}")
    else:
        words += [f"memoryMiB={g.memory_mib}/{g.registered_mib}", f"memoryPercent={g.memory_percent}"]
    words += [f"coresPercent={g.cores}", f"pods={g.pods}", f"vGPUs={g.vgpus}"]
    if g.mig_instances:
        words.append(f"migInstances={g.mig_instances}")
    if g.registered_mib is None:
        words.append("unregistered")
    elif g.full:
        words.append("full")
    return " ".join(words)


def ledger_summary(ledger: NodeLedger, node: NodeInfo | None, memory_factor: int = 1) -> dict[str, Any]:
    """``spec.summary`` of the ledger's object: node totals for the printer columns, and one line
    of text per GPU (``gpu_text``)."""
    return _node_summary(ledger, node, memory_factor, gpu_text)


def summary_fields(ledger: NodeLedger, node: NodeInfo | None, memory_factor: int = 1) -> dict[str, Any]:
    """The same summary with each GPU as an object of fields (``vgpu-guard status -o json``)."""
    return _node_summary(ledger, node, memory_factor, _encode_gpu)


def _node_summary(
    ledger: NodeLedger, node: NodeInfo | None, memory_factor: int, per_gpu: Callable[[GpuSummary], object]
) -> dict[str, Any]:
    """Node totals for the printer columns, and per GPU.

    ``node`` None (a ledger for a node that is gone or does not register GPUs): only what the
    entries say; the capacity fields are left out rather than shown as zero.
    """
    gpus = gpu_summaries(ledger, node, memory_factor=memory_factor)
    allocations = ledger.allocations.values()
    out: dict[str, Any] = {
        "pods": len(ledger.allocations),
        "devices": sum(1 for a in allocations for _ in a.grants()),
        "memoryMiB": sum(g.memory_mib for g in gpus),
        "migInstances": sum(g.mig_instances for g in gpus),
    }
    cards = [g for g in gpus if g.registered_mib is not None]
    if node is not None:
        out |= {
            "gpus": len(cards),
            "registeredMemoryMiB": sum(g.registered_mib or 0 for g in cards),
            "freeMemoryMiB": sum(g.free_mib or 0 for g in cards),
            "fullGPUs": sum(1 for g in cards if g.full),
        }
    top = fullest(gpus)
    if top is not None:
        out |= {"fullestGPU": top.uuid, "fullestGPUMemoryPercent": top.memory_percent}
    out["perGPU"] = [per_gpu(g) for g in gpus]
    return out
