"""The CLI tests that read a real kube-apiserver are left out, said once, where none can be had."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.real_cluster import deselect_real_cluster_items
from vgpu_guard.logs import AUDIT_LOGGER


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect_real_cluster_items(config, items, lambda item: item.name in REAL_CLUSTER_TESTS)


# The sandbox tests start the real control plane themselves (cached binaries, built under CI=true).
REAL_CLUSTER_TESTS = {
    "test_kubeconfig_of_a_real_api_server",
    "test_the_real_control_plane_with_config_and_volcano_model",
    "test_a_config_that_routes_with_the_official_client_and_ctrl_c",
}


@pytest.fixture(autouse=True)
def vgpu_guard_loggers_restored() -> Iterator[None]:
    """``serve`` run in process (its start-up errors) sets up its logging as a process does: a JSON
    handler on ``sys.stderr`` (the test's captured stream, closed after it), INFO, no propagation.
    Left behind, every later log line of the worker hit the closed stream and printed a traceback:
    tests/webhook/test_limits.py's 20,000 reviews took 17 s instead of 2 s, and caplog saw nothing."""
    loggers = [logging.getLogger(name) for name in ("vgpu_guard", AUDIT_LOGGER)]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate) for lg in loggers]
    yield
    for lg, handlers, level, propagate in saved:
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate
