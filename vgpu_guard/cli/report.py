"""The rule-level report of ``review`` and ``simulate`` (``-o json|yaml``).

One result per finding: every violation a rule raised on an object (``deny``, ``warn`` or ``audit``,
as its decision applied it: the configured action, or warn for a capacity rule on a fleet that
scales) and every JSON-patch operation the mutation made
(``mutate``). CI reads ``rule``, ``path`` and ``action`` without parsing messages; the shape is
published in docs/review-report.schema.json. ``-o policyreport`` turns the same results into
``wgpolicyk8s.io/v1alpha2`` reports (policy_report.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from vgpu_guard.cli.admission_entries import CLUSTER_SCOPED
from vgpu_guard.engine.admission import ReviewResult
from vgpu_guard.engine.config import Action

__all__ = ["ACTIONS", "MUTATION_RULE", "rule_results", "summary"]

ACTIONS = ("deny", "warn", "audit", "mutate")
# Rule name of a mutation result: the webhook's mutation has no rule ids of its own.
MUTATION_RULE = "mutation"
_ACTION = {Action.ENFORCE: "deny", Action.WARN: "warn", Action.AUDIT: "audit"}


def _fix(message: str) -> str:
    # Messages end with their remedy after the last "; " (conventions: "<value> <why>; <remedy>").
    head, sep, tail = message.rpartition("; ")
    return tail if sep and head else ""


def _ref(source: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    kind = str(obj.get("kind") or "")
    namespace = "" if kind in CLUSTER_SCOPED else str(metadata.get("namespace") or "default")
    return {
        "source": source,
        "apiVersion": str(obj.get("apiVersion") or ""),
        "kind": kind,
        "namespace": namespace,
        "name": str(metadata.get("name") or metadata.get("generateName") or ""),
    }


def rule_results(reviewed: Iterable[tuple[str, ReviewResult]]) -> list[dict[str, Any]]:
    """One result per (object, rule, path): violations by the action their decision applied, then
    patch ops."""
    out: list[dict[str, Any]] = []
    for source, result in reviewed:
        ref = _ref(source, result.object)
        allowed = result.decision.allowed
        for v in result.decision.violations:
            out.append(
                {
                    **ref,
                    "allowed": allowed,
                    "rule": v.rule,
                    "path": v.path,
                    # As the decision applied it (a scaling fleet warns where the config denies).
                    "action": _ACTION[result.decision.actions[v.rule]],
                    "message": v.message,
                    "fix": _fix(v.message),
                }
            )
        for op in result.patch if allowed else ():
            value = op.get("value")
            shown = f" {value}" if isinstance(value, str | int | float) else ""
            out.append(
                {
                    **ref,
                    "allowed": allowed,
                    "rule": MUTATION_RULE,
                    "path": str(op.get("path", "")),
                    "action": "mutate",
                    "message": f"{op.get('op')} {op.get('path')}{shown}",
                    "fix": "",
                }
            )
    return out


def summary(objects: int, denied: int, results: list[dict[str, Any]]) -> dict[str, int]:
    """Counts: objects, allowed, denied, and results per action."""
    counts = {action: sum(1 for r in results if r["action"] == action) for action in ACTIONS}
    return {"objects": objects, "allowed": objects - denied, "denied": denied, **counts}
