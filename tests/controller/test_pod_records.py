"""``record_of``: what the controller's indexes read of a pod agrees with the pod's own request."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_guard.controller.world import record_of
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.pod_request import GROUP_ANNOTATIONS, pod_request

K8S, VOLCANO = GROUP_ANNOTATIONS


def _pod(annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "w-0", "namespace": "team", "uid": "u-1", "annotations": annotations},
        "spec": {
            "schedulerName": "vgpu-guard",
            "nodeName": "n1",
            "containers": [{"name": "c", "resources": {"limits": {"volcano.sh/vgpu-number": "1"}}}],
        },
        "status": {"phase": "Running"},
    }


@pytest.mark.parametrize(
    "annotations",
    [
        {K8S: "from-k8s", VOLCANO: "from-volcano"},
        {VOLCANO: "from-volcano", K8S: "from-k8s"},  # the other order in the object
        {VOLCANO: "from-volcano", K8S: ""},
        {VOLCANO: "from-volcano"},
        {},
    ],
)
def test_the_running_group_is_the_one_the_request_names(annotations: dict[str, str]) -> None:
    """A pod counted as running in one group while its request names another would let a gang
    start short of minMember, or hold one back that has enough."""
    pod = _pod(annotations)
    request = pod_request(pod, GuardConfig().nvidia)
    assert request is not None
    assert record_of(("team", "w-0"), pod, "vgpu-guard").group == request.group
