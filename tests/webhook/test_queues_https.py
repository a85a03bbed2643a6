"""Seed 001 end to end through the webhook over HTTPS: the queue that would take guarantees past
capacity is denied with the exact numbers; the ones that fit are admitted; UPDATE replaces."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.apidouble_support.faults import FaultPlan, unavailable_error
from tests.builders import default_config
from tests.webhook.conftest import admission_review, serving
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.store import Store
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.kube.resources import CRDS
from vgpu_guard.kube.resources import QUEUES as QUEUE_RESOURCE
from vgpu_guard.webhook.server import RunningWebhook
from vgpu_guard.webhook.views import StaticViewSource

SEED = Path(__file__).resolve().parents[2] / "examples" / "queue-guarantees"
QUEUES = list(yaml.safe_load_all((SEED / "queues.yaml").read_text()))


def review(
    queue: dict[str, Any], *, operation: str = "CREATE", old: dict[str, Any] | None = None
) -> dict[str, Any]:
    return admission_review(
        queue,
        resource="queues",
        group="scheduling.volcano.sh",
        version="v1beta1",
        kind="Queue",
        operation=operation,
        old=old,
    )


def _webhook(
    server_ssl: ssl.SSLContext, objects: list[dict[str, Any]], client: MemoryClusterClient | None = None
) -> contextlib.AbstractAsyncContextManager[RunningWebhook]:
    """The webhook over HTTPS whose cache holds ``objects``; ``client``: the API server it may read."""
    config = default_config()
    return serving(config, StaticViewSource(ClusterView.from_objects(objects, config)), server_ssl, client)


def _stored(queues: list[dict[str, Any]], faults: FaultPlan | None = None) -> MemoryClusterClient:
    """An API server (the double) that stores ``queues``."""
    store = Store()
    crd = (
        Path(__file__).resolve().parents[2] / "vgpu_guard/data/crds/volcano/scheduling.volcano.sh_queues.yaml"
    )
    store.create(CRDS, yaml.safe_load(crd.read_text()))
    for queue in queues:
        store.create(QUEUE_RESOURCE, queue)
    return MemoryClusterClient(store, faults=faults)


def lagging_webhook(
    server_ssl: ssl.SSLContext, client: MemoryClusterClient
) -> contextlib.AbstractAsyncContextManager[RunningWebhook]:
    """The webhook's cache has seen two of the three stored queues (the third's watch event is
    still on its way, as after ``kubectl apply -f queues.yaml``)."""
    cluster = list(yaml.safe_load_all((SEED / "cluster.yaml").read_text()))
    return _webhook(server_ssl, [*cluster, *QUEUES[:2]], client)


async def test_a_queue_stored_but_not_yet_cached_counts(
    http: aiohttp.ClientSession, server_ssl: ssl.SSLContext
) -> None:
    """On the cache alone batch would fit (16 + 8 + 36 = 60 of 64); the stored notebooks queue
    makes it 68, and the denial says so, for a dry run too."""
    async with lagging_webhook(server_ssl, _stored(QUEUES[:3])) as webhook:
        for dry_run in (False, True):
            body = review(QUEUES[3])
            body["request"]["dryRun"] = dry_run
            response = await post(http, webhook, body)
            assert response["allowed"] is False
            assert response["status"]["message"] == (
                "[queue-guarantee-capacity] spec.guarantee.resource.cpu: 36 would bring guaranteed cpu to 68 "
                "but cluster capacity is 64 (8 Ready nodes); lower it to at most 32 or add nodes"
            )


async def test_a_child_queue_stored_but_not_yet_cached_keeps_its_parent(
    http: aiohttp.ClientSession, server_ssl: ssl.SSLContext
) -> None:
    child = _queue("vision", parent="training")
    async with lagging_webhook(server_ssl, _stored([*QUEUES[:3], child])) as webhook:
        response = await post(http, webhook, _delete("training"))
    assert response["allowed"] is False
    assert "training is the parent of 1 queue(s) (vision)" in response["status"]["message"]


async def test_when_the_queues_cannot_be_read_the_cached_ones_decide(
    http: aiohttp.ClientSession, server_ssl: ssl.SSLContext, caplog: pytest.LogCaptureFixture
) -> None:
    """An API error on the read: judged as before the read existed (the cache), and logged."""
    faults = FaultPlan()
    faults.add(verb="list", resource=QUEUE_RESOURCE, error=unavailable_error(), times=None)
    async with lagging_webhook(server_ssl, _stored(QUEUES[:3], faults)) as webhook:
        response = await post(http, webhook, review(QUEUES[3]))
    assert response["allowed"] is True
    assert any("could not read the Queues" in r.getMessage() for r in caplog.records)
    assert faults.log == [("list", "queues")]


@pytest.fixture
async def seed_webhook(server_ssl: ssl.SSLContext) -> AsyncIterator[RunningWebhook]:
    cluster = list(yaml.safe_load_all((SEED / "cluster.yaml").read_text()))
    # The three queues that fit are already in the cluster; "batch" arrives.
    async with _webhook(server_ssl, [*cluster, *QUEUES[:3]]) as running:
        yield running


async def post(http: aiohttp.ClientSession, webhook: RunningWebhook, body: dict[str, Any]) -> dict[str, Any]:
    async with http.post(webhook.url + "/validate/queues", json=body) as response:
        assert response.status == 200
        result: dict[str, Any] = (await response.json())["response"]
        return result


async def test_seed_001_over_guarantee_is_denied_with_the_numbers(
    http: aiohttp.ClientSession, seed_webhook: RunningWebhook
) -> None:
    batch = QUEUES[3]
    response = await post(http, seed_webhook, review(batch))
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["message"] == (
        "[queue-guarantee-capacity] spec.guarantee.resource.cpu: 36 would bring guaranteed cpu to 68 but cluster "
        "capacity is 64 (8 Ready nodes); lower it to at most 32 or add nodes"
    )


async def test_update_replaces_the_old_version_instead_of_adding_to_it(
    http: aiohttp.ClientSession, seed_webhook: RunningWebhook
) -> None:
    training = QUEUES[0]
    response = await post(http, seed_webhook, review(training, operation="UPDATE", old=training))
    assert response["allowed"] is True


def _queue(name: str, parent: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"weight": 1}
    if parent:
        spec["parent"] = parent
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.fixture
async def tree_webhook(server_ssl: ssl.SSLContext) -> AsyncIterator[RunningWebhook]:
    queues = [_queue("research"), _queue("vision", "research"), _queue("nlp", "research"), _queue("solo")]
    async with _webhook(server_ssl, queues) as running:
        yield running


def _delete(name: str, parent: str = "") -> dict[str, Any]:
    body = admission_review(
        None,
        resource="queues",
        group="scheduling.volcano.sh",
        version="v1beta1",
        kind="Queue",
        operation="DELETE",
        old=_queue(name, parent),
    )
    body["request"]["name"] = name
    return body


async def test_deleting_a_parent_queue_with_children_is_denied(
    http: aiohttp.ClientSession, tree_webhook: RunningWebhook
) -> None:
    response = await post(http, tree_webhook, _delete("research"))
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["message"] == (
        "[queue-hierarchy] metadata.name: research is the parent of 2 queue(s) (nlp, vision); deleting it would "
        "orphan them; delete those queues or move them to another parent (spec.parent) first"
    )
    # Leaves and childless queues delete as before.
    assert (await post(http, tree_webhook, _delete("vision", "research")))["allowed"] is True
    assert (await post(http, tree_webhook, _delete("solo")))["allowed"] is True
