"""The CLI tests that read a real kube-apiserver are left out, said once, where none can be had."""

from __future__ import annotations

import pytest

from tests.real_cluster import deselect_real_cluster_items


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect_real_cluster_items(config, items, lambda item: item.name in REAL_CLUSTER_TESTS)


# The sandbox test starts the real control plane itself (cached binaries, built under CI=true).
REAL_CLUSTER_TESTS = {
    "test_kubeconfig_of_a_real_api_server",
    "test_the_real_control_plane_with_config_and_volcano_model",
}
