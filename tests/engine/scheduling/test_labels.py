"""Label selectors as metav1.LabelSelectorAsSelector reads them (scheduling/labels.py)."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_guard.engine.scheduling.labels import LabelSelector, Requirement, parse_selector, selector_matches

WEB = {"app": "web", "tier": "front"}


def matches(raw: Any, labels: dict[str, str]) -> bool:
    return selector_matches(parse_selector(raw), labels)


@pytest.mark.parametrize("raw", [None, "app=web", ["app"], 3])
def test_an_absent_or_unreadable_selector_matches_nothing(raw: Any) -> None:
    assert parse_selector(raw) is None
    assert not matches(raw, WEB)
    assert not matches(raw, {})


def test_an_empty_selector_matches_everything() -> None:
    assert parse_selector({}) == LabelSelector(())
    assert matches({}, WEB)
    assert matches({}, {})
    assert matches({"matchLabels": {}, "matchExpressions": []}, {})


def test_match_labels_need_every_pair() -> None:
    assert matches({"matchLabels": {"app": "web"}}, WEB)
    assert matches({"matchLabels": WEB}, WEB)
    assert not matches({"matchLabels": {"app": "web", "tier": "back"}}, WEB)
    assert not matches({"matchLabels": {"app": "web"}}, {"tier": "front"})


def expression(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


@pytest.mark.parametrize(
    ("raw", "labels", "want"),
    [
        (expression("app", "In", "web", "api"), WEB, True),
        (expression("app", "In", "api"), WEB, False),
        (expression("app", "In", "web"), {}, False),
        (expression("app", "NotIn", "api"), WEB, True),
        (expression("app", "NotIn", "web"), WEB, False),
        (expression("app", "NotIn", "web"), {}, True),  # a missing key is "not in"
        (expression("app", "Exists"), WEB, True),
        (expression("app", "Exists"), {"app": ""}, True),
        (expression("app", "Exists"), {}, False),
        (expression("app", "DoesNotExist"), {}, True),
        (expression("app", "DoesNotExist"), WEB, False),
        (expression("app", "Gt", "1"), {"app": "2"}, False),  # node selector operators only
        (expression("app", "Equals", "web"), WEB, False),  # unknown operators match nothing
    ],
)
def test_match_expressions(raw: dict[str, Any], labels: dict[str, str], want: bool) -> None:
    assert matches(raw, labels) is want


def test_requirements_are_anded_across_match_labels_and_match_expressions() -> None:
    raw = {
        "matchLabels": {"app": "web"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["front", "edge"]},
            {"key": "canary", "operator": "DoesNotExist"},
        ],
    }
    assert matches(raw, WEB)
    assert not matches(raw, {**WEB, "canary": "true"})
    assert not matches(raw, {**WEB, "tier": "back"})
    assert not matches(raw, {"tier": "front"})


def test_values_are_compared_as_strings() -> None:
    assert matches({"matchLabels": {"replicas": 3}}, {"replicas": "3"})
    assert matches(expression("gen", "In", "2"), {"gen": "2"})


def test_parsed_form() -> None:
    parsed = parse_selector(
        {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "x", "operator": "Exists"}]}
    )
    assert parsed == LabelSelector(
        (Requirement("app", "In", frozenset({"web"})), Requirement("x", "Exists", frozenset()))
    )


def test_an_expression_without_a_key_matches_no_labels() -> None:
    assert not matches({"matchExpressions": [{"operator": "Exists"}]}, WEB)
