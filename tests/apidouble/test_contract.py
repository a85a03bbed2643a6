"""The API double pinned to /work/shared/reference/apiserver-contract.md, one test per behaviour.

Each test names the Kubernetes document or source file the behaviour comes from. Tests that take
the ``client`` fixture run twice: through ``MemoryClusterClient`` (in-process) and through
``AioClusterClient`` (kubernetes.aio over HTTPS), so both adapters are held to the same contract.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from vgpu_guard.apidouble.store import Store
from vgpu_guard.kube.errors import AlreadyExists, Conflict, Expired, Invalid, KubeError, NotFound
from vgpu_guard.kube.resources import CRDS, EVENTS, LEASES, NODES, PODGROUPS, PODS, QUEUES, Resource

from .conftest import FakeClock
from .objects import WIDGETS, node, pod, volcano_crd, widget, widget_crd

NEW_EVENTS = Resource("events.k8s.io", "v1", "events", "Event", namespaced=True)
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
STALE = (
    'Operation cannot be fulfilled on pods "p": the object has been modified; '
    "please apply your changes to the latest version and try again"
)


async def collect(stream: Any, n: int, *, within: float = 5.0) -> list[Any]:
    """The first ``n`` non-bookmark events of a watch."""
    out: list[Any] = []

    async def run() -> None:
        async for ev in stream:
            if ev.type != "BOOKMARK":
                out.append(ev)
            if len(out) >= n:
                return

    await asyncio.wait_for(run(), within)
    await stream.aclose()
    return out


# -- objects and concurrency ---------------------------------------------------------------------
async def test_every_write_returns_a_new_resource_version(client: Any) -> None:
    # API Concepts, "Resource versions": every modification gets a new, opaque resourceVersion.
    created = await client.create(PODS, pod("p"))
    patched = await client.patch(PODS, "p", {"metadata": {"labels": {"a": "b"}}}, namespace="default")
    replaced = await client.replace(
        PODS, {**patched, "metadata": {**patched["metadata"], "labels": {"a": "c"}}}
    )
    await client.bind("default", "p", node="n1", annotations={})
    bound = await client.get(PODS, "p", namespace="default")
    versions = [o["metadata"]["resourceVersion"] for o in (created, patched, replaced, bound)]
    assert all(isinstance(v, str) for v in versions)
    assert len(set(versions)) == 4


async def test_stale_resource_version_is_a_conflict_with_the_servers_message(client: Any) -> None:
    # API Concepts, "Concurrency control and consistency"; generic registry store.go Update
    # (resourceVersion precondition -> errors.NewConflict with OptimisticLockErrorMsg).
    old = await client.create(PODS, pod("p"))
    await client.patch(PODS, "p", {"metadata": {"labels": {"x": "1"}}}, namespace="default")
    with pytest.raises(Conflict) as err:
        await client.replace(PODS, old)
    assert err.value.code == 409 and err.value.reason == "Conflict"
    assert err.value.message == STALE
    assert type(err.value) is Conflict


async def test_update_without_resource_version_is_unconditional(client: Any) -> None:
    # API Concepts: an update without metadata.resourceVersion is not guarded (last write wins).
    old = await client.create(PODS, pod("p"))
    await client.patch(PODS, "p", {"metadata": {"labels": {"x": "1"}}}, namespace="default")
    body = {**old, "metadata": {k: v for k, v in old["metadata"].items() if k != "resourceVersion"}}
    body["metadata"]["labels"] = {"y": "2"}
    out = await client.replace(PODS, body)
    assert out["metadata"]["labels"] == {"y": "2"}


async def test_already_exists_and_not_found_are_status_objects(client: Any) -> None:
    # apimachinery pkg/api/errors/errors.go NewAlreadyExists / NewNotFound; API Concepts "Status".
    await client.create(PODS, pod("p"))
    with pytest.raises(AlreadyExists) as exists:
        await client.create(PODS, pod("p"))
    assert exists.value.message == 'pods "p" already exists'
    assert exists.value.status["details"] == {"name": "p", "kind": "pods"}
    assert {"kind", "apiVersion", "status", "message", "reason", "code"} <= set(exists.value.status)
    with pytest.raises(NotFound) as missing:
        await client.get(PODS, "nope", namespace="default")
    assert missing.value.message == 'pods "nope" not found'
    assert missing.value.status["status"] == "Failure" and missing.value.status["code"] == 404
    # Without the Queue CRD its group is unknown: the real server answers "404 page not found" text.
    served = r"the resource is not served: is its CRD queues\.scheduling\.volcano\.sh installed\?$"
    with pytest.raises(
        NotFound, match=r"^get scheduling\.volcano\.sh/v1beta1/queues q: HTTP 404\b.*" + served
    ):
        await client.get(QUEUES, "q")


async def test_generate_name_appends_five_random_characters(client: Any) -> None:
    # k8s.io/apiserver/pkg/storage/names/generate.go: SimpleNameGenerator, 5 random characters.
    body = pod("")
    body["metadata"] = {"generateName": "worker-", "namespace": "default"}
    a = await client.create(PODS, body)
    b = await client.create(PODS, body)
    for made in (a, b):
        assert re.fullmatch(r"worker-[bcdfghjklmnpqrstvwxz2456789]{5}", made["metadata"]["name"])
    assert a["metadata"]["name"] != b["metadata"]["name"]


async def test_pod_create_resets_status_to_pending(client: Any) -> None:
    # pkg/registry/core/pod/strategy.go podStrategy.PrepareForCreate: status = {Phase: Pending, QOSClass}.
    body = pod("p")
    body["status"] = {"phase": "Running", "podIP": "10.0.0.1"}
    out = await client.create(PODS, body)
    assert out["status"] == {"phase": "Pending", "qosClass": "BestEffort"}


async def test_main_resource_write_ignores_status_and_status_write_ignores_spec(client: Any) -> None:
    # pod/strategy.go PrepareForUpdate (status kept) and podStatusStrategy (spec kept, metadata such as
    # labels may change; contract probe test_pod_status_writes_change_status_and_metadata_but_not_spec).
    await client.create(PODS, pod("p"))
    cur = await client.get(PODS, "p", namespace="default")
    cur["status"] = {"phase": "Running"}
    cur["metadata"]["labels"] = {"seen": "yes"}
    out = await client.replace(PODS, cur)
    assert out["status"]["phase"] == "Pending" and out["metadata"]["labels"] == {"seen": "yes"}
    out["status"]["phase"] = "Running"
    out["spec"]["activeDeadlineSeconds"] = 5
    out["metadata"]["labels"] = {"seen": "changed"}
    st = await client.replace_status(PODS, out)
    assert st["status"]["phase"] == "Running"
    assert "activeDeadlineSeconds" not in st["spec"] and st["metadata"]["labels"] == {"seen": "changed"}


async def test_nodes_may_be_created_with_status_then_status_goes_through_the_subresource(client: Any) -> None:
    # pkg/registry/core/node/strategy.go: PrepareForCreate keeps status; PrepareForUpdate keeps old status.
    made = await client.create(NODES, node("n1"))
    assert made["status"]["allocatable"] == {"nvidia.com/gpu": "8"}
    made["status"]["allocatable"] = {"nvidia.com/gpu": "4"}
    after = await client.replace(NODES, made)
    assert after["status"]["allocatable"] == {"nvidia.com/gpu": "8"}
    patched = await client.patch(
        NODES, "n1", {"status": {"allocatable": {"nvidia.com/gpu": "4"}}}, subresource="status"
    )
    assert patched["status"]["allocatable"] == {"nvidia.com/gpu": "4"}


async def test_requests_default_to_limits_and_extended_resources_must_be_integers(client: Any) -> None:
    # pkg/apis/core/v1/defaults.go SetDefaults_Pod (requests from limits); validation.go
    # (extended resources: integer quantities, requests == limits).
    out = await client.create(PODS, pod("ok", resources={"limits": {"volcano.sh/vgpu-memory": "12Gi"}}))
    assert out["spec"]["containers"][0]["resources"]["requests"] == {"volcano.sh/vgpu-memory": "12Gi"}
    with pytest.raises(Invalid) as frac:
        await client.create(PODS, pod("frac", resources={"limits": {"nvidia.com/gpu": "500m"}}))
    # limits default the requests, so both carry the fractional value (limits are checked first).
    assert frac.value.message == (
        'Pod "frac" is invalid: [spec.containers[0].resources.limits[nvidia.com/gpu]: '
        'Invalid value: "500m": must be an integer, spec.containers[0].resources.requests[nvidia.com/gpu]: '
        'Invalid value: "500m": must be an integer]'
    )
    assert frac.value.code == 422
    with pytest.raises(Invalid, match=re.escape("must be equal to nvidia.com/gpu limit of 1")):
        await client.create(
            PODS,
            pod("neq", resources={"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "2"}}),
        )
    causes = frac.value.status["details"]["causes"]
    assert any(c["field"].endswith("[nvidia.com/gpu]") for c in causes)


async def test_graceful_deletion_of_a_bound_pod_keeps_it_terminating(client: Any, store: Store) -> None:
    # pod/strategy.go CheckGracefulDelete + registry/rest/delete.go BeforeDelete: bound, non-terminal
    # pods get deletionTimestamp (+30 s default) and stay until deleted with grace 0.
    await client.create(PODS, pod("bound"))
    await client.bind("default", "bound", node="n1", annotations={})
    await client.delete(PODS, "bound", namespace="default")
    still = await client.get(PODS, "bound", namespace="default")
    assert still["metadata"]["deletionGracePeriodSeconds"] == 30
    assert still["metadata"]["deletionTimestamp"] == "2025-01-01T12:00:30Z"
    await client.delete(PODS, "bound", namespace="default", grace_period_seconds=0)
    with pytest.raises(NotFound):
        await client.get(PODS, "bound", namespace="default")
    await client.create(PODS, pod("unbound"))
    await client.delete(PODS, "unbound", namespace="default")
    with pytest.raises(NotFound):
        await client.get(PODS, "unbound", namespace="default")


async def test_terminal_bound_pods_are_deleted_at_once(client: Any, store: Store) -> None:
    # pod/strategy.go CheckGracefulDelete: Succeeded/Failed pods get grace period 0.
    await client.create(PODS, pod("done"))
    await client.bind("default", "done", node="n1", annotations={})
    cur = await client.get(PODS, "done", namespace="default")
    cur["status"]["phase"] = "Succeeded"
    await client.replace_status(PODS, cur)
    await client.delete(PODS, "done", namespace="default")
    with pytest.raises(NotFound):
        await client.get(PODS, "done", namespace="default")


async def test_finalizers_hold_an_object_until_removed(client: Any) -> None:
    # API Concepts / "Finalizers" docs; registry/generic/registry/store.go deleteWithoutFinalizers.
    body = {"metadata": {"name": "l", "namespace": "default", "finalizers": ["example.com/hold"]}, "spec": {}}
    await client.create(LEASES, body)
    await client.delete(LEASES, "l", namespace="default")
    held = await client.get(LEASES, "l", namespace="default")
    assert held["metadata"]["deletionTimestamp"]
    with pytest.raises(Invalid, match="no new finalizers can be added"):
        await client.patch(
            LEASES, "l", {"metadata": {"finalizers": ["example.com/hold", "x.io/y"]}}, namespace="default"
        )
    await client.patch(LEASES, "l", {"metadata": {"finalizers": None}}, namespace="default")
    with pytest.raises(NotFound):
        await client.get(LEASES, "l", namespace="default")


async def test_delete_uid_precondition(client: Any) -> None:
    # apimachinery meta/v1 Preconditions, checked by registry/rest/delete.go BeforeDelete.
    await client.create(PODS, pod("p"))
    with pytest.raises(
        Conflict, match=r"the UID in the precondition \(wrong\) does not match the UID in record"
    ):
        await client.delete(PODS, "p", namespace="default", uid="wrong")


# -- pods/binding -----------------------------------------------------------------------------------
async def test_binding_sets_node_merges_annotations_and_marks_scheduled(client: Any) -> None:
    # pkg/registry/core/pod/storage/storage.go BindingREST.Create / setPodHostAndAnnotations.
    body = pod("p")
    body["metadata"]["annotations"] = {"keep": "me", "over": "old"}
    made = await client.create(PODS, body)
    await client.bind(
        "default",
        "p",
        node="gpu-1",
        annotations={"over": "new", "volcano.sh/vgpu-ids-new": "x"},
        uid=made["metadata"]["uid"],
    )
    out = await client.get(PODS, "p", namespace="default")
    assert out["spec"]["nodeName"] == "gpu-1"  # binding does not check that the node exists
    assert out["metadata"]["annotations"] == {"keep": "me", "over": "new", "volcano.sh/vgpu-ids-new": "x"}
    cond = [c for c in out["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert cond and cond[0]["status"] == "True"


async def test_binding_twice_is_a_conflict_naming_the_node(client: Any) -> None:
    # storage.go setPodHostAndAnnotations: NewConflict(pods/binding, "pod %v is already assigned to node %q").
    await client.create(PODS, pod("p"))
    await client.bind("default", "p", node="gpu-1", annotations={})
    with pytest.raises(Conflict) as err:
        await client.bind("default", "p", node="gpu-2", annotations={})
    assert (
        err.value.message
        == 'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "gpu-1"'
    )


async def test_binding_a_pod_being_deleted_fails(client: Any) -> None:
    # storage.go setPodHostAndAnnotations: "pod %s is being deleted, cannot be assigned to a host",
    # a plain error that assignPod turns into a Conflict on pods/binding (contract: test_binding_refusals).
    body = pod("p")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    await client.create(PODS, body)
    await client.delete(PODS, "p", namespace="default")
    with pytest.raises(Conflict) as err:
        await client.bind("default", "p", node="gpu-1", annotations={})
    assert err.value.code == 409 and err.value.message == (
        'Operation cannot be fulfilled on pods/binding "p": pod p is being deleted, cannot be assigned to a host'
    )


async def test_binding_with_a_wrong_uid_is_a_precondition_conflict(client: Any) -> None:
    # storage.go BindingREST.Create: Preconditions{UID: binding.UID} -> 409.
    await client.create(PODS, pod("p"))
    with pytest.raises(Conflict, match="Precondition failed: UID in precondition: 00000000"):
        await client.bind(
            "default", "p", node="gpu-1", annotations={}, uid="00000000-0000-0000-0000-000000000000"
        )
    assert "nodeName" not in (await client.get(PODS, "p", namespace="default"))["spec"]


async def test_pod_spec_updates_are_forbidden_except_a_few_fields(client: Any) -> None:
    # validation.go ValidatePodUpdate: nodeName can only be set through pods/binding.
    made = await client.create(PODS, pod("p"))
    with pytest.raises(Invalid, match="pod updates may not change fields other than"):
        await client.patch(PODS, "p", {"spec": {"nodeName": "n1"}}, namespace="default")
    made["spec"]["activeDeadlineSeconds"] = 60
    assert (await client.replace(PODS, made))["spec"]["activeDeadlineSeconds"] == 60


# -- list and watch ---------------------------------------------------------------------------------
async def test_list_resource_version_and_pagination(client: Any) -> None:
    # API Concepts, "Retrieving large results sets in chunks" (limit/continue, remainingItemCount).
    for i in range(5):
        await client.create(PODS, pod(f"p{i}"))
    first = await client.list(PODS, namespace="default", limit=2)
    assert [p["metadata"]["name"] for p in first.items] == ["p0", "p1"]
    assert first.continue_token and first.remaining_item_count == 3
    second = await client.list(PODS, namespace="default", limit=2, continue_token=first.continue_token)
    third = await client.list(PODS, namespace="default", limit=2, continue_token=second.continue_token)
    assert [p["metadata"]["name"] for p in second.items + third.items] == ["p2", "p3", "p4"]
    assert not third.continue_token
    assert first.resource_version == second.resource_version  # one consistent collection version


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=a", ["a1", "a2"]),
        ("app==a", ["a1", "a2"]),
        ("app!=a", ["b1", "none"]),
        ("app in (a,b)", ["a1", "a2", "b1"]),
        ("app notin (a)", ["b1", "none"]),
        ("app", ["a1", "a2", "b1"]),
        ("!app", ["none"]),
        ("app=a,tier=gpu", ["a2"]),
    ],
)
async def test_label_selectors(client: Any, selector: str, expected: list[str]) -> None:
    # apimachinery pkg/labels/selector.go: =, ==, !=, in, notin, exists, !key; != and notin match absent keys.
    for name, labels in (
        ("a1", {"app": "a"}),
        ("a2", {"app": "a", "tier": "gpu"}),
        ("b1", {"app": "b"}),
        ("none", {}),
    ):
        await client.create(PODS, pod(name, labels=labels))
    got = await client.list(PODS, namespace="default", label_selector=selector)
    assert sorted(p["metadata"]["name"] for p in got.items) == expected


async def test_field_selectors_for_pods_nodes_and_custom_resources(client: Any) -> None:
    # pkg/registry/core/pod/strategy.go ToSelectableFields; node strategy (spec.unschedulable);
    # apiextensions: custom resources select on metadata.name and metadata.namespace.
    await client.create(PODS, pod("a", schedulerName="vgpu-guard"))
    await client.create(PODS, pod("b"))
    await client.bind("default", "b", node="n1", annotations={})
    ours = await client.list(PODS, field_selector="spec.schedulerName=vgpu-guard")
    assert [p["metadata"]["name"] for p in ours.items] == ["a"]
    unbound = await client.list(PODS, field_selector="spec.nodeName=,status.phase=Pending")
    assert [p["metadata"]["name"] for p in unbound.items] == ["a"]
    on_n1 = await client.list(PODS, field_selector="spec.nodeName=n1,metadata.namespace=default")
    assert [p["metadata"]["name"] for p in on_n1.items] == ["b"]
    await client.create(NODES, node("n1"))
    await client.create(NODES, node("n2", unschedulable=True))
    free = await client.list(NODES, field_selector="spec.unschedulable!=true")
    assert [n["metadata"]["name"] for n in free.items] == ["n1"]
    await client.create(CRDS, volcano_crd("scheduling.volcano.sh_queues"))
    await client.create(QUEUES, {"metadata": {"name": "q1"}, "spec": {"weight": 1}})
    await client.create(QUEUES, {"metadata": {"name": "q2"}, "spec": {"weight": 1}})
    assert [
        q["metadata"]["name"] for q in (await client.list(QUEUES, field_selector="metadata.name=q2")).items
    ] == ["q2"]
    with pytest.raises(KubeError, match=re.escape("field label not supported: spec.weight")) as err:
        await client.list(QUEUES, field_selector="spec.weight=1")
    assert err.value.code == 400


async def test_watch_streams_every_change_after_a_version_including_deletes(client: Any) -> None:
    # API Concepts, "Efficient detection of changes": ADDED/MODIFIED/DELETED after resourceVersion R.
    start = (await client.list(PODS, namespace="default")).resource_version
    await client.create(PODS, pod("p"))
    await client.patch(PODS, "p", {"metadata": {"labels": {"x": "1"}}}, namespace="default")
    await client.delete(PODS, "p", namespace="default")
    events = await collect(client.watch(PODS, resource_version=start, namespace="default"), 3)
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    versions = [int(e.object["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[0] > int(start)


async def test_watch_from_a_version_older_than_the_window_is_expired(client: Any, store: Store) -> None:
    # API Concepts, "410 Gone responses"; storage/cacher/watch_cache.go:
    # "too old resource version: %d (%d)" with the oldest version the cache still holds minus one.
    start = (await client.list(PODS, namespace="default")).resource_version
    for i in range(store.watch_window + 5):
        await client.create(PODS, pod(f"p{i}"))
    with pytest.raises(Expired) as err:
        await collect(client.watch(PODS, resource_version=start), 1)
    assert err.value.code == 410
    assert re.fullmatch(rf"too old resource version: {start} \(\d+\)", err.value.message)


async def test_watch_bookmarks_carry_only_the_newest_version(client: Any) -> None:
    # API Concepts, "Watch bookmarks": BOOKMARK objects hold only metadata.resourceVersion.
    # storage/cacher: a bookmark goes out once pods changed after the watch began (here: a pod
    # the watch's selector does not show).
    rv = (await client.list(PODS)).resource_version
    await client.create(PODS, pod("elsewhere", labels={"x": "other"}))
    async for ev in client.watch(PODS, resource_version=rv, label_selector="x=mine", timeout_seconds=5):
        assert ev.type == "BOOKMARK"
        assert set(ev.object["metadata"]) == {"resourceVersion"} and ev.object["kind"] == "Pod"
        assert int(ev.object["metadata"]["resourceVersion"]) > int(rv)
        break
    else:
        pytest.fail("no bookmark")


async def test_watch_timeout_seconds_ends_the_stream_normally(client: Any) -> None:
    # API Concepts: timeoutSeconds bounds a watch; the server closes it without an error.
    rv = (await client.list(PODS)).resource_version
    loop = asyncio.get_running_loop()
    began = loop.time()
    async for _ev in client.watch(PODS, resource_version=rv, timeout_seconds=1, allow_bookmarks=False):
        pytest.fail("no event expected")
    assert 0.9 <= loop.time() - began < 5


async def test_watch_with_a_selector_turns_leaving_objects_into_deletes(client: Any) -> None:
    # storage/cacher/cacher.go: an object that stops matching the selector is sent as DELETED.
    rv = (await client.list(PODS)).resource_version
    await client.create(PODS, pod("p", labels={"team": "gpu"}))
    await client.patch(PODS, "p", {"metadata": {"labels": {"team": "cpu"}}}, namespace="default")
    events = await collect(client.watch(PODS, resource_version=rv, label_selector="team=gpu"), 2)
    assert [e.type for e in events] == ["ADDED", "DELETED"]


# -- custom resources ------------------------------------------------------------------------------
async def test_custom_resources_are_validated_pruned_and_defaulted(client: Any) -> None:
    # "Extend the Kubernetes API with CustomResourceDefinitions": Validation, Field pruning, Defaulting;
    # apiextensions-apiserver pkg/apiserver/schema/pruning and defaulting.
    await client.create(CRDS, widget_crd())
    made = await client.create(
        WIDGETS, widget("w", junk=1, free={"anything": {"goes": True}}, limits={"a": 1})
    )
    assert "junk" not in made["spec"]  # pruned
    assert made["spec"]["free"] == {"anything": {"goes": True}}  # x-kubernetes-preserve-unknown-fields
    assert made["spec"]["color"] == "red"  # schema default
    with pytest.raises(Invalid) as err:
        await client.create(
            WIDGETS,
            {**widget("bad"), "spec": {"size": 0, "color": "green", "name": "X1", "tags": ["a", "b", "c"]}},
        )
    fields = sorted(c["field"] for c in err.value.status["details"]["causes"])
    assert fields == ["spec.color", "spec.name", "spec.size", "spec.tags"]
    assert err.value.message.startswith('Widget.example.com "bad" is invalid: [')
    assert 'spec.color: Unsupported value: "green": supported values: "red", "blue"' in err.value.message
    assert (
        "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"
        in err.value.message
    )
    with pytest.raises(Invalid, match=re.escape("spec.size: Required value")):
        await client.create(WIDGETS, {**widget("nosize"), "spec": {}})


async def test_int_or_string_fields_accept_both_and_nothing_else(client: Any) -> None:
    # Structural schemas: x-kubernetes-int-or-string.
    await client.create(CRDS, widget_crd())
    await client.create(WIDGETS, widget("a", port=80))
    await client.create(WIDGETS, widget("b", port="http"))
    with pytest.raises(Invalid, match=re.escape("spec.port")):
        await client.create(WIDGETS, widget("c", port=[1]))


async def test_custom_resource_status_subresource_only_when_declared(client: Any) -> None:
    # CRD docs, "Subresources": with status declared, main writes ignore status and create drops it;
    # PodGroup declares no subresources, so pods-like /status does not exist.
    await client.create(CRDS, widget_crd())
    made = await client.create(WIDGETS, {**widget("w"), "status": {"ready": True}})
    assert "status" not in made
    made["status"] = {"ready": True}
    assert "status" not in await client.replace(WIDGETS, made)
    out = await client.patch(
        WIDGETS,
        "w",
        {"status": {"ready": True}, "spec": {"size": 9}},
        namespace="default",
        subresource="status",
    )
    assert out["status"] == {"ready": True} and out["spec"]["size"] == 1
    await client.create(CRDS, volcano_crd("scheduling.volcano.sh_podgroups"))
    await client.create(
        PODGROUPS,
        {
            "metadata": {"name": "g", "namespace": "default"},
            "spec": {"minMember": 2},
            "status": {"phase": "Pending"},
        },
    )
    # The CRD handler answers an undeclared subresource with NotFound of the object (checked
    # against a real 1.20 server by tests/contract/test_crds.py).
    with pytest.raises(NotFound, match=r'podgroups\.scheduling\.volcano\.sh "g" not found'):
        await client.patch(
            PODGROUPS, "g", {"status": {"phase": "Running"}}, namespace="default", subresource="status"
        )
    pg = await client.patch(PODGROUPS, "g", {"status": {"phase": "Running"}}, namespace="default")
    assert pg["status"]["phase"] == "Running"  # without the subresource, status is ordinary data


async def test_only_served_versions_answer_and_scope_is_enforced(client: Any) -> None:
    # CRD versioning docs: versions with served: false are not served; scope from spec.scope.
    await client.create(CRDS, widget_crd(served_old=True))
    old = Resource("example.com", "v0", "widgets", "Widget", namespaced=True)
    with pytest.raises(NotFound):
        await client.list(old, namespace="default")
    await client.create(CRDS, volcano_crd("scheduling.volcano.sh_queues"))
    q = await client.create(
        QUEUES, {"metadata": {"name": "q", "namespace": "ignored"}, "spec": {"weight": 1}}
    )
    assert "namespace" not in q["metadata"]  # cluster-scoped


async def test_volcano_crds_install_and_serve(client: Any) -> None:
    # The four Volcano CRDs from package data install like kubectl apply would, and are Established.
    for name in (
        "batch.volcano.sh_jobs",
        "scheduling.volcano.sh_podgroups",
        "scheduling.volcano.sh_queues",
        "topology.volcano.sh_hypernodes",
    ):
        await client.create(CRDS, volcano_crd(name))
    crd = await client.get(CRDS, "queues.scheduling.volcano.sh")
    assert {c["type"] for c in crd["status"]["conditions"]} == {"Established", "NamesAccepted"}
    job = Resource("batch.volcano.sh", "v1alpha1", "jobs", "Job", namespaced=True)
    made = await client.create(
        job,
        {
            "metadata": {"name": "j", "namespace": "default"},
            "spec": {
                "minAvailable": 1,
                "tasks": [
                    {
                        "name": "t",
                        "replicas": 1,
                        "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
                    }
                ],
            },
        },
    )
    assert made["spec"]["tasks"][0]["replicas"] == 1


# -- leases and events ------------------------------------------------------------------------------
async def test_lease_leader_election_is_cas_on_resource_version(client: Any) -> None:
    # client-go tools/leaderelection/resourcelock/leaselock.go: Update with the read resourceVersion.
    lease = await client.create(
        LEASES,
        {
            "metadata": {"name": "vgpu-guard", "namespace": "kube-system"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 0},
        },
    )
    lease["spec"]["holderIdentity"] = "b"
    won = await client.replace(LEASES, lease)
    lease["spec"]["holderIdentity"] = "c"
    with pytest.raises(Conflict):
        await client.replace(LEASES, lease)  # c read the old version: it lost
    assert won["spec"]["holderIdentity"] == "b"


async def test_events_are_served_by_both_event_apis(client: Any) -> None:
    # pkg/apis/events/v1 conversion: core/v1 Events and events.k8s.io/v1 share one storage.
    await client.create(
        EVENTS,
        {
            "metadata": {"name": "e1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
            "reason": "Unschedulable",
            "message": "0/8 nodes",
            "type": "Warning",
            "count": 1,
        },
    )
    seen = await client.get(NEW_EVENTS, "e1", namespace="default")
    assert seen["regarding"]["name"] == "p" and seen["note"] == "0/8 nodes" and seen["deprecatedCount"] == 1
    await client.create(
        NEW_EVENTS,
        {
            "metadata": {"name": "e2", "namespace": "default"},
            "regarding": {"kind": "Pod", "name": "q"},
            "reason": "Bound",
            "note": "ok",
            "type": "Normal",
            "eventTime": "2025-01-01T00:00:00.000000Z",
            "reportingController": "vgpu-guard",
            "reportingInstance": "x",
            "action": "Bind",
        },
    )
    core = await client.list(EVENTS, namespace="default", field_selector="involvedObject.name=q")
    assert [e["message"] for e in core.items] == ["ok"]


def _event(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "FailedScheduling",
        "message": "0/8 nodes",
        "type": "Warning",
    }


async def test_events_expire_an_event_ttl_after_their_last_write(
    client: Any, store: Store, fake_clock: FakeClock
) -> None:
    # pkg/registry/core/event/storage: TTLFunc gives every Event write (create and update) the
    # --event-ttl lease (default 1 h); etcd deletes the key when it runs out and watchers see DELETED.
    # etcd3's lease manager reuses a lease for up to 60 s, so an Event may outlive its TTL by that
    # much: every check below allows the margin.
    ttl, margin = 3600, 60
    assert store.event_ttl.total_seconds() == ttl
    await client.create(EVENTS, _event("old"))
    await client.create(EVENTS, _event("kept"))
    start = (await client.list(EVENTS, namespace="default")).resource_version
    fake_clock.advance(3000)
    await client.patch(EVENTS, "kept", {"count": 2}, namespace="default")  # a write renews the lease
    await client.create(EVENTS, _event("new"))
    fake_clock.advance(ttl - 3000 + margin + 1)  # old: past TTL + margin; kept and new: 661 s old
    names = [e["metadata"]["name"] for e in (await client.list(EVENTS, namespace="default")).items]
    assert names == ["kept", "new"]
    with pytest.raises(NotFound):
        await client.get(EVENTS, "old", namespace="default")
    changes = await collect(client.watch(EVENTS, resource_version=start, namespace="default"), 3)
    assert [(e.type, e.object["metadata"]["name"]) for e in changes] == [
        ("MODIFIED", "kept"),
        ("ADDED", "new"),
        ("DELETED", "old"),
    ]
    fake_clock.advance(ttl)  # kept and new were last written 4,261 s ago
    assert (await client.list(EVENTS, namespace="default")).items == []
    # Other resources never expire.
    await client.create(PODS, pod("p"))
    fake_clock.advance(10 * ttl)
    assert [p["metadata"]["name"] for p in (await client.list(PODS, namespace="default")).items] == ["p"]


async def test_priority_class_name_sets_spec_priority(client: Any) -> None:
    # plugin/pkg/admission/priority/admission.go: priorityClassName -> spec.priority; unknown -> 403.
    await client.create(PRIORITY_CLASSES, {"metadata": {"name": "high"}, "value": 1000})
    made = await client.create(PODS, pod("p", priorityClassName="high"))
    assert made["spec"]["priority"] == 1000
    with pytest.raises(KubeError, match="no PriorityClass with name nope was found") as err:
        await client.create(PODS, pod("q", priorityClassName="nope"))
    assert err.value.code == 403
    # An integer priority in the spec must match what admission computes, class name or not.
    for extra in ({"priority": 5}, {"priority": 5, "priorityClassName": "high"}):
        with pytest.raises(
            KubeError, match=r"the integer value of priority \(5\) must not be provided"
        ) as err:
            await client.create(PODS, pod("r", **extra))
        assert err.value.code == 403
    assert (await client.create(PODS, pod("s", priority=0)))["spec"]["priority"] == 0


async def test_namespaces_must_exist(client: Any) -> None:
    # NamespaceLifecycle admission plugin: content in a missing namespace -> 404 namespaces "x" not found.
    with pytest.raises(NotFound, match='namespaces "ghost" not found'):
        await client.create(PODS, pod("p", namespace="ghost"))


# -- patches -----------------------------------------------------------------------------------------
async def test_merge_and_json_patch_on_main_resource_and_status(client: Any) -> None:
    # API Concepts "Patch": RFC 7386 merge patch (null deletes) and RFC 6902 JSON patch.
    body = pod("p", labels={"a": "1", "b": "2"})
    await client.create(PODS, body)
    out = await client.patch(PODS, "p", {"metadata": {"labels": {"a": None, "c": "3"}}}, namespace="default")
    assert out["metadata"]["labels"] == {"b": "2", "c": "3"}
    out = await client.patch(
        PODS,
        "p",
        [{"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}}],
        namespace="default",
        patch_type="json",
    )
    assert out["metadata"]["annotations"] == {"k": "v"}
    out = await client.patch(
        PODS,
        "p",
        [{"op": "replace", "path": "/status/phase", "value": "Running"}],
        namespace="default",
        patch_type="json",
        subresource="status",
    )
    assert out["status"]["phase"] == "Running"
    with pytest.raises(Invalid):
        await client.patch(
            PODS,
            "p",
            [{"op": "test", "path": "/metadata/name", "value": "other"}],
            namespace="default",
            patch_type="json",
        )
    stale = [
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "1"},
        {"op": "add", "path": "/metadata/labels/z", "value": "1"},
    ]
    with pytest.raises(Conflict):
        await client.patch(PODS, "p", stale, namespace="default", patch_type="json")


# -- store-level details --------------------------------------------------------------------------------
def test_create_with_a_resource_version_is_refused(store: Store) -> None:
    # etcd3/store.go Create: "resourceVersion should not be set on objects to be created" (500).
    body = pod("p")
    body["metadata"]["resourceVersion"] = "5"
    with pytest.raises(KubeError, match="resourceVersion should not be set on objects to be created"):
        store.create(PODS, body)


def test_a_no_op_update_keeps_the_resource_version_and_emits_nothing(store: Store) -> None:
    # registry/generic/registry/store.go: an update that changes nothing is not written.
    made = store.create(PODS, pod("p"))
    w = store.watch(PODS, resource_version=made["metadata"]["resourceVersion"])
    again = store.replace(PODS, made)
    assert again["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]
    assert w.pop() == []
    w.close()


def test_crd_with_cel_rules_warns_that_they_are_not_evaluated(store: Store) -> None:
    # The double does not implement x-kubernetes-validations (CEL); it says so instead of pretending.
    pending = store.prepare.create(CRDS, volcano_crd("topology.volcano.sh_hypernodes"))
    store.commit(pending)
    assert any("does not evaluate x-kubernetes-validations" in w for w in pending.warnings)


def test_deleting_a_crd_removes_its_objects_and_stops_serving_it(store: Store) -> None:
    # apiextensions-apiserver: deleting a CRD deletes its custom resources (customresourcecleanup).
    store.create(CRDS, widget_crd())
    store.create(WIDGETS, widget("w"))
    w = store.watch(WIDGETS, resource_version=str(store.resource_version))
    store.delete(CRDS, "widgets.example.com")
    assert [e for e, _ in w.pop()] == ["DELETED"] and w.closed
    with pytest.raises(NotFound):
        store.list(WIDGETS)


def test_dry_run_persists_nothing(store: Store) -> None:
    # API Concepts, "Dry-run": the request is processed but not persisted.
    rv = store.resource_version
    out = store.create(PODS, pod("p"), dry_run=True)
    assert out["metadata"]["name"] == "p" and store.resource_version == rv
    with pytest.raises(NotFound):
        store.get(PODS, "p", namespace="default")


def test_shorter_grace_period_moves_the_deletion_timestamp(store: Store, fake_clock: FakeClock) -> None:
    # registry/rest/delete.go BeforeDelete: a second delete may only shorten the grace period.
    store.create(PODS, pod("p"))
    store.bind("default", "p", {"metadata": {"name": "p"}, "target": {"name": "n"}})
    store.delete(PODS, "p", namespace="default")
    fake_clock.advance(5)
    again = store.delete(PODS, "p", namespace="default", grace_period_seconds=60)
    assert again["metadata"]["deletionTimestamp"] == "2025-01-01T12:00:30Z"
    shorter = store.delete(PODS, "p", namespace="default", grace_period_seconds=10)
    assert shorter["metadata"]["deletionTimestamp"] == "2025-01-01T12:00:15Z"
