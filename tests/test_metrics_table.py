"""The README's metrics table is what the processes register (tests/metrics_table.py generates it)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.metrics_table import README, metric_docs, readme_table, table

PACKAGE = Path(__file__).resolve().parents[1] / "vgpu_guard"
# A metric created in the package's source: the first argument of a prometheus_client metric or
# metric family constructor.
_CREATED = re.compile(r"\b(?:Counter|Gauge|Histogram|Summary|Info|Enum|\w+MetricFamily)\(\s*\"(\w+)\"")


def test_readme_metrics_table_is_generated_from_the_code() -> None:
    assert readme_table(README.read_text(encoding="utf-8")) == table(metric_docs()), (
        "README.md's metrics table is stale: run `python -m tests.metrics_table`"
    )


def test_the_table_has_every_metric_the_package_creates() -> None:
    created: set[str] = set()
    for folder, _, files in os.walk(PACKAGE, followlinks=True):  # webhook/, controller/: links
        for name in files:
            if name.endswith(".py"):
                created.update(_CREATED.findall((Path(folder) / name).read_text(encoding="utf-8")))
    assert len(created) > 20
    documented = {doc.name for doc in metric_docs()}
    # prometheus_client adds _total to a counter's family name when it is not written.
    assert {name for name in created if name not in documented and f"{name}_total" not in documented} == set()


def test_labels_as_registered() -> None:
    docs = {doc.name: doc for doc in metric_docs()}
    assert docs["vgpu_guard_allocations_total"].labels == ("node",)
    assert docs["vgpu_guard_admission_requests_total"].labels == (
        "webhook",
        "resource",
        "operation",
        "allowed",
        "dry_run",
    )
    assert docs["vgpu_guard_ledger_writes_total"].process == "webhook, controller"
