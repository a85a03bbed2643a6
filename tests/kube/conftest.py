"""The cluster-access tests that read a real kube-apiserver are left out, said once, where none can be had."""

from __future__ import annotations

import pytest

from tests.real_cluster import deselect_real_cluster_items


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect_real_cluster_items(config, items, lambda item: item.path.stem.endswith("_real"))
