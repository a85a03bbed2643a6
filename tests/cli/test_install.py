"""The install a newcomer runs: the README's first command installs the runtime only, and
``review`` and ``simulate`` run on it. One extra: ``test`` (everything scripts/check runs)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
FIRST_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/vgpu-guard simulate"
# Import names of the test extra's packages, none of which the runtime may need.
NOT_RUNTIME = (
    "_pytest",
    "pytest",
    "pytest_asyncio",
    "pytest_timeout",
    "hypothesis",
    "trustme",
    "kubernetes_validate",
    "helm_python",
    "importlinter",
    "mypy",
    "celpy",
    "jsonpatch",
)
# Runs the CLI with every NOT_RUNTIME package unimportable, as in a runtime-only virtualenv.
_BLOCKED_RUN = """
import sys
blocked = set(sys.argv[1].split(","))

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (not installed: runtime only)")
        return None

sys.meta_path.insert(0, Block())
from vgpu_guard.cli.app import run
sys.exit(run(sys.argv[2:]))
"""


def _distribution(requirement: str) -> str:
    """``helm-python-sdk>=0.2.2`` -> ``helm-python-sdk``."""
    for mark in "<>=![; ":
        requirement = requirement.split(mark, maxsplit=1)[0]
    return requirement.lower()


def test_the_readmes_first_command_installs_the_runtime_only() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    assert first_block.splitlines() == [FIRST_COMMAND, "scripts/check"]


def test_dependencies_are_split_by_use() -> None:
    project = PYPROJECT["project"]
    runtime = {_distribution(r) for r in project["dependencies"]}
    extras = project["optional-dependencies"]
    assert set(extras) == {"test"}  # the sandbox needs nothing beyond the runtime
    test = {_distribution(r) for r in extras["test"]}
    assert {"cel-python", "helm-python-sdk", "pytest"} <= test
    assert not runtime & {"cel-python", "helm-python-sdk", "pytest", "hypothesis", "trustme", "mypy", "ruff"}
    assert "pip install -q -e '.[test]'" in (ROOT / "scripts" / "check").read_text(encoding="utf-8")


def _run_runtime_only(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCKED_RUN, ",".join(NOT_RUNTIME), *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_simulate_and_review_run_without_any_test_or_sandbox_package() -> None:
    simulated = _run_runtime_only("simulate", "-f", "examples/simulate/mig.yaml")
    assert simulated.returncode == 0, simulated.stderr
    assert simulated.stdout.startswith("vgpu-guard simulate: examples/simulate/mig.yaml on ")
    reviewed = _run_runtime_only("review", "-f", "examples/denials/pods.yaml", "-o", "json")
    assert reviewed.returncode == 1, reviewed.stderr
    assert '"denied": 3' in reviewed.stdout
