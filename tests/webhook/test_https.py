"""The webhook over real HTTPS: responses as the API server expects them, robust to bad input."""

from __future__ import annotations

import base64
import copy
import io
import json
import logging
from typing import Any

import aiohttp
import jsonpatch
import pytest

from tests.builders import pod
from tests.kube_schema import kube_validate
from tests.webhook.conftest import admission_review
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.webhook.server import RunningWebhook
from vgpu_guard.webhook.views import StaticViewSource

MEM, NUM = "volcano.sh/vgpu-memory", "volcano.sh/vgpu-number"


async def post(http: aiohttp.ClientSession, webhook: RunningWebhook, path: str, body: Any) -> tuple[int, Any]:
    data = io.BytesIO(body if isinstance(body, bytes) else json.dumps(body).encode())
    async with http.post(
        webhook.url + path, data=data, headers={"Content-Type": "application/json"}
    ) as response:
        text = await response.text()
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, text


async def test_mutation_over_https_returns_an_applicable_json_patch(
    http: aiohttp.ClientSession, webhook: RunningWebhook
) -> None:
    obj = pod({NUM: 1, MEM: 3000}, annotations={"volcano.sh/vgpu-mode": "mig"}, schedulerName="volcano")
    review = admission_review(obj)
    status, body = await post(http, webhook, "/mutate/pods", review)
    assert status == 200
    response = body["response"]
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    assert response["uid"] == review["request"]["uid"]
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    patched = jsonpatch.JsonPatch(patch).apply(copy.deepcopy(obj))
    assert patched["spec"]["containers"][0]["resources"]["limits"][MEM] == "5120"
    kube_validate(patched, "1.34.0")
    assert "vgpu-guard: set annotation vgpu-guard.io/mig-profile=1g.5gb" in response["warnings"]
    # Reinvocation on the patched object: empty patch.
    status, again = await post(http, webhook, "/mutate/pods", admission_review(patched))
    assert status == 200 and "patch" not in again["response"] and "warnings" not in again["response"]


async def test_denial_is_a_200_with_status_403_and_the_message(
    http: aiohttp.ClientSession, webhook: RunningWebhook
) -> None:
    status, body = await post(http, webhook, "/validate/pods", admission_review(pod({NUM: 1, MEM: "12Gi"})))
    assert status == 200
    assert body["response"]["allowed"] is False
    assert body["response"]["status"] == {
        "status": "Failure",
        "code": 403,
        "reason": "Forbidden",
        "message": "[vgpu-memory-unit] spec.containers[0].resources.limits[volcano.sh/vgpu-memory]: 12Gi has a unit "
        "suffix but vgpu-memory counts MiB (12Gi would mean 12884901888 MiB); write 12288",
    }
    assert body["response"]["auditAnnotations"] == {"rules": "vgpu-memory-unit"}


async def test_dry_run_gets_the_same_answer(http: aiohttp.ClientSession, webhook: RunningWebhook) -> None:
    obj = pod({NUM: 1, MEM: "12Gi"})
    _, normal = await post(http, webhook, "/validate/pods", admission_review(obj))
    _, dry = await post(http, webhook, "/validate/pods", admission_review(obj, dry_run=True))
    assert dry["response"]["status"] == normal["response"]["status"]
    async with http.get(f"http://127.0.0.1:{webhook.ops_port}/metrics") as response:
        metrics = await response.text()
    assert (
        'vgpu_guard_admission_requests_total{allowed="false",dry_run="true",operation="CREATE",resource="pods",'
        'webhook="/validate/pods"} 1.0' in metrics
    )
    assert (
        'vgpu_guard_admission_requests_total{allowed="false",dry_run="false",operation="CREATE",resource="pods",'
        'webhook="/validate/pods"} 1.0' in metrics
    )
    assert "vgpu_guard_admission_duration_seconds_bucket" in metrics


async def test_workload_templates_are_validated(http: aiohttp.ClientSession, webhook: RunningWebhook) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "t"}},
            "template": {"metadata": {"labels": {"app": "t"}}, "spec": pod({NUM: 1, MEM: "12Gi"})["spec"]},
        },
    }
    review = admission_review(deployment, resource="deployments", group="apps", kind="Deployment")
    _, body = await post(http, webhook, "/validate/workloads", review)
    assert body["response"]["status"]["message"].startswith(
        "[vgpu-memory-unit] spec.template.spec.containers[0].resources.limits[volcano.sh/vgpu-memory]: 12Gi"
    )


