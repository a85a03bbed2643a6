"""The double stays the size of what users run (issue 45): at most 7,000 product lines.

Counted as the non-blank lines of every ``vgpu_guard/apidouble/**/*.py`` (comments and docstrings
count, blank lines do not); docs/apidouble.md states the count and why it is counted so. What only
tests need (RBAC, fault plans, other identities' tokens) lives in tests/apidouble_support/, and
tests/test_layering.py checks that no product module is imported by tests only.
"""

from __future__ import annotations

from pathlib import Path

DOUBLE = Path(__file__).resolve().parents[2] / "vgpu_guard" / "apidouble"
BOUND = 7_000


def product_lines(root: Path = DOUBLE) -> int:
    """Non-blank lines of the Python files under ``root``."""
    return sum(
        sum(1 for line in path.read_text("utf-8").splitlines() if line.strip())
        for path in sorted(root.rglob("*.py"))
    )


def test_the_double_keeps_at_most_7000_product_lines() -> None:
    lines = product_lines()
    assert lines <= BOUND, (
        f"the API double has {lines:,} non-blank lines of Python, over {BOUND:,}: move what only tests "
        "use to tests/apidouble_support/, or fold what it repeats (docs/apidouble.md)"
    )


def test_the_count_skips_blank_lines_only(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "a.py").write_text('"""Doc."""\n\n# a comment\nx = 1\n   \n')
    (tmp_path / "pkg" / "b.py").write_text("y = 2\n\n\nz = 3")
    (tmp_path / "notes.txt").write_text("not python\n")
    assert product_lines(tmp_path) == 5
