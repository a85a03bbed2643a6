"""Rule families: the policies reports group our rules into, each with a category and a severity.

Why: Policy Reporter and Kyverno users read a PolicyReport by policy (one per concern, as Kyverno's
``require-requests-limits`` or ``disallow-privileged-containers``), filter by ``category`` and sort
by ``severity``. One policy named after the product would put a forged GPU assignment and a
missing ``spec.deserved`` in the same row. Each rule of the catalogue is in exactly one family
(tests/engine/test_families.py), so a new rule cannot reach a report without a policy.

Severity follows what the violation costs if it got through: ``high`` where a GPU is shared it
must not be (isolation, forged or overflowing assignments) or Volcano's scheduler crashes (queue
guarantees beyond capacity); ``medium`` where a pod cannot run or runs on other resources than
asked; the wgpolicyk8s.io/v1alpha2 schema knows only high, medium and low.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vgpu_guard.engine.rules.fleet import CAPACITY_RULES

__all__ = ["FAMILIES", "Family", "family_of"]

Severity = Literal["high", "medium", "low"]


@dataclass(frozen=True, slots=True)
class Family:
    """A policy of the reports: its name, category, severity, what it protects, and its rules."""

    policy: str
    category: str
    severity: Severity
    description: str
    rules: frozenset[str]


FAMILIES: tuple[Family, ...] = (
    Family(
        "vgpu-request-values",
        "vGPU requests",
        "medium",
        "vGPU resource values the device plugin and Volcano read as the user meant them",
        frozenset(
            {
                "vgpu-quantity",
                "vgpu-integer",
                "vgpu-memory-unit",
                "vgpu-request-limit-mismatch",
                "vgpu-cores-range",
                "vgpu-memory-percentage-range",
                "vgpu-mode-invalid",
            }
        ),
    ),
    Family(
        "vgpu-fleet-capacity",
        "GPU capacity",
        "medium",
        "vGPU requests some node of the fleet can hold",
        CAPACITY_RULES,
    ),
    Family(
        "vgpu-isolation",
        "vGPU isolation",
        "high",
        "containers that cannot escape or blur their vGPU slice",
        frozenset({"vgpu-privileged", "vgpu-multi-container"}),
    ),
    Family(
        "gpu-assignment-integrity",
        "GPU assignments",
        "high",
        "GPU assignments written only by the allocators, and only where the GPUs are free",
        frozenset({"allocation-annotations", "vgpu-assignment-capacity", "vgpu-prebound"}),
    ),
    Family(
        "volcano-queue-guarantees",
        "Volcano queues",
        "high",
        "queue guarantees Volcano's scheduler can honour",
        frozenset(
            {
                "queue-guarantee-capacity",
                "queue-guarantee-capability",
                "queue-deserved-range",
                "queue-deserved-missing",
                "queue-hierarchy",
                "queue-quantity",
            }
        ),
    ),
    Family(
        "ib-gang-placement",
        "Gang placement",
        "medium",
        "every pod of a gang in one InfiniBand cluster",
        frozenset({"ib-cluster"}),
    ),
)

_BY_RULE = {rule: family for family in FAMILIES for rule in family.rules}


def family_of(rule: str) -> Family | None:
    """The family of a catalogue rule; None for a decision that is no rule's (object-too-large)."""
    return _BY_RULE.get(rule)
