"""What one controller pass did: the value ``run_once`` returns and each step adds to."""

from __future__ import annotations

from dataclasses import dataclass, field

from vgpu_guard.engine.objects import Obj

__all__ = ["PassResult", "Report"]

# (pod, message, PENDING_REASONS entry) for a pod that stays Pending.
Report = tuple[Obj, str, str]


@dataclass
class PassResult:
    """What one pass did; ``changed`` is False when the cluster was already settled."""

    bound: list[str] = field(default_factory=list)
    reserved: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    # Ledger entries raised to what their bound pod's assignment annotation says (verify pass).
    repaired: list[str] = field(default_factory=list)
    unschedulable: list[str] = field(default_factory=list)
    # GPULedgers deleted: their node is gone and they held no entry (controller/ledger_gc.py).
    ledgers_deleted: list[str] = field(default_factory=list)
    conflicts: int = 0
    errors: list[str] = field(default_factory=list)
    pending: int = 0

    @property
    def changed(self) -> bool:
        return bool(
            self.bound
            or self.reserved
            or self.released
            or self.adopted
            or self.repaired
            or self.ledgers_deleted
            or self.conflicts
        )
