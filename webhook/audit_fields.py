"""What an admission audit line says about why: each violation's rule, action, path and message.

Bounded, so one object with a thousand bad containers cannot make a megabyte log line: the first
``AUDITED_VIOLATIONS`` violations, each message clipped to ``MESSAGE_LIMIT`` characters, and how
many were left out. A denial that no rule's violation explains (cluster state unknown, the ledger
arbiter unavailable, an object too large) is reported as one entry with its message and no path.
"""

from __future__ import annotations

import re
from typing import Any

from vgpu_guard.engine.config import Action
from vgpu_guard.engine.decision import AdmissionDecision
from vgpu_guard.engine.violations import Violation, clip

__all__ = ["AUDITED_VIOLATIONS", "MESSAGE_LIMIT", "violation_fields"]

AUDITED_VIOLATIONS = 10
MESSAGE_LIMIT = 512

# "[rule] " at the start of a denial message built without a Violation.
_RULE_PREFIX = re.compile(r"^\[[a-z0-9-]+\] ")


def violation_fields(decision: AdmissionDecision) -> dict[str, Any]:
    """The ``violations`` and ``violations_omitted`` keys of the decision's audit line."""
    found = [_entry(decision, v) for v in decision.violations]
    if not found and not decision.allowed:
        found = [_unexplained(decision)]
    return {
        "violations": found[:AUDITED_VIOLATIONS],
        "violations_omitted": max(0, len(found) - AUDITED_VIOLATIONS),
    }


def _entry(decision: AdmissionDecision, violation: Violation) -> dict[str, str]:
    action = decision.actions.get(violation.rule)
    return {
        "rule": violation.rule,
        "action": str(action) if action is not None else "",
        "path": violation.path,
        "message": clip(violation.message, MESSAGE_LIMIT),
    }


def _unexplained(decision: AdmissionDecision) -> dict[str, str]:
    return {
        "rule": decision.rules[0] if decision.rules else "",
        "action": str(Action.ENFORCE),
        "path": "",
        "message": clip(_RULE_PREFIX.sub("", decision.message), MESSAGE_LIMIT),
    }
