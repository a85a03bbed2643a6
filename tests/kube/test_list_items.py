"""Built-in LIST items come without kind/apiVersion from kube-apiserver (and from the double, which
follows it); both ClusterClient adapters give every item the type its list implies, so code that
sorts objects by kind (ClusterView.from_objects) sees every node."""

from __future__ import annotations

from pathlib import Path

from tests.apidouble_support.http.server import serve_double
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.store import Store
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.client import typed_items
from vgpu_guard.kube.resources import NODES, QUEUES

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}


def test_the_raw_list_has_no_item_types() -> None:
    store = Store()
    store.create(NODES, NODE)
    (item,) = store.list(NODES).items
    assert "kind" not in item and "apiVersion" not in item


async def test_both_adapters_type_the_items(tmp_path: Path) -> None:
    store = Store()
    store.create(NODES, NODE)
    memory = await MemoryClusterClient(store).list(NODES)
    async with serve_double(tmp_path, store=store) as double:
        aio = await AioClusterClient.from_kubeconfig(str(double.kubeconfig))
        try:
            over_https = await aio.list(NODES)
        finally:
            await aio.close()
    for listed in (memory, over_https):
        assert [(i["kind"], i["apiVersion"], i["metadata"]["name"]) for i in listed.items] == [
            ("Node", "v1", "n1")
        ]


def test_typed_items_keeps_what_the_server_sent() -> None:
    items = [{"kind": "Queue", "apiVersion": "scheduling.volcano.sh/v1beta1", "metadata": {"name": "q"}}, {}]
    typed = typed_items(items, QUEUES, "scheduling.volcano.sh/v1beta1")
    assert [(i["kind"], i["apiVersion"]) for i in typed] == [("Queue", "scheduling.volcano.sh/v1beta1")] * 2
