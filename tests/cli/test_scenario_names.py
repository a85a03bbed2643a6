"""Scenarios are named for the failure they show, never by an internal number ("seed 001"):
the README, the docs, the examples, the built-in scenario and what the CLI prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vgpu_guard.cli.app import build_parser, run

ROOT = Path(__file__).resolve().parents[2]
NUMBERED = re.compile(r"\bseeds?[ _-]?\d", re.IGNORECASE)
SCANNED = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.*")),
    *sorted((ROOT / "examples").rglob("*")),
    *sorted((ROOT / "vgpu_guard" / "data" / "scenarios").rglob("*.yaml")),
]
EXAMPLE_NAMES = ["ib-gang.yaml", "mig.yaml", "overcommit.yaml", "priority.yaml", "queue-guarantees.yaml"]


def numbered(text: str) -> list[str]:
    """Each line that names a scenario by number."""
    return [line.strip() for line in text.splitlines() if NUMBERED.search(line)]


def test_the_pattern_catches_what_users_used_to_see() -> None:
    old = "### Seed 000: x\nexamples/seed-001/queues.yaml\nSeeds 002 and 003\nseed_004\n"
    assert len(numbered(old)) == 4
    assert numbered("random seed: 20250609\nseeded names\n") == []


@pytest.mark.parametrize("path", [p for p in SCANNED if p.is_file()], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_file_users_read_numbers_a_scenario(path: Path) -> None:
    assert numbered(path.name) == [], path
    assert numbered(path.read_text(encoding="utf-8")) == []


def test_the_example_scenarios_are_named_for_their_failure() -> None:
    assert sorted(p.name for p in (ROOT / "examples" / "simulate").glob("*.yaml")) == EXAMPLE_NAMES
    assert sorted(p.name for p in (ROOT / "examples").iterdir() if p.is_dir()) == [
        "denials",
        "mig",
        "queue-guarantees",
        "simulate",
    ]


def test_simulate_prints_no_numbered_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["simulate"]) == 0
    out = capsys.readouterr().out
    assert numbered(out) == []
    for name in EXAMPLE_NAMES:
        assert f"examples/simulate/{name}#" in out


def test_no_help_text_numbers_a_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in ["", *commands]:
        with pytest.raises(SystemExit):
            run([name, "--help"] if name else ["--help"])
        assert numbered(capsys.readouterr().out) == [], name
