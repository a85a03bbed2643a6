"""Scenarios are named for the failure they show, never by an internal number ("seed 001"):
the README, the docs, the examples, the built-in scenario and what the CLI prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vgpu_guard.cli.app import build_parser, run

ROOT = Path(__file__).resolve().parents[2]
NUMBERED = re.compile(r"\bseeds?(?:\s+|[_-])?\d+", re.IGNORECASE)
SCANNED = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.*")),
    *sorted((ROOT / "examples").rglob("*")),
    *sorted((ROOT / "vgpu_guard" / "data" / "scenarios").rglob("*.yaml")),
]
EXAMPLE_NAMES = ["ib-gang.yaml", "mig.yaml", "overcommit.yaml", "priority.yaml", "queue-guarantees.yaml"]


def numbered(text: str) -> list[str]:
    """Each place that names a scenario by number, as `<line>: <match>`.

    The whole text is searched, not line by line, so a reflowed paragraph that leaves
    "seed" at the end of one line and the number at the start of the next is still caught;
    a match is reported at the line where it starts, with its whitespace collapsed.
    """
    return [
        f"{text.count(chr(10), 0, match.start()) + 1}: {' '.join(match.group().split())}"
        for match in NUMBERED.finditer(text)
    ]


def test_the_pattern_catches_what_users_used_to_see() -> None:
    old = "### Seed 000: x\nexamples/seed-001/queues.yaml\nSeeds 002 and 003\nseed_004\n"
    assert len(numbered(old)) == 4
    assert numbered("random seed: 20250609\nseeded names\n") == []


def test_the_pattern_catches_a_number_wrapped_onto_the_next_line() -> None:
    text = "title\nthe crash loop (`...`, seed\n001); newer versions\nSeed   \n   002\n"
    assert numbered(text) == ["2: seed 001", "4: Seed 002"]


@pytest.mark.parametrize("path", [p for p in SCANNED if p.is_file()], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_file_users_read_numbers_a_scenario(path: Path) -> None:
    assert numbered(path.name) == [], path
    assert [f"{path.relative_to(ROOT)}:{hit}" for hit in numbered(path.read_text(encoding="utf-8"))] == []


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
    assert commands is not None
    for name in ["", *commands]:
        with pytest.raises(SystemExit):
            run([name, "--help"] if name else ["--help"])
        assert numbered(capsys.readouterr().out) == [], name
