"""Suite-wide options: ``--long`` for the long reliability runs, the reliability summary, and the
real API server (``real_cluster``, see tests/real_cluster.py) that e2e, contract and oracle share.

``--long`` (or ``VGPU_GUARD_LONG=1``) enables tests marked ``slow`` and makes the bounded
reliability and property tests run their long sizes; docs/reliability.md lists what each runs.
Reliability tests report their counts through the ``reliability_report`` fixture; the lines are
printed at the end of the run, so the default run shows them without ``-s``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from tests.real_cluster import NOT_RUN, RealCluster, real_cluster, unavailable

_REPORT = pytest.StashKey[list[str]]()


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
    config.stash[_REPORT] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("VGPU_GUARD_LONG"):
        return
    skip = pytest.mark.skip(reason="long reliability run: pass --long or set VGPU_GUARD_LONG=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def real_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """The real API server of this session: E2E_KUBECONFIG, or the project's control plane."""
    with real_cluster(tmp_path_factory.mktemp("control-plane")) as cluster:
        yield cluster


@pytest.fixture
def reliability_report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record a summary line (printed at the end of the run, and to stdout now)."""

    def report(line: str) -> None:
        request.config.stash[_REPORT].append(f"{request.node.name}: {line}")
        print(line)

    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    not_run = config.stash.get(NOT_RUN, [])
    if not_run:
        terminalreporter.write_line(f"SKIPPED {sum(not_run)} real-cluster tests: {unavailable()}")
    lines = config.stash.get(_REPORT, [])
    if lines:
        terminalreporter.section("reliability summary")
        for line in lines:
            terminalreporter.write_line(line)
