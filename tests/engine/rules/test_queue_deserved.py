"""Volcano's queue webhook from 1.14: a guaranteed resource needs a deserved entry (issue 21).

Volcano's validate_queue.go denies ``guarantee.resource.cpu`` without ``deserved.cpu``
("deserved[cpu] must be >= guarantee[cpu]=100m"); earlier releases accept it. We follow the
release named in ``queues.volcanoVersion``; the default is the release of the Volcano CRDs we bundle
(1.13), so upgrading vgpu-guard never denies a queue the fleet's Volcano accepts.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tests.builders import config_with, default_config
from vgpu_guard.engine.admission import decide
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.decision import AdmissionRequest

CPU_NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "w"},
    "status": {
        "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True"}],
    },
}


def queue(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "q"},
        "spec": spec,
    }


def admit(obj: dict[str, Any], config: GuardConfig) -> Any:
    view = ClusterView.from_objects([CPU_NODE], config)
    request = AdmissionRequest(
        kind="Queue",
        group="scheduling.volcano.sh",
        resource="queues",
        operation="CREATE",
        object=obj,
        name="q",
    )
    return decide(request, view, config, phase="validate")


GUARANTEE_ONLY = queue({"weight": 1, "guarantee": {"resource": {"cpu": "100m", "memory": "1Gi"}}})


LATEST = {"volcanoVersion": "latest"}


def test_the_default_follows_the_bundled_volcano_1_13() -> None:
    assert default_config().queues.volcano_version == "1.13"
    assert admit(GUARANTEE_ONLY, default_config()).allowed


def test_latest_rules_deny_a_guarantee_without_deserved() -> None:
    decision = admit(GUARANTEE_ONLY, config_with(queues=LATEST))
    assert (decision.allowed, decision.code) == (False, 403)
    assert decision.message.splitlines() == [
        "[queue-deserved-missing] spec.deserved.cpu: not set while spec.guarantee.resource.cpu is 100m; "
        "Volcano 1.14 and later deny this (queues.volcanoVersion), set spec.deserved.cpu to at least 100m",
        "[queue-deserved-missing] spec.deserved.memory: not set while spec.guarantee.resource.memory is 1Gi; "
        "Volcano 1.14 and later deny this (queues.volcanoVersion), set spec.deserved.memory to at least 1Gi",
    ]


@pytest.mark.parametrize("version", ["1.14", "v1.14.0", "2.0", "latest"])
def test_releases_from_1_14_deny(version: str) -> None:
    config = config_with(queues={"volcanoVersion": version})
    assert admit(GUARANTEE_ONLY, config).rules == ("queue-deserved-missing",)


@pytest.mark.parametrize("version", ["1.13", "v1.13.3", "1.9"])
def test_older_releases_accept_what_their_volcano_accepts(version: str) -> None:
    assert admit(GUARANTEE_ONLY, config_with(queues={"volcanoVersion": version})).allowed


def test_one_missing_resource_is_named_alone() -> None:
    obj = queue(
        {"weight": 1, "guarantee": {"resource": {"cpu": "2", "memory": "1Gi"}}, "deserved": {"cpu": "2"}}
    )
    decision = admit(obj, config_with(queues=LATEST))
    assert decision.message == (
        "[queue-deserved-missing] spec.deserved.memory: not set while spec.guarantee.resource.memory is 1Gi; "
        "Volcano 1.14 and later deny this (queues.volcanoVersion), set spec.deserved.memory to at least 1Gi"
    )


def test_deserved_at_least_the_guarantee_passes_and_queues_without_guarantee_are_untouched() -> None:
    ok = queue({"weight": 1, "guarantee": {"resource": {"cpu": "2"}}, "deserved": {"cpu": "4"}})
    assert admit(ok, config_with(queues=LATEST)).allowed
    assert admit(queue({"weight": 1}), config_with(queues=LATEST)).allowed


def test_the_rule_can_warn_instead() -> None:
    config = config_with(queues=LATEST, admission={"rules": {"queue-deserved-missing": "warn"}})
    decision = admit(GUARANTEE_ONLY, config)
    assert decision.allowed and len(decision.warnings) == 2


@pytest.mark.parametrize("bad", ["1", "one.two", "1.14-rc", ""])
def test_volcano_version_must_be_a_release_or_latest(bad: str) -> None:
    with pytest.raises(ValidationError, match="volcanoVersion"):
        config_with(queues={"volcanoVersion": bad})
