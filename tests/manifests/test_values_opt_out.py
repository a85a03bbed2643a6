"""The chart's values describe the namespaceSelector it generates: a label can only opt a namespace
in (scope namespaceOptIn), none opts one out (issue 22; tests/manifests/test_chart_policy.py checks
the rendered selectors), so no setting may promise an opt-out label."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.manifests.chart import CHART

ROOT = CHART.parents[2]

# Any mention of a label that takes a namespace out, unless it says there is none.
_OPT_OUT = re.compile(r"opt-out|opts? (?:a |the )?namespaces? out", re.IGNORECASE)
_DENIED = re.compile(r"\bno (?:namespace )?label opts? (?:a |the )?namespaces? out", re.IGNORECASE)


def _claims(text: str) -> list[str]:
    # values.yaml wraps its comments: judge each comment paragraph as one sentence stream.
    joined = re.sub(r"\n\s*#\s*", " ", text)
    return [m.group(0) for m in _OPT_OUT.finditer(_DENIED.sub("", joined))]


@pytest.mark.parametrize(
    "path",
    [CHART / "values.yaml", CHART / "README.md", ROOT / "docs" / "install.md", ROOT / "docs" / "runbook.md",
     ROOT / "README.md"],
    ids=lambda p: str(p.relative_to(ROOT)),
)  # fmt: skip
def test_no_value_or_doc_promises_an_opt_out_label(path: Path) -> None:
    assert _claims(path.read_text()) == []


def test_the_check_finds_a_promise_and_passes_a_denial() -> None:
    assert _claims("# excluded namespaces + opt-out label") == ["opt-out"]
    assert _claims("# No label opts a namespace out (whoever could\n  # set it could forge)") == []
