"""Gang placements are released when the gang is over, and kept while any member lives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.apidouble_support.faults import FaultPlan, unavailable_error
from tests.builders import config_with
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.store import Store
from vgpu_guard.controller.gang_gc import release_stale_placements
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.kube.resources import CRDS, GANG_PLACEMENTS, NAMESPACES, PODGROUPS, PODS

ROOT = Path(__file__).resolve().parents[2]
CONFIG = config_with(topology={"ibClusterLabel": "example.com/ib-cluster"})


async def release(store: Store, client: MemoryClusterClient | None = None) -> list[tuple[str, str]]:
    """What the run loop does with its caches: the placements and PodGroups as a view, the pods."""
    objects = [*store.list(GANG_PLACEMENTS).items, *store.list(PODGROUPS).items]
    view = ClusterView.from_objects(objects, CONFIG)
    return await release_stale_placements(client or MemoryClusterClient(store), view, store.list(PODS).items)


def setup() -> Store:
    store = Store()
    for crd in (
        ROOT / "manifests/crds/gangplacements.vgpu-guard.io.yaml",
        ROOT / "vgpu_guard/data/crds/volcano/scheduling.volcano.sh_podgroups.yaml",
    ):
        store.create(CRDS, yaml.safe_load(crd.read_text()))
    store.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    return store


def placement(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "vgpu-guard.io/v1alpha1",
        "kind": "GangPlacement",
        "metadata": {"name": group, "namespace": "ml"},
        "spec": {"group": group, "cluster": "ib-a", "minMember": 2},
    }


def podgroup(group: str, phase: str | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": group, "namespace": "ml"},
        "spec": {"minMember": 2},
    }
    return obj if phase is None else {**obj, "status": {"phase": phase}}


def member(group: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "annotations": {"scheduling.k8s.io/group-name": group}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }


async def test_finished_gangs_are_released_and_live_ones_kept() -> None:
    store = setup()
    for group in ("deleted", "completed", "running", "orphan-live", "completed-live"):
        store.create(GANG_PLACEMENTS, placement(group), namespace="ml")
    store.create(PODGROUPS, podgroup("completed", "Completed"), namespace="ml")
    store.create(PODGROUPS, podgroup("running", "Running"), namespace="ml")
    store.create(PODGROUPS, podgroup("completed-live", "Completed"), namespace="ml")
    store.create(PODS, member("orphan-live", "o-0"), namespace="ml")
    store.create(PODS, member("completed-live", "c-0"), namespace="ml")
    done = store.create(PODS, member("completed", "d-0"), namespace="ml")
    store.patch(
        PODS,
        done["metadata"]["name"],
        {"status": {"phase": "Succeeded"}},
        namespace="ml",
        subresource="status",
    )
    released = await release(store)
    assert released == [("ml", "completed"), ("ml", "deleted")]
    left = sorted(o["metadata"]["name"] for o in store.list(GANG_PLACEMENTS, namespace="ml").items)
    assert left == ["completed-live", "orphan-live", "running"]
    assert await release(store) == []


async def test_api_errors_are_logged_not_raised() -> None:
    store = setup()
    store.create(GANG_PLACEMENTS, placement("deleted"), namespace="ml")
    faults = FaultPlan()
    faults.add(verb="delete", resource=GANG_PLACEMENTS, error=unavailable_error())
    assert await release(store, MemoryClusterClient(store, faults=faults)) == []
    assert len(store.list(GANG_PLACEMENTS, namespace="ml").items) == 1
    assert await release(store) == [("ml", "deleted")]  # the next round tries again


async def test_without_placements_nothing_is_sent() -> None:
    store = setup()
    store.create(PODS, member("running", "r-0"), namespace="ml")
    faults = FaultPlan()
    faults.add(error=unavailable_error(), times=None)  # counts every request, of any verb
    assert await release(store, MemoryClusterClient(store, faults=faults)) == []
    assert faults.rules[0].hits == 0
