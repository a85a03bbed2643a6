"""What scripts/check (= CI) prints: progress while a long test runs (scripts/pytest_heartbeat.py),
no banners or notes from the tools around it."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
CHECK = (ROOT / "scripts" / "check").read_text(encoding="utf-8")


def _plugin() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "pytest_heartbeat", ROOT / "scripts" / "pytest_heartbeat.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _drain(fd: int) -> str:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 65536).decode()
    except BlockingIOError:
        return ""


def test_the_line_names_the_test_and_its_time() -> None:
    assert _plugin().still_running("tests/reliability/test_x.py::test_y", 61.4) == (
        "\n  ... still running tests/reliability/test_x.py::test_y (61 s)\n"
    )


def test_a_long_test_gets_lines_and_a_short_one_none() -> None:
    plugin = _plugin()
    read, write = os.pipe()
    try:
        beat = plugin.Heartbeat(interval=0.05, fd=write)
        beat.start("tests/slow.py::test_long")
        time.sleep(0.18)
        beat.stop()
        lines = [line for line in _drain(read).splitlines() if line]
        assert len(lines) >= 2
        assert all(line.startswith("  ... still running tests/slow.py::test_long (") for line in lines)
        beat = plugin.Heartbeat(interval=5.0, fd=write)
        beat.start("tests/fast.py::test_short")
        beat.stop()
        assert _drain(read) == ""
    finally:
        os.close(read)
        os.close(write)


def test_check_loads_the_heartbeat_and_silences_the_banners() -> None:
    assert "-p pytest_heartbeat --durations=15" in CHECK
    assert '-n "$workers" --dist worksteal' in CHECK
    assert "lint-imports --no-logo" in CHECK
    assert "PYTHONWARNINGS=ignore .venv/bin/python -m pip install" in CHECK


def test_every_mypy_override_names_a_module_the_package_imports() -> None:
    # mypy (warn_unused_configs) prints "unused section(s)" for a listed module nothing imports.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    sources = "\n".join(
        path.read_text(encoding="utf-8")
        for top in ("vgpu_guard", "webhook", "controller", "certs")
        for path in (ROOT / top).rglob("*.py")
    )
    for override in config["overrides"]:
        modules = override["module"] if isinstance(override["module"], list) else [override["module"]]
        for module in modules:
            name = re.escape(module.removesuffix(".*"))
            assert re.search(rf"^\s*(from|import) {name}\b", sources, re.MULTILINE), module


def test_under_xdist_heartbeats_and_reliability_lines_reach_the_terminal(tmp_path: Path) -> None:
    """What CI shows from a two-worker run: a worker's heartbeat (its standard output is the channel
    to the controller), and the reliability summary (the lines travel in the test reports)."""
    slow = tmp_path / "test_slow.py"
    slow.write_text("import time\n\ndef test_sleeps():\n    time.sleep(2.5)\n")
    quick = "tests/reliability/test_api_faults.py::test_controller_converges_under_api_faults[409-conflicts]"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "scripts"), "PYTEST_HEARTBEAT_SECONDS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "pytest_heartbeat", "-n", "2", "--dist", "worksteal",
         "-p", "no:cacheprovider", quick, str(slow)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    shown = done.stdout + done.stderr
    assert done.returncode == 0, shown[-3000:]
    assert re.search(r"still running \S*::test_sleeps \(\d+ s\)", shown), shown
    assert "reliability summary" in done.stdout, done.stdout
    assert (
        "test_controller_converges_under_api_faults[409-conflicts]: API faults 409-conflicts" in done.stdout
    )
