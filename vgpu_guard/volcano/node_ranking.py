"""The session's nodes ranked for one kind of task, kept as the session's cards change.

allocate.go judges every node for every task (predicates, then deviceshare's fit and score) and
takes the best. Judged that way, a session of P tasks over N nodes costs P x N fits: 3,000 pods
on 1,000 nodes were 3 million fits, most of ``simulate``'s time at that size (issue 45). But a
node's verdict for a task depends only on the node (its labels, taints, cards) and on what the
task asks (its constraints and vGPU request: ``task_kind``), and within a session only the node a
task was just placed on (or a discarded task left) changes. So each kind of task keeps every
node's verdict and a heap of the fitting nodes by (score, name): a task takes the top of its
kind's heap, and a placement judges again only the node it changed, once per kind. The choice is
Volcano's as the model states it (the highest score, then the first name), with N + P fits.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from vgpu_guard.volcano.device_cache import NodeDevices
from vgpu_guard.volcano.deviceshare import Fit

__all__ = ["NodeRanking", "Verdict"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """One node for one kind of task: why it is refused, or its score and the fit on a copy of its
    cards (``trial``, what the session's cards become if the task is placed there)."""

    reason: str | None
    score: int = 0
    trial: NodeDevices | None = None
    fit: Fit | None = None


class NodeRanking:
    """Every node's verdict for one kind of task, and the fitting nodes by score then name."""

    def __init__(self, judge: Callable[[str], Verdict], names: Iterable[str]) -> None:
        self._judge = judge
        self.verdicts: dict[str, Verdict] = {}
        self.reasons: Counter[str] = Counter()  # how many nodes refuse for each reason
        # (-score, name) of fitting nodes; an entry whose node was judged again since is skipped.
        self._heap: list[tuple[int, str]] = []
        for name in names:
            self.judge_again(name)

    def judge_again(self, name: str) -> None:
        """The node's cards changed (or it is new): its verdict is taken afresh."""
        old = self.verdicts.get(name)
        if old is not None and old.reason is not None:
            self.reasons[old.reason] -= 1
            if not self.reasons[old.reason]:
                del self.reasons[old.reason]
        verdict = self.verdicts[name] = self._judge(name)
        if verdict.reason is not None:
            self.reasons[verdict.reason] += 1
        else:
            heapq.heappush(self._heap, (-verdict.score, name))

    def best(self) -> str | None:
        """The fitting node with the highest score, the first by name among equals; None if none fits."""
        heap = self._heap
        while heap:
            negative, name = heap[0]
            verdict = self.verdicts[name]
            if verdict.reason is None and verdict.score == -negative:
                return name
            heapq.heappop(heap)  # judged again since it was pushed
        return None
