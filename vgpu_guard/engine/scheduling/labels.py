"""Label selectors as the API server and kube-scheduler read them (metav1.LabelSelectorAsSelector).

A missing selector (None) matches nothing; an empty one ({}) matches everything; requirements are
ANDed. Operators In, NotIn, Exists, DoesNotExist; an unknown operator matches nothing (the API
server would have refused it, so it can only come from a file).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_guard.engine.untrusted import as_list, as_mapping

__all__ = ["LabelSelector", "parse_selector", "selector_matches"]


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        if self.operator == "DoesNotExist":
            return value is None
        return False


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


def parse_selector(raw: Any) -> LabelSelector | None:
    """The selector, or None (matches nothing) when ``raw`` is absent or not a mapping."""
    if not isinstance(raw, Mapping):
        return None
    requirements = [
        Requirement(str(k), "In", frozenset({str(v)})) for k, v in as_mapping(raw.get("matchLabels")).items()
    ]
    for item in as_list(raw.get("matchExpressions")):
        expression = as_mapping(item)
        values = frozenset(str(v) for v in as_list(expression.get("values")))
        requirements.append(
            Requirement(str(expression.get("key") or ""), str(expression.get("operator") or ""), values)
        )
    return LabelSelector(tuple(requirements))


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    return selector is not None and selector.matches(labels)