BAD_BODIES = [
    (b"not json", "body is not JSON"),
    (b"[1, 2]", "body is a JSON list, expected an AdmissionReview object"),
    (b"{}", "apiVersion: Field required (and 2 more)"),
    (
        json.dumps(
            {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}
        ).encode(),
        "apiVersion: Input should be 'admission.k8s.io/v1'",
    ),
    (
        json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "kind": {"version": "v1", "kind": "Pod"},
                    "resource": {"version": "v1", "resource": "pods"},
                    "operation": "CREATE",
                    "object": {},
                },
            }
        ).encode(),
        "request.uid: Field required",
    ),
    (
        json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "1",
                    "kind": {"version": "v1", "kind": "Pod"},
                    "resource": {"version": "v1", "resource": "pods"},
                    "operation": "CREATE",
                },
            }
        ).encode(),
        "request.object: required for CREATE",
    ),
    (
        json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "1",
                    "kind": {"version": "v1", "kind": "Pod"},
                    "resource": {"version": "v1", "resource": "pods"},
                    "operation": "PATCH",
                    "object": {},
                },
            }
        ).encode(),
        "request.operation: Input should be 'CREATE', 'UPDATE', 'DELETE' or 'CONNECT'",
    ),
    (b"[" * 100_000 + b"]" * 100_000, "nests too deeply"),
    (
        '{"a": "\udcff"}'.encode("utf-8", "surrogatepass"),
        "body is not UTF-8 JSON: invalid continuation byte at byte 7",
    ),
    (b"\xff\xfe{}", "body is not UTF-8 JSON"),
]


@pytest.mark.parametrize(("body", "reason"), BAD_BODIES)
async def test_malformed_reviews_get_400_and_serving_continues(
    http: aiohttp.ClientSession, webhook: RunningWebhook, body: bytes, reason: str
) -> None:
    status, answer = await post(http, webhook, "/validate/pods", body)
    assert status == 400
    assert reason in answer["error"]
    status, ok = await post(http, webhook, "/validate/pods", admission_review(pod({NUM: 1, MEM: 100})))
    assert status == 200 and ok["response"]["allowed"] is True


async def test_oversized_body_gets_413(http: aiohttp.ClientSession, webhook: RunningWebhook) -> None:
    status, answer = await post(http, webhook, "/validate/pods", b"{" + b" " * (9 * 2**20) + b"}")
    assert status == 413
    assert answer == {"error": "body larger than 8388608 bytes (webhook.maxRequestBytes)"}


async def test_resource_not_owned_by_the_path_is_admitted_untouched(
    http: aiohttp.ClientSession, webhook: RunningWebhook
) -> None:
    status, body = await post(http, webhook, "/validate/queues", admission_review(pod({NUM: 1, MEM: "12Gi"})))
    assert status == 200 and body["response"] == {"uid": body["response"]["uid"], "allowed": True}


async def test_a_bug_answers_500_and_the_server_keeps_serving(
    http: aiohttp.ClientSession, webhook: RunningWebhook, views: StaticViewSource
) -> None:
    good = views.snapshot
    calls = {"n": 0}

    def flaky(config: Any) -> ClusterView:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected bug")
        return good(config)

    views.snapshot = flaky  # type: ignore[method-assign]
    status, body = await post(http, webhook, "/validate/pods", admission_review(pod({NUM: 1, MEM: 100})))
    assert status == 500 and body == {"error": "internal error in vgpu-guard; see its log"}
    status, body = await post(http, webhook, "/validate/pods", admission_review(pod({NUM: 1, MEM: 100})))
    assert status == 200 and body["response"]["allowed"] is True


async def test_one_audit_line_per_decision(
    http: aiohttp.ClientSession, webhook: RunningWebhook, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vgpu_guard.audit")
    review = admission_review(
        pod({NUM: 1, MEM: 3000}, annotations={"volcano.sh/vgpu-mode": "mig"}, schedulerName="volcano"),
        dry_run=True,
    )
    await post(http, webhook, "/mutate/pods", review)
    records = [r for r in caplog.records if r.name == "vgpu_guard.audit"]
    assert len(records) == 1
    entry = records[0].audit  # type: ignore[attr-defined]
    assert {
        k: entry[k]
        for k in (
            "event",
            "uid",
            "webhook",
            "kind",
            "namespace",
            "name",
            "user",
            "operation",
            "dry_run",
            "allowed",
            "rules",
            "patch_ops",
        )
    } == {
        "event": "admission",
        "uid": review["request"]["uid"],
        "webhook": "/mutate/pods",
        "kind": "Pod",
        "namespace": "default",
        "name": "gpu-pod",
        "user": "alice",
        "operation": "CREATE",
        "dry_run": True,
        "allowed": True,
        "rules": [],
        "patch_ops": 3,
    }
    assert entry["latency_ms"] >= 0
    assert entry["warnings"][-1] == "vgpu-guard: set annotation vgpu-guard.io/mig-profile=1g.5gb"


async def test_readiness_follows_cache_sync(
    http: aiohttp.ClientSession, webhook: RunningWebhook, views: StaticViewSource
) -> None:
    ops = f"http://127.0.0.1:{webhook.ops_port}"
    async with http.get(ops + "/readyz") as response:
        assert response.status == 200
    views.replace(ClusterView(synced=False))
    async with http.get(ops + "/readyz") as response:
        assert response.status == 503
        assert (await response.text()) == "not ready: cluster caches not synced yet\n"
    async with http.get(ops + "/healthz") as response:
        assert response.status == 200


async def test_plain_http_is_refused_on_the_admission_port(webhook: RunningWebhook) -> None:
    async with aiohttp.ClientSession() as plain:
        with pytest.raises(aiohttp.ClientError):
            async with plain.post(f"http://127.0.0.1:{webhook.port}/validate/pods", data=b"{}") as response:
                await response.read()
