"""The controller process's collector settings (controller/gc_tuning.py), in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

from vgpu_guard.controller.gc_tuning import CONTROLLER_GC_THRESHOLDS

PROBE = """
import gc, json
from vgpu_guard.controller.gc_tuning import tune_gc
before = gc.get_threshold()
tune_gc()
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": gc.get_freeze_count()}))
"""


def test_tune_gc_raises_the_young_threshold_and_freezes_the_startup_heap() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout)
    assert seen["before"] != seen["after"]  # it changed something, whatever this CPython's defaults
    assert tuple(seen["after"]) == CONTROLLER_GC_THRESHOLDS
    assert CONTROLLER_GC_THRESHOLDS[0] >= 10_000
    assert seen["frozen"] > 1_000  # the modules and config loaded so far
