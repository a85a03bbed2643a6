"""Two webhook replicas admit members of one gang at the same moment: both stamp the same IB
cluster, because the first member's GangPlacement is created through the API server (AlreadyExists
settles the race). Dry run records nothing; an API that cannot record answers a retriable 503."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import pytest
import yaml

from tests.apidouble_support.faults import FaultPlan, unavailable_error
from tests.builders import config_with
from tests.engine.test_gang import LABEL, cluster, member, podgroup, terms
from tests.webhook.conftest import admission_review, serving
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.store import Store
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, NodeLedger, encode_ledger
from vgpu_guard.kube.resources import CRDS, GANG_PLACEMENTS, NAMESPACES, PODGROUPS
from vgpu_guard.webhook.server import RunningWebhook
from vgpu_guard.webhook.views import StaticViewSource

CONFIG = config_with(topology={"ibClusterLabel": LABEL})
CRD = Path(__file__).resolve().parents[2] / "manifests" / "crds" / "gangplacements.vgpu-guard.io.yaml"


def full(node: str) -> dict[str, Any]:
    """A ledger in which the node's one card is taken (so a replica reading it avoids that node)."""
    grant = ContainerGrant(
        index=0, name="c", devices=(DeviceGrant(uuid=f"GPU-{node}-0", memory=24576, cores=100),)
    )
    allocation = Allocation(
        pod_uid=f"busy-{node}",
        namespace="other",
        name=f"busy-{node}",
        queue="default",
        containers=(grant,),
        committed=True,
    )
    return {
        "apiVersion": "vgpu-guard.io/v1alpha1",
        "kind": "GPULedger",
        **encode_ledger(NodeLedger(node=node, allocations={allocation.pod_uid: allocation})),
    }


@pytest.fixture
def store() -> Store:
    store = Store()
    store.create(CRDS, yaml.safe_load(CRD.read_text()))
    store.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    return store


async def start(
    stack: AsyncExitStack,
    view_objects: list[dict[str, Any]],
    client: MemoryClusterClient,
    server_ssl: ssl.SSLContext,
) -> RunningWebhook:
    views = StaticViewSource(cluster(*view_objects))
    return await stack.enter_async_context(serving(CONFIG, views, server_ssl, client))


async def mutate(
    http: aiohttp.ClientSession, webhook: RunningWebhook, obj: dict[str, Any], dry_run: bool = False
) -> dict[str, Any]:
    async with http.post(
        webhook.url + "/mutate/pods", json=admission_review(obj, dry_run=dry_run)
    ) as response:
        assert response.status == 200
        body: dict[str, Any] = (await response.json())["response"]
        return body


def stamped(obj: dict[str, Any], response: dict[str, Any]) -> list[str]:
    patch = json.loads(base64.b64decode(response["patch"]))
    values: list[str] = terms(jsonpatch.apply_patch(obj, patch))[0]["matchExpressions"][0]["values"]
    return values


@pytest.fixture
async def two_replicas(
    store: Store, server_ssl: ssl.SSLContext
) -> AsyncIterator[tuple[RunningWebhook, RunningWebhook]]:
    async with AsyncExitStack() as stack:
        # Replica A sees an empty cluster (best fit for 2 members: ib-b). Replica B's stale ledger
        # says ib-b is full, so alone it would choose ib-a. Neither sees the other's placement.
        a = await start(stack, [podgroup("train", 2)], MemoryClusterClient(store), server_ssl)
        b = await start(
            stack, [podgroup("train", 2), full("b0"), full("b1")], MemoryClusterClient(store), server_ssl
        )
        yield a, b


async def test_two_replicas_admitting_members_at_once_agree(
    store: Store, http: aiohttp.ClientSession, two_replicas: tuple[RunningWebhook, RunningWebhook]
) -> None:
    a, b = two_replicas
    first, second = member("train", 0), member("train", 1)
    ra, rb = await asyncio.gather(mutate(http, a, first), mutate(http, b, second))
    assert ra["allowed"] and rb["allowed"]
    recorded = store.get(GANG_PLACEMENTS, "train", namespace="ml")["spec"]["cluster"]
    assert stamped(first, ra) == stamped(second, rb) == [recorded]


@pytest.mark.parametrize("order", ["a-first", "b-first"])
async def test_whoever_records_first_wins(
    store: Store, http: aiohttp.ClientSession, two_replicas: tuple[RunningWebhook, RunningWebhook], order: str
) -> None:
    a, b = two_replicas
    first, second = (a, b) if order == "a-first" else (b, a)
    r1 = await mutate(http, first, member("train", 0))
    r2 = await mutate(http, second, member("train", 1))
    winner = "ib-b" if order == "a-first" else "ib-a"
    assert stamped(member("train", 0), r1) == stamped(member("train", 1), r2) == [winner]
    assert store.get(GANG_PLACEMENTS, "train", namespace="ml")["spec"]["cluster"] == winner


async def test_dry_run_records_nothing(
    store: Store, http: aiohttp.ClientSession, two_replicas: tuple[RunningWebhook, RunningWebhook]
) -> None:
    a, _ = two_replicas
    response = await mutate(http, a, member("train", 0), dry_run=True)
    assert stamped(member("train", 0), response) == ["ib-b"]
    assert store.list(GANG_PLACEMENTS, namespace="ml").items == []


async def test_an_api_that_cannot_record_gets_a_retriable_503(
    store: Store, http: aiohttp.ClientSession, server_ssl: ssl.SSLContext
) -> None:
    faults = FaultPlan()
    faults.add(verb="create", resource=GANG_PLACEMENTS, error=unavailable_error())
    async with AsyncExitStack() as stack:
        webhook = await start(
            stack, [podgroup("train", 2)], MemoryClusterClient(store, faults=faults), server_ssl
        )
        response = await mutate(http, webhook, member("train", 0))
    assert response["allowed"] is False and response["status"]["code"] == 503
    assert response["status"]["message"] == (
        "[ib-cluster] vgpu-guard could not record the gang's IB cluster (injected fault: the server is currently "
        "unable to handle the request); retry in a few seconds"
    )


async def test_a_podgroup_the_cache_has_not_seen_yet_is_read_before_choosing(
    store: Store, http: aiohttp.ClientSession, server_ssl: ssl.SSLContext
) -> None:
    # Volcano creates the PodGroup and the pods at once: the webhook's cache may not have the
    # PodGroup yet. Sized as one member the gang would go to the tightest cluster (ib-b, 2 nodes);
    # with the PodGroup read (minMember 4) it must go to ib-a.
    volcano_crd = (
        Path(__file__).resolve().parents[2]
        / "vgpu_guard/data/crds/volcano/scheduling.volcano.sh_podgroups.yaml"
    )
    store.create(CRDS, yaml.safe_load(volcano_crd.read_text()))
    store.create(
        PODGROUPS, {**podgroup("wide", 4), "metadata": {"name": "wide", "namespace": "ml"}}, namespace="ml"
    )
    async with AsyncExitStack() as stack:
        webhook = await start(stack, [], MemoryClusterClient(store), server_ssl)
        response = await mutate(http, webhook, member("wide", 0))
    assert stamped(member("wide", 0), response) == ["ib-a"]
    assert store.get(GANG_PLACEMENTS, "wide", namespace="ml")["spec"]["minMember"] == 4
