"""Documentation that users copy from must match the code: the README's rule table and commands."""

from __future__ import annotations

import re
from pathlib import Path

from vgpu_guard.engine.rule_catalog import RULES

ROOT = Path(__file__).resolve().parents[1]


def test_readme_rule_table_matches_the_catalogue() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("<!-- rules-table")[1].split("<!-- /rules-table -->")[0]
    rows = re.findall(r"^\| `([a-z0-9-]+)` \| (.+?) \| (.+?) \|$", table, flags=re.MULTILINE)
    assert rows == [(r.id, r.summary, r.fix) for r in RULES.values()]


def test_ci_runs_the_readmes_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(first_block) == 2
    ci = [
        line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line and not line.startswith(("#", "set ", "cd "))
    ]
    assert ci == [first_block[1]]
