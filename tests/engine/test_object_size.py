"""The container cap is decided in the core: ``review`` refuses what the webhook refuses."""

from __future__ import annotations

from tests.builders import config_with, pod
from vgpu_guard.engine.admission import request_for, review_object
from vgpu_guard.engine.cluster import ClusterView

CONTAINER = {"name": "c", "image": "busybox", "resources": {"limits": {"volcano.sh/vgpu-number": 1}}}


def test_review_refuses_an_object_over_the_webhooks_container_cap() -> None:
    many = pod(containers=[CONTAINER] * 600)
    result = review_object(request_for(many, username="alice"), ClusterView(), config_with())
    assert not result.decision.allowed and result.decision.code == 422
    assert result.decision.rules == ("object-too-large",)
    assert result.decision.message == (
        "[object-too-large] spec.containers: 600 containers in one object exceed this webhook's limit of 500 "
        "(webhook.maxContainers); split the object, or raise webhook.maxContainers"
    )
    assert result.patch == ()


def test_the_cap_is_the_configured_one() -> None:
    many = pod(containers=[CONTAINER] * 600)
    raised = config_with(webhook={"maxContainers": 1000})
    result = review_object(request_for(many, username="alice"), ClusterView(), raised)
    assert "object-too-large" not in result.decision.rules
