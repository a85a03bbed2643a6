"""The controller's work, keyed by node: a node whose GPULedger write failed waits for its retry.

The pattern is client-go's rate-limited workqueue: a failed write ``add_rate_limited``s its node
(the delay from the process's one retry policy, kube/backoff.py, keyed by node), a write of that
node that succeeds ``forget``s it, and a node that is gone is ``drop``ped. Only the failing node
waits (issue 36: one forged pod used to stop every placement for 50 s; issue 44: one node's
trouble costs that node): no new pod is placed on it until its retry is due, the pods decided for
it go back to the scheduling queue and are placed elsewhere if they fit, and every other node's
writes and bindings go on in the same pass. A 409 is not a failure and does not queue the node:
someone else wrote first, and that node's work alone is decided again from the next read
(controller/node_writes.py ``NodeConflicts``); a gang decided across nodes stays the one case a
pass ends for.

The run loop asks ``next_due`` when to pass again, so a held node is retried when its wait ends,
not at the next poll. Times are the controller's clock (tests move a fake one); a clock that
jumps back cannot stretch a wait past the policy's maximum.
"""

from __future__ import annotations

from dataclasses import dataclass

from vgpu_guard.kube.backoff import Backoff
from vgpu_guard.kube.errors import Forbidden, Invalid, KubeError, NotFound, Unavailable

__all__ = ["FAILURE_REASONS", "NodeQueue", "Unwritable", "failure_reason"]

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


class NodeQueue:
    """Nodes waiting for a retry of their ledger write (no I/O: the controller says what happened).

    ``base`` is the first wait, doubled per failure in a row up to ``cap``; without jitter, so the
    wait an Event on the Node announces is the wait.
    """

    def __init__(self, *, base: float, cap: float) -> None:
        self.backoff = Backoff(initial=base, maximum=max(cap, base), jitter=0.0)
        self._nodes: dict[str, Unwritable] = {}

    @property
    def cap(self) -> float:
        return self.backoff.maximum

    def add_rate_limited(self, node: str, error: KubeError, now: float) -> Unwritable:
        """A write of ``node``'s ledger failed (not a conflict): hold it until its next try."""
        wait = self.backoff.next(node)
        state = Unwritable(str(error), failure_reason(error), self.backoff.attempts(node), now + wait)
        self._nodes[node] = state
        return state

    def forget(self, node: str) -> Unwritable | None:
        """A write of ``node``'s ledger succeeded; returns what it recovered from (None: nothing)."""
        self.backoff.reset(node)
        return self._nodes.pop(node, None)

    def drop(self, node: str) -> None:
        """The node is gone: nothing to retry."""
        self.forget(node)

    def held(self, now: float) -> dict[str, str]:
        """Nodes still waiting for their retry (node -> the error), as the allocator holds them."""
        return {node: s.error for node, s in self._nodes.items() if not self._due(s, now)}

    def blocked(self, node: str, now: float) -> bool:
        state = self._nodes.get(node)
        return state is not None and not self._due(state, now)

    def next_due(self, now: float) -> float | None:
        """Seconds until the first held node's retry is due (None: no node is held)."""
        waits = [s.retry_in(now) for s in self._nodes.values() if not self._due(s, now)]
        return min(waits) if waits else None

    def state(self, node: str) -> Unwritable | None:
        return self._nodes.get(node)

    def _due(self, state: Unwritable, now: float) -> bool:
        # A clock that jumped back would leave retry_at far ahead: never wait longer than cap.
        return now >= state.retry_at or state.retry_at - now > self.cap
