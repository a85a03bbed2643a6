"""The ledger arbiter over real HTTPS (issue 35): Volcano's writes reserved in the GPULedger at admission.

The webhook's cache holds the node; the API double stores the pods and the ledger it writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from importlib import resources
from typing import Any

import aiohttp
import yaml

from tests.apidouble_support.faults import FaultPlan
from tests.builders import config_with, default_config, gpu_node
from tests.webhook.conftest import admission_review, serving
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.store import Store
from vgpu_guard.engine.annotations import DEVICES_TO_ALLOCATE, VGPU_NODE
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import decode_ledger
from vgpu_guard.kube.errors import NotFound, Unavailable
from vgpu_guard.kube.informer import Informer
from vgpu_guard.kube.ledger_writer import LedgerWriter
from vgpu_guard.kube.resources import CRDS, EVENTS, LEDGERS, PODS
from vgpu_guard.webhook.server import RunningWebhook
from vgpu_guard.webhook.views import StaticViewSource

VOLCANO = "system:serviceaccount:volcano-system:volcano-scheduler"
IDS = "volcano.sh/vgpu-ids-new"


def api(faults: FaultPlan | None = None) -> tuple[Store, MemoryClusterClient]:
    store = Store()
    crd = resources.files("vgpu_guard").joinpath("data/crds/gpuledgers.vgpu-guard.io.yaml").read_text()
    store.create(CRDS, yaml.safe_load(crd))
    return store, MemoryClusterClient(store, faults=faults)


def stored_pod(store: Store, name: str) -> dict[str, Any]:
    limits = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "12288"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "volcano",
            "containers": [{"name": "cuda", "image": "cuda", "resources": {"limits": limits}}],
        },
    }
    created: dict[str, Any] = store.create(PODS, pod, namespace="default")
    return created


def binding_review(
    pod: dict[str, Any], raw: str, *, dry_run: bool = False, username: str = VOLCANO
) -> dict[str, Any]:
    meta = pod["metadata"]
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {
            "name": meta["name"],
            "namespace": "default",
            "uid": meta["uid"],
            # What Volcano >= 1.16 sends (device_info.go, DefaultBinder.Bind).
            "annotations": {IDS: raw, DEVICES_TO_ALLOCATE: raw, VGPU_NODE: "gpu-0"},
        },
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-0"},
    }
    review = admission_review(binding, kind="Binding", username=username, dry_run=dry_run)
    review["request"]["subResource"] = "binding"
    return review


def webhook(
    server_ssl: ssl.SSLContext, client: MemoryClusterClient, config: GuardConfig | None = None
) -> contextlib.AbstractAsyncContextManager[RunningWebhook]:
    config = config or default_config()
    view = ClusterView.from_objects([gpu_node("gpu-0", count=1)], config)
    return serving(config, StaticViewSource(view), server_ssl, client)


async def post(http: aiohttp.ClientSession, running: RunningWebhook, body: dict[str, Any]) -> dict[str, Any]:
    async with http.post(running.url + "/validate/pod-allocations", json=body) as response:
        assert response.status == 200
        answer: dict[str, Any] = (await response.json())["response"]
        return answer


async def test_a_volcano_binding_is_reserved_and_a_dry_run_reserves_nothing(
    http: aiohttp.ClientSession, server_ssl: ssl.SSLContext
) -> None:
    store, client = api()
    first, second = stored_pod(store, "web-0"), stored_pod(store, "web-1")
    raw = "GPU-gpu-0-0,NVIDIA,12288,0:;"
    async with webhook(server_ssl, client) as running:
        dry = await post(http, running, binding_review(first, raw, dry_run=True))
        assert dry["allowed"] is True
        try:
            store.get(LEDGERS, "gpu-0")
            raise AssertionError("a dry run wrote the ledger")
        except NotFound:
            pass
        assert (await post(http, running, binding_review(first, raw)))["allowed"] is True
        assert (await post(http, running, binding_review(second, raw)))["allowed"] is True
        ledger = decode_ledger(store.get(LEDGERS, "gpu-0"))
        assert sorted(a.name for a in ledger.allocations.values()) == ["web-0", "web-1"]
        # A dry run of a third sees the stored two, and says what a real write would meet.
        third = stored_pod(store, "web-2")
        answer = await post(http, running, binding_review(third, raw, dry_run=True))
        assert answer["allowed"] is False and answer["status"]["code"] == 403
        assert (
            "has 0 MiB free of 24576 MiB, 12288 MiB asked (held by default/web-0, default/web-1)"
            in (answer["status"]["message"])
        )


async def test_a_ledger_write_slower_than_arbiter_write_timeout_seconds_is_a_retriable_503(
    http: aiohttp.ClientSession, server_ssl: ssl.SSLContext
) -> None:
    faults = FaultPlan()
    faults.add(verb="create", resource=LEDGERS, delay=1.0)
    store, client = api(faults)
    pod = stored_pod(store, "web-0")
    config = config_with(arbiter={"writeTimeoutSeconds": 0.2})
    async with webhook(server_ssl, client, config) as running:
        answer = await post(http, running, binding_review(pod, "GPU-gpu-0-0,NVIDIA,12288,0:;"))
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 503
    assert answer["status"]["message"] == (
        "[vgpu-assignment-capacity] vgpu-guard could not reserve the GPU assignment (GPULedger gpu-0 was not "
        "written within 0.2 s (arbiter.writeTimeoutSeconds)); retry in a few seconds"
    )


async def test_a_writer_check_set_to_warn_keeps_its_warning_and_the_assignment_is_still_reserved(
    http: aiohttp.ClientSession, server_ssl: ssl.SSLContext
) -> None:
    """admission.rules allocation-annotations: warn lets a tenant's Binding through with a warning;
    the arbiter still reserves it and the warning reaches kubectl (it was dropped)."""
    store, client = api()
    pod = stored_pod(store, "web-0")
    config = config_with(admission={"rules": {"allocation-annotations": "warn"}})
    async with webhook(server_ssl, client, config) as running:
        answer = await post(
            http, running, binding_review(pod, "GPU-gpu-0-0,NVIDIA,12288,0:;", username="alice")
        )
    assert answer["allowed"] is True
    assert sorted(w.split(":", 1)[0] for w in answer["warnings"]) == [
        f"[allocation-annotations] metadata.annotations[{key}]"
        for key in (DEVICES_TO_ALLOCATE, IDS, VGPU_NODE)
    ]
    assert [a.name for a in decode_ledger(store.get(LEDGERS, "gpu-0")).allocations.values()] == ["web-0"]


async def synced(running: RunningWebhook) -> None:
    assert running.pods is not None
    async with asyncio.timeout(5):
        await running.pods.informer.wait_synced()


async def test_a_bindings_pod_comes_from_the_cache_of_unbound_pods_without_a_get(
    http: aiohttp.ClientSession, server_ssl: ssl.SSLContext
) -> None:
    """Issue 35's benchmark: one GET of the pod was a whole request on every Binding's path. A pod
    the synced cache holds with the Binding's UID is not read again: here every pod GET fails, and
    the Binding is still reserved (it was a 503)."""
    faults = FaultPlan()
    store, client = api(faults)
    pod = stored_pod(store, "web-0")
    async with webhook(server_ssl, client) as running:
        await synced(running)
        faults.add(verb="get", resource=PODS, error=Unavailable("the pod GET was sent"), times=None)
        answer = await post(http, running, binding_review(pod, "GPU-gpu-0-0,NVIDIA,12288,0:;"))
    assert answer["allowed"] is True
    assert [a.name for a in decode_ledger(store.get(LEDGERS, "gpu-0")).allocations.values()] == ["web-0"]
    assert ("get", "pods") not in faults.log


async def test_a_pod_the_cache_cannot_vouch_for_is_read_with_a_get(
    http: aiohttp.ClientSession, server_ssl: ssl.SSLContext
) -> None:
    """Not listed yet, or cached under another UID (deleted and created again under its name): the
    pod is read as stored, and an old UID finds no pod (the Binding's UID precondition fails it)."""
    faults = FaultPlan()
    faults.add(verb="list", resource=PODS, delay=30.0)  # the first LIST hangs: never synced
    faults.add(verb="get", resource=PODS, delay=0.001, times=None)  # counts the GETs
    store, client = api(faults)
    pod = stored_pod(store, "web-0")
    raw = "GPU-gpu-0-0,NVIDIA,12288,0:;"
    async with webhook(server_ssl, client) as running:
        assert running.pods is not None and not running.pods.synced
        assert (await post(http, running, binding_review(pod, raw)))["allowed"] is True
        assert faults.log == [("list", "pods"), ("get", "pods")]
    assert [a.name for a in decode_ledger(store.get(LEDGERS, "gpu-0")).allocations.values()] == ["web-0"]

    faults = FaultPlan()
    store, client = api(faults)
    pod = stored_pod(store, "web-1")
    async with webhook(server_ssl, client) as running:
        await synced(running)
        faults.add(verb="get", resource=PODS, delay=0.001, times=None)  # counts the GETs
        old = {**pod, "metadata": {**pod["metadata"], "uid": "the-uid-of-a-deleted-web-1"}}
        assert (await post(http, running, binding_review(old, raw)))["allowed"] is True
        assert faults.log == [("get", "pods")]
    with contextlib.suppress(NotFound):
        assert decode_ledger(store.get(LEDGERS, "gpu-0")).allocations == {}


async def test_a_pod_refused_again_and_again_is_told_what_holds_its_gpu_once(
    http: aiohttp.ClientSession, server_ssl: ssl.SSLContext
) -> None:
    """Issue 43: Volcano retries the same refused choice every session. At the fifth refusal within
    two minutes the pod gets one GPUAssignmentStuck Event naming the holders and whether Volcano
    counts them (here it does: its cache is catching up), and the counter says which."""
    store, client = api()
    holder, waiting = stored_pod(store, "holder"), stored_pod(store, "waiting")
    full = "GPU-gpu-0-0,NVIDIA,24576,0:;"
    async with webhook(server_ssl, client) as running:
        assert (await post(http, running, binding_review(holder, full)))["allowed"] is True
        target = {"apiVersion": "v1", "kind": "Node", "name": "gpu-0"}
        store.bind("default", "holder", {"metadata": {"name": "holder"}, "target": target})
        for attempt in range(7):
            answer = await post(http, running, binding_review(waiting, "GPU-gpu-0-0,NVIDIA,12288,0:;"))
            assert answer["allowed"] is False, attempt
        for _ in range(50):
            if store.list(EVENTS, namespace="default").items:
                break
            await asyncio.sleep(0.02)
        metric = running.registry.get_sample_value(
            "vgpu_guard_arbiter_stuck_refusals_total", {"holders": "counted-by-volcano"}
        )
    [event] = store.list(EVENTS, namespace="default").items
    assert (event["reason"], event["type"]) == ("GPUAssignmentStuck", "Warning")
    assert event["involvedObject"]["name"] == "waiting"
    assert event["involvedObject"]["uid"] == waiting["metadata"]["uid"]
    assert event["message"] == (
        "vgpu-guard refused the GPU assignment of pod default/waiting on node gpu-0 5 times within 120 s; held "
        "by GPU-gpu-0-0: default/holder 24576 MiB (bound; Volcano counts it). Volcano counts every holder: its "
        "cache is catching up and the next sessions choose again"
    )
    assert metric == 1


async def test_the_arbiters_writer_follows_the_ledger_informer_while_the_webhook_runs(
    config: GuardConfig, views: StaticViewSource, server_ssl: ssl.SSLContext
) -> None:
    """``serve`` hands ``running_webhook`` its cache's ledger informer: the arbiter's writer sees
    each DELETE (LedgerWriter.observe, tests/kube/test_ledger_writer.py) while the webhook serves,
    and is detached when it stops (a restarted webhook must not leave its old writer behind)."""
    client = MemoryClusterClient(Store())
    informer = Informer(client, LEDGERS)
    before = list(informer._handlers)  # the informer's handler list itself: what is wired is the point
    async with serving(config, views, server_ssl, client, ledgers=informer):
        [added] = [h for h in informer._handlers if h not in before]
        assert getattr(added, "__name__", "") == "observe"
        assert isinstance(getattr(added, "__self__", None), LedgerWriter)
    assert informer._handlers == before
