"""Seed 001 end to end through the webhook over HTTPS: the queue that would take guarantees past
capacity is denied with the exact numbers; the ones that fit are admitted; UPDATE replaces."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client import CollectorRegistry

from tests.builders import default_config
from tests.webhook.conftest import admission_review
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.webhook.server import RunningWebhook, running_webhook
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


@pytest.fixture
async def seed_webhook(server_ssl: ssl.SSLContext) -> AsyncIterator[RunningWebhook]:
    config = default_config()
    cluster = list(yaml.safe_load_all((SEED / "cluster.yaml").read_text()))
    # The three queues that fit are already in the cluster; "batch" arrives.
    view = ClusterView.from_objects([*cluster, *QUEUES[:3]], config)
    async with running_webhook(
        config=config,
        views=StaticViewSource(view),
        ssl_context=server_ssl,
        registry=CollectorRegistry(),
        host="127.0.0.1",
        port=0,
        ops_port=0,
    ) as running:
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
    config = default_config()
    queues = [_queue("research"), _queue("vision", "research"), _queue("nlp", "research"), _queue("solo")]
    async with running_webhook(
        config=config,
        views=StaticViewSource(ClusterView.from_objects(queues, config)),
        ssl_context=server_ssl,
        registry=CollectorRegistry(),
        host="127.0.0.1",
        port=0,
        ops_port=0,
    ) as running:
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
