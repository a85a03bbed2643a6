"""``vgpu-guard simulate`` on its built-in scenario, byte for byte (issue 37: refactors keep it).

The same process users run (``python -m vgpu_guard.cli.main``); ``UPDATE_GOLDEN=1`` rewrites the
files instead of comparing, and the diff is then reviewed like code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"
CASES = {
    "simulate-default.txt": [],
    "simulate-default-v.txt": ["-v"],
    "simulate-default.json": ["-o", "json"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_simulate_default_output_is_unchanged(name: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "vgpu_guard.cli.main", "simulate", *CASES[name]],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(run.stdout)
        return
    assert run.stdout == path.read_text(), f"simulate {' '.join(CASES[name])} differs from {path}"
