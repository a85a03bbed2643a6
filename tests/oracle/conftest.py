"""The oracle needs the real control plane (kube-scheduler is the oracle): left out, said once,
where none can be had, as the e2e and contract suites are. The runner's own unit tests run
anywhere."""

from __future__ import annotations

import pytest

from tests.real_cluster import deselect_real_cluster_items


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect_real_cluster_items(config, items, lambda item: "tests/oracle/test_oracle.py" in item.nodeid)
