"""/validate/pod-allocations over real HTTPS: pod UPDATE, pods/status and pods/binding (issue 21).

The route needs no cluster state (it answers before the caches sync) and decides only who wrote
an allocation annotation; the response carries the rule for the API server's audit log.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.builders import pod
from tests.webhook.conftest import admission_review
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.webhook.server import RunningWebhook
from vgpu_guard.webhook.views import StaticViewSource

IDS = "volcano.sh/vgpu-ids-new"
PHASE = "volcano.sh/bind-phase"
WHO = "only the allocator and the device plugin (admission.allocationWriters) write allocation annotations"


@pytest.fixture
def views() -> StaticViewSource:
    return StaticViewSource(ClusterView(synced=False))


async def post(http: aiohttp.ClientSession, webhook: RunningWebhook, body: dict[str, Any]) -> dict[str, Any]:
    async with http.post(webhook.url + "/validate/pod-allocations", json=body) as response:
        assert response.status == 200
        answer: dict[str, Any] = (await response.json())["response"]
        return answer


def with_subresource(review: dict[str, Any], sub: str) -> dict[str, Any]:
    review["request"]["subResource"] = sub
    return review


async def test_a_tenant_patching_an_assignment_in_is_denied(
    webhook: RunningWebhook, http: aiohttp.ClientSession
) -> None:
    old = pod(name="web")
    new = pod(name="web", annotations={IDS: "GPU-0,NVIDIA,28672,100:;"})
    answer = await post(http, webhook, admission_review(new, old=old, operation="UPDATE"))
    assert answer["allowed"] is False
    assert answer["status"] == {
        "status": "Failure",
        "code": 403,
        "reason": "Forbidden",
        "message": f"[allocation-annotations] metadata.annotations[{IDS}]: 'GPU-0,NVIDIA,28672,100:;' was added by "
        f"alice on UPDATE; {WHO}, leave it out",
    }
    assert answer["auditAnnotations"] == {"rules": "allocation-annotations"}


async def test_status_writes_and_bindings_are_judged_by_subresource(
    webhook: RunningWebhook, http: aiohttp.ClientSession
) -> None:
    old = pod(name="web")
    new = pod(name="web", annotations={"volcano.sh/bind-phase": "success"})
    status = with_subresource(admission_review(new, old=old, operation="UPDATE"), "status")
    assert (await post(http, webhook, status))["allowed"] is False
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "web", "namespace": "default", "annotations": {"volcano.sh/vgpu-node": "n1"}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
    }
    review = with_subresource(admission_review(binding, kind="Binding"), "binding")
    answer = await post(http, webhook, review)
    assert answer["status"]["message"] == (
        "[allocation-annotations] metadata.annotations[volcano.sh/vgpu-node]: n1 on a Binding by alice would be "
        f"copied onto pod default/web; {WHO}, bind without it"
    )


@pytest.mark.parametrize(
    "user",
    [
        "system:serviceaccount:kube-system:volcano-device-plugin",
        "system:serviceaccount:volcano-system:volcano-scheduler",
    ],
)
async def test_allocation_writers_confirming_an_assignment_pass_without_a_patch(
    webhook: RunningWebhook, http: aiohttp.ClientSession, user: str
) -> None:
    old = pod(name="web", annotations={IDS: "GPU-0,NVIDIA,1024,10:;", PHASE: "allocating"})
    new = pod(name="web", annotations={IDS: "GPU-0,NVIDIA,1024,10:;", PHASE: "success"})
    answer = await post(http, webhook, admission_review(new, old=old, operation="UPDATE", username=user))
    assert answer["allowed"] is True
    assert "patch" not in answer and "warnings" not in answer
    # An ordinary update that leaves the assignment alone passes too, whoever sends it.
    same = await post(http, webhook, admission_review(new, old=new, operation="UPDATE"))
    assert same["allowed"] is True


async def test_a_writers_new_assignment_waits_for_the_caches_fail_closed(
    webhook: RunningWebhook, http: aiohttp.ClientSession
) -> None:
    """Writing an assignment needs the ledger: before the caches have listed it is a retriable 503."""
    user = "system:serviceaccount:volcano-system:volcano-scheduler"
    old = pod(name="web")
    new = pod(name="web", annotations={IDS: "GPU-0,NVIDIA,1024,10:;"})
    answer = await post(http, webhook, admission_review(new, old=old, operation="UPDATE", username=user))
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 503
    assert answer["status"]["message"] == (
        "[vgpu-assignment-capacity] vgpu-guard could not reserve the GPU assignment (it has not finished "
        "reading nodes and GPU ledgers from the API server); retry in a few seconds"
    )


async def test_the_container_cap_does_not_apply_to_annotation_checks(
    webhook: RunningWebhook, http: aiohttp.ClientSession
) -> None:
    big = pod(name="web", containers=[{"name": f"c{i}", "image": "busybox"} for i in range(501)])
    answer = await post(
        http, webhook, with_subresource(admission_review(big, old=big, operation="UPDATE"), "status")
    )
    assert answer["allowed"] is True


async def test_subresource_writes_count_under_pods_as_the_metric_help_says(
    webhook: RunningWebhook, http: aiohttp.ClientSession
) -> None:
    old, new = pod(name="web"), pod(name="web", annotations={PHASE: "success"})
    await post(http, webhook, with_subresource(admission_review(new, old=old, operation="UPDATE"), "status"))
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web", "namespace": "default"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}  # fmt: skip
    await post(http, webhook, with_subresource(admission_review(binding, kind="Binding"), "binding"))
    async with http.get(f"http://127.0.0.1:{webhook.ops_port}/metrics") as response:
        text = await response.text()
    counted = {
        (s.labels["resource"], s.labels["operation"])
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "vgpu_guard_admission_requests_total"
        and s.labels["webhook"] == "/validate/pod-allocations"
    }
    assert counted == {("pods", "UPDATE"), ("pods", "CREATE")}
