"""What an admission rule is given and what it answers: ``AdmissionRequest``, ``AdmissionDecision``.

A leaf below the rules and the router: ``engine.admission`` imports the rule modules to route
requests to them, and the rules build decisions; when these types lived in ``engine.admission`` the
two imported each other (rules dodged the circle with imports inside functions). The
``.importlinter`` contract ``admission-above-rules`` keeps it that way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from vgpu_guard.engine.config import Action, GuardConfig
from vgpu_guard.engine.violations import Violation, clip_warning, clip_warnings

__all__ = [
    "NOT_SYNCED",
    "AdmissionDecision",
    "AdmissionRequest",
    "Operation",
    "decision_from",
    "not_synced",
]

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]

NOT_SYNCED = (
    "[cluster-state-unknown] vgpu-guard has not finished reading {what} from the API server and will not "
    "decide on a partial view; retry in a few seconds"
)


@dataclass(frozen=True)
class AdmissionRequest:
    """The parts of an AdmissionReview request the rules read (decoded by the shell)."""

    kind: str
    group: str
    resource: str
    operation: Operation
    object: Mapping[str, Any] | None
    old_object: Mapping[str, Any] | None = None
    namespace: str = ""
    name: str = ""
    username: str = ""
    groups: tuple[str, ...] = ()
    uid: str = ""
    sub_resource: str = ""
    dry_run: bool = False


@dataclass(frozen=True)
class AdmissionDecision:
    """What to answer: allowed or denied (with code and message), warnings, patch, what fired."""

    allowed: bool
    code: int = 200
    message: str = ""
    warnings: tuple[str, ...] = ()
    patch: tuple[dict[str, Any], ...] = ()
    # Rule ids that fired at any action, and the audit-only findings (for the audit log).
    rules: tuple[str, ...] = ()
    audit: tuple[str, ...] = ()
    object: Mapping[str, Any] | None = None
    violations: tuple[Violation, ...] = field(default=(), repr=False)
    # The action each rule that fired was given, as decided: on a fleet that scales the capacity
    # rules default to warn (rules/fleet.py), so the configured action alone can be wrong.
    actions: Mapping[str, Action] = field(default_factory=dict, repr=False)
    # Objects the shell must create before answering (a gang's GangPlacement, on its first member).
    # A create that fails with AlreadyExists means another replica decided first: re-decide with
    # the existing object in the view. Not created on dry run.
    persist: tuple[Mapping[str, Any], ...] = ()


def decision_from(
    violations: list[Violation],
    config: GuardConfig,
    *,
    warnings: list[str] | None = None,
    patch: list[dict[str, Any]] | None = None,
    obj: Mapping[str, Any] | None = None,
) -> AdmissionDecision:
    """Turn violations into a decision by each rule's configured action (enforce/warn/audit)."""
    rules = tuple(dict.fromkeys(v.rule for v in violations))
    actions = {rule: config.action_for(rule) for rule in rules}
    denied = [v for v in violations if actions[v.rule] is Action.ENFORCE]
    warned = [clip_warning(v.render()) for v in violations if actions[v.rule] is Action.WARN]
    audited = [v.render() for v in violations if actions[v.rule] is Action.AUDIT]
    all_warnings = clip_warnings([*(warnings or []), *warned])
    if denied:
        return AdmissionDecision(
            allowed=False,
            code=403,
            message="\n".join(v.render() for v in denied),
            warnings=tuple(all_warnings),
            rules=rules,
            audit=tuple(audited),
            object=obj,
            violations=tuple(violations),
            actions=actions,
        )
    return AdmissionDecision(
        allowed=True,
        warnings=tuple(all_warnings),
        patch=tuple(patch or ()),
        rules=rules,
        audit=tuple(audited),
        object=obj,
        violations=tuple(violations),
        actions=actions,
    )


def not_synced(what: str) -> AdmissionDecision:
    """The retriable refusal while ``what`` is still being read: 503 reaches the client as
    ServiceUnavailable, so controllers retry it and kubectl shows the reason."""
    return AdmissionDecision(
        allowed=False, code=503, message=NOT_SYNCED.format(what=what), rules=("cluster-state-unknown",)
    )
