"""Nodes whose GPULedger the API server refuses to take: held out of placement, retried with backoff.

Why per node: a pass writes the ledgers of every node it changed at once, and one write that
fails for a reason of that one object (a value the CRD schema refuses, an admission webhook that
denies it, a 500 for that object) used to fail the whole pass, so no node got a decision or a
binding until the object was fixed (issue 36: one forged pod stopped every placement for 50 s).
Now the failing node alone is held: no new pod is placed on it until its retry is due, the pods
decided for it go back to the queue and are placed elsewhere if they fit, and every other node's
writes and bindings go on in the same pass. A 409 is not a failure here: it means someone else
wrote first, and the pass decides again from fresh state as before.

The wait doubles from ``base`` up to ``cap`` with each failure in a row and starts over after a
write of that node succeeds. Times are the controller's clock (tests move a fake one); a clock
that jumps back cannot stretch a wait past ``cap``.
"""

from __future__ import annotations

from dataclasses import dataclass

from vgpu_guard.kube.errors import Forbidden, Invalid, KubeError, NotFound, Unavailable

__all__ = ["FAILURE_REASONS", "Unwritable", "UnwritableNodes", "failure_reason"]

# The ``reason`` label of vgpu_guard_ledger_write_failures_total: a fixed set, so a pass cannot
# mint series from error texts.
FAILURE_REASONS = ("invalid", "forbidden", "not-found", "unavailable", "other")


def failure_reason(error: KubeError) -> str:
    """The label for a failed ledger write: 422 schema, 403 webhook or RBAC, 404, 5xx/timeout, other."""
    if isinstance(error, Invalid) or error.code == 422:
        return "invalid"
    if isinstance(error, Forbidden) or error.code == 403:
        return "forbidden"
    if isinstance(error, NotFound):
        return "not-found"
    if isinstance(error, Unavailable) or error.code >= 500:
        return "unavailable"
    return "other"


@dataclass(frozen=True, slots=True)
class Unwritable:
    """One node's last failed write: the error's text and label, failures in a row, next try."""

    error: str
    reason: str
    failures: int
    retry_at: float

    def retry_in(self, now: float) -> float:
        return max(0.0, self.retry_at - now)


class UnwritableNodes:
    """Per-node backoff of ledger writes (no I/O: the controller tells it what happened)."""

    def __init__(self, *, base: float, cap: float) -> None:
        self.base = base
        self.cap = max(cap, base)
        self._nodes: dict[str, Unwritable] = {}

    def failed(self, node: str, error: KubeError, now: float) -> Unwritable:
        """A write of ``node``'s ledger failed (not a conflict): hold it for the next wait."""
        before = self._nodes.get(node)
        failures = before.failures + 1 if before is not None else 1
        wait = min(self.cap, self.base * 2 ** min(failures - 1, 32))
        state = Unwritable(str(error), failure_reason(error), failures, now + wait)
        self._nodes[node] = state
        return state

    def written(self, node: str) -> Unwritable | None:
        """A write of ``node``'s ledger succeeded; returns what it recovered from (None: nothing)."""
        return self._nodes.pop(node, None)

    def forget(self, node: str) -> None:
        """The node is gone: nothing to retry."""
        self._nodes.pop(node, None)

    def held(self, now: float) -> dict[str, str]:
        """Nodes still waiting for their retry (node -> the error), as the allocator holds them."""
        return {node: s.error for node, s in self._nodes.items() if not self._due(s, now)}

    def blocked(self, node: str, now: float) -> bool:
        state = self._nodes.get(node)
        return state is not None and not self._due(state, now)

    def next_retry(self, now: float) -> float | None:
        """Seconds until the first held node's retry is due (None: no node is held)."""
        waits = [s.retry_in(now) for s in self._nodes.values() if not self._due(s, now)]
        return min(waits) if waits else None

    def state(self, node: str) -> Unwritable | None:
        return self._nodes.get(node)

    def _due(self, state: Unwritable, now: float) -> bool:
        # A clock that jumped back would leave retry_at far ahead: never wait longer than cap.
        return now >= state.retry_at or state.retry_at - now > self.cap
