"""Every rule vgpu-guard applies, by id: what it protects and how users fix a violation.

The ids appear first in every denial (``[rule-id] field: value why; fix``), are the keys of
``admission.rules`` in the config (enforce | warn | audit), and label the audit log. README's rule
table is generated from this catalogue, so the documentation cannot drift from the code.

A module of the core, not of ``engine.rules``: the config validates ``admission.rules`` against it,
and the config sits below the rules (a rule reads the config; the config reads no rule).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RULES", "Rule"]


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    summary: str
    fix: str


RULES: dict[str, Rule] = {
    rule.id: rule
    for rule in (
        Rule("vgpu-quantity", "a vGPU resource value is not a Kubernetes quantity", "write a plain integer"),
        Rule("vgpu-integer", "vGPU resources are counted in whole units", "write a whole number, e.g. 2"),
        Rule(
            "vgpu-memory-unit",
            "vgpu-memory counts MiB (times gpuMemoryFactor); a byte suffix multiplies it by 2^30",
            "write the MiB number the error suggests, e.g. 12288 for 12Gi",
        ),
        Rule(
            "vgpu-request-limit-mismatch",
            "extended resources need equal requests and limits",
            "set the same value in requests and limits, or only in limits",
        ),
        Rule(
            "vgpu-number-range",
            "vgpu-number must be 1..the most GPUs any node has",
            "ask for fewer cards or add nodes with more GPUs",
        ),
        Rule(
            "vgpu-cores-range", "vgpu-cores is a percentage of one GPU (0..100)", "use a value from 0 to 100"
        ),
        Rule(
            "vgpu-memory-percentage-range",
            "vgpu-memory-percentage is a percentage (0..100)",
            "use a value from 0 to 100",
        ),
        Rule(
            "vgpu-memory-too-large",
            "no single card has that much memory",
            "ask for at most the largest card's memory, or more cards",
        ),
        Rule("vgpu-mode-invalid", "volcano.sh/vgpu-mode must be hami-core or mig", "use hami-core or mig"),
        Rule(
            "vgpu-mode-unavailable",
            "no node registers GPUs in the requested mode",
            "use a mode some node offers, or remove the annotation",
        ),
        Rule(
            "mig-no-profile",
            "no MIG geometry of any MIG card type can hold the request",
            "ask for at most the largest MIG profile, or use hami-core",
        ),
        Rule(
            "vgpu-privileged",
            "a privileged container sees every GPU and bypasses vGPU isolation",
            "drop privileged: true from containers that request vGPU",
        ),
        Rule(
            "vgpu-multi-container",
            "the device plugin cannot tell several vGPU containers of one pod apart",
            "request vGPU in one container, or split the pod",
        ),
        Rule(
            "allocation-annotations",
            "allocation annotations are written by the allocator and device plugin only, on any path",
            "leave them out of pods, updates, status writes and Bindings; the allocator sets them",
        ),
        Rule(
            "vgpu-assignment-capacity",
            "an assignment Volcano or the device plugin writes must fit the node's GPUs in the ledger",
            "none by hand: Volcano decides again next session; if it keeps failing, free GPUs or add nodes",
        ),
        Rule(
            "vgpu-prebound",
            "a vGPU pod created with spec.nodeName set skips the allocator, so its GPUs go unrecorded",
            "remove spec.nodeName; choose nodes with nodeSelector or affinity",
        ),
        Rule(
            "queue-guarantee-capacity",
            "queue guarantees must fit the cluster's capacity",
            "lower the guarantee or add nodes",
        ),
        Rule(
            "queue-guarantee-capability",
            "a queue cannot guarantee more than its capability",
            "lower spec.guarantee or raise spec.capability",
        ),
        Rule(
            "queue-deserved-range",
            "deserved must lie between guarantee and capability",
            "set deserved between the two",
        ),
        Rule(
            "queue-deserved-missing",
            "from Volcano 1.14 every guaranteed resource needs a deserved entry (queues.volcanoVersion)",
            "set spec.deserved for each resource in spec.guarantee.resource, at least as large",
        ),
        Rule(
            "queue-hierarchy",
            "children's guarantees must fit their parent's",
            "lower the children's guarantees or raise the parent's",
        ),
        Rule(
            "queue-quantity",
            "a queue resource value is not a Kubernetes quantity",
            "write e.g. 32, 500m or 64Gi",
        ),
        Rule(
            "ib-cluster",
            "all pods of a gang run in one InfiniBand cluster",
            "make room in one cluster, lower minMember, or remove a pin that contradicts the gang's cluster",
        ),
    )
}
