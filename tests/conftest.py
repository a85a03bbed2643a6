"""Suite-wide options: ``--long`` for the long reliability runs, the reliability summary, and the
real API server (``real_cluster``, see tests/real_cluster.py) that e2e, contract and oracle share.

``--long`` (or ``VGPU_GUARD_LONG=1``) enables tests marked ``slow`` and makes the bounded
reliability and property tests run their long sizes; docs/reliability.md lists what each runs.
Reliability tests report their counts through the ``reliability_report`` fixture; the lines are
printed at the end of the run, so the default run shows them without ``-s`` (they travel in the
test reports, so a pytest-xdist run prints them too).

scripts/check runs the suite on two pytest-xdist workers (``--dist worksteal``): tests marked
``heavy`` (minutes each) run first, on one worker, while the other takes the light tests.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator

import pytest

from tests.real_cluster import NOT_RUN, RealCluster, real_cluster, unavailable
from vgpu_guard.controller.gc_tuning import tune_gc

_REPORT_PROPERTY = "reliability"


class ReliabilityLines:
    """Collects the ``reliability_report`` lines from the test reports, where they travel: under
    pytest-xdist the summary is printed by the controller process, which sees only the reports."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Every phase's report carries all the properties so far: the teardown's has them all, once.
        if report.when == "teardown":
            self.lines.extend(str(v) for name, v in report.user_properties if name == _REPORT_PROPERTY)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        default=False,
        help="run the long reliability mode (same as VGPU_GUARD_LONG=1): slow tests, full sizes",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--long"):
        # Modules read the environment at import (after configure), so one switch drives both.
        os.environ["VGPU_GUARD_LONG"] = "1"
    config.pluginmanager.register(ReliabilityLines(), "reliability-lines")


@pytest.hookimpl(trylast=True)  # after every deselection: the workers' shares are of what will run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get("VGPU_GUARD_LONG"):
        skip = pytest.mark.skip(reason="long reliability run: pass --long or set VGPU_GUARD_LONG=1")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)
    # Set in each pytest-xdist worker; every worker must reorder the same way (it does: no state).
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    items[:] = heavy_first(items, workers)


def heavy_first(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """Under pytest-xdist (``workers`` >= 2): the heavy tests first, one after another on one
    worker, while the others start on the rest.

    ``worksteal`` hands worker 0 the first share of the collection and balances the rest by
    stealing from the back of the longest queue. Measured on the 2-core VM: in collection order the
    heavy tests fell late in one share (902 s in all); side by side at the head of two shares they
    slowed each other (the allocation-safety run 370 -> 645 s, 966 s in all), since each needs
    about a core (the oracle more: the control plane works for it). One after another at the head
    of the run, the other worker takes the light tests, stealing worker 0's share once its own is
    done.
    """
    if workers < 2:
        return items
    heavy = [i for i in items if "heavy" in i.keywords]
    return heavy + [i for i in items if "heavy" not in i.keywords]


@pytest.fixture(scope="session")
def real_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """The real API server of this session: E2E_KUBECONFIG, or the project's control plane."""
    with real_cluster(tmp_path_factory.mktemp("control-plane")) as cluster:
        yield cluster


@pytest.fixture
def controller_gc() -> Iterator[None]:
    """The controller process's collector settings (``gc_tuning.tune_gc``, as ``serve controller``
    runs) for a test that drives the controller's passes at volume, restored afterwards.

    With CPython's defaults the allocation-safety run spent 16.6 s of 56 s (15,000 operations) in
    collections, 13.4 s of them in 39 full ones over a heap of live objects; with the controller's
    settings 7.7 s, and the run took 43 s.
    """
    threshold = gc.get_threshold()
    tune_gc()
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


@pytest.fixture
def reliability_report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record a summary line (printed at the end of the run, and to stdout now)."""

    def report(line: str) -> None:
        request.node.user_properties.append((_REPORT_PROPERTY, f"{request.node.name}: {line}"))
        print(line)

    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    not_run = config.stash.get(NOT_RUN, [])
    if not_run:
        terminalreporter.write_line(f"SKIPPED {sum(not_run)} real-cluster tests: {unavailable()}")
    collected = config.pluginmanager.get_plugin("reliability-lines")
    lines = collected.lines if isinstance(collected, ReliabilityLines) else []
    if lines:
        terminalreporter.section("reliability summary")
        for line in lines:
            terminalreporter.write_line(line)
