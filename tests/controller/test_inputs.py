"""The controller's cached inputs: which events need a pass, and our own writes seen at once."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from tests.controller.allocation_testkit import Cluster, gpu_node, running, until, vgpu_pod
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.controller.inputs import CachedInputs, node_change_matters, pod_change_matters, pod_informer
from vgpu_guard.controller.pod_projection import project_pod
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import (
    Allocation,
    ContainerGrant,
    DeviceGrant,
    NodeLedger,
    decode_ledger,
    encode_ledger,
)
from vgpu_guard.engine.pod_request import pod_request
from vgpu_guard.engine.scheduling import FactsMemo, pod_facts
from vgpu_guard.kube.resources import LEDGERS, PODS
from vgpu_guard.kube.sharing import SharedParts
from vgpu_guard.kube.view_cache import ClusterCache

Obj = dict[str, Any]


def test_a_heartbeat_is_not_a_change_but_a_cordon_or_not_ready_is() -> None:
    node = gpu_node("a", 1)
    beat = {**node, "status": {**node["status"], "conditions": [{"type": "Ready", "status": "True", "x": 1}]}}
    node = {**node, "status": {**node["status"], "conditions": [{"type": "Ready", "status": "True"}]}}
    assert not node_change_matters(node, beat)
    assert node_change_matters(node, {**node, "spec": {"unschedulable": True}})
    down = {**node, "status": {**node["status"], "conditions": [{"type": "Ready", "status": "False"}]}}
    assert node_change_matters(node, down)


def test_a_confirmation_or_our_own_report_is_not_a_change_but_binding_and_ending_are() -> None:
    pending = vgpu_pod("p", memory=1000)
    reported = {**pending, "status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}}
    assert not pod_change_matters(pending, reported)
    bound = {**pending, "spec": {**pending["spec"], "nodeName": "a"}}
    assert pod_change_matters(pending, bound)
    allocating = {
        **bound,
        "metadata": {**bound["metadata"], "annotations": {"volcano.sh/bind-phase": "allocating"}},
    }
    confirmed = {
        **bound,
        "metadata": {**bound["metadata"], "annotations": {"volcano.sh/bind-phase": "success"}},
    }
    failed = {**bound, "metadata": {**bound["metadata"], "annotations": {"volcano.sh/bind-phase": "failed"}}}
    assert not pod_change_matters(allocating, confirmed)
    assert pod_change_matters(allocating, failed)
    assert pod_change_matters(bound, {**bound, "status": {"phase": "Succeeded"}})
    relabelled = {**pending, "metadata": {**pending["metadata"], "labels": {"x": "y"}}}
    assert pod_change_matters(pending, relabelled)


def test_the_projection_keeps_what_decisions_read() -> None:
    pod = vgpu_pod("p", memory=1000)
    pod["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    pod["status"] = {"phase": "Pending", "conditions": [], "containerStatuses": [{"name": "c"}]}
    projected = project_pod(pod)
    assert "managedFields" not in projected["metadata"]
    assert projected["status"] == {"phase": "Pending", "conditions": []}
    assert projected["spec"] == pod["spec"]


def test_a_bound_pods_status_is_its_phase_and_replicas_share_it() -> None:
    """Conditions carry per-pod timestamps: kept, no two bound pods' statuses would be equal."""
    share = SharedParts()
    statuses = []
    for name, stamp in (("r0", "2026-11-27T10:00:00Z"), ("r1", "2026-11-27T10:00:07Z")):
        pod = vgpu_pod(name, memory=1000)
        pod["spec"]["nodeName"] = "n1"
        ready = {"type": "Ready", "status": "True", "lastTransitionTime": stamp}
        pod["status"] = {"phase": "Running", "conditions": [ready], "podIP": "10.0.0.1"}
        statuses.append(project_pod(pod, share=share)["status"])
    assert statuses[0] == {"phase": "Running"} and statuses[1] is statuses[0]


def test_a_bound_pod_drops_the_annotations_no_controller_path_reads() -> None:
    pod = vgpu_pod("p", memory=1000)
    notes = {
        "volcano.sh/vgpu-ids-new": "GPU-a,NVIDIA,1000,0:",
        "volcano.sh/devices-to-allocate": "GPU-a,NVIDIA,1000,0:",
        "volcano.sh/vgpu-time": "1700000000",
        "volcano.sh/bind-phase": "success",
        "kubectl.kubernetes.io/last-applied-configuration": '{"kind": "Pod"}',
    }
    pending = project_pod(copy.deepcopy({**pod, "metadata": {**pod["metadata"], "annotations": notes}}))
    assert pending["metadata"]["annotations"] == notes  # pending: all kept
    pod["spec"]["nodeName"] = "n1"
    pod["metadata"]["annotations"] = dict(notes)
    bound = project_pod(pod)
    assert bound["metadata"]["annotations"] == {
        "volcano.sh/vgpu-ids-new": "GPU-a,NVIDIA,1000,0:",
        "volcano.sh/bind-phase": "success",
    }


def test_replicas_share_their_equal_pieces() -> None:
    share = SharedParts()
    replicas = []
    for name in ("r0", "r1"):
        pod = vgpu_pod(name, memory=1000, tolerations=[{"key": "gpu", "operator": "Exists"}])
        pod["metadata"]["labels"] = {"app": "train"}
        pod["status"] = {"phase": "Running"}
        expected = project_pod(copy.deepcopy(pod))  # the same projection, without sharing
        projected = project_pod(pod, share=share)
        assert projected["spec"] == expected["spec"] and projected["metadata"] == expected["metadata"]
        replicas.append(projected)
    r0, r1 = replicas
    assert r1["spec"]["containers"] is r0["spec"]["containers"]
    assert r1["spec"]["tolerations"] is r0["spec"]["tolerations"]
    assert r1["metadata"]["labels"] is r0["metadata"]["labels"] and r1["status"] is r0["status"]
    assert r1["metadata"]["uid"] != r0["metadata"]["uid"]  # identity is never shared


async def test_our_binding_counts_until_the_informer_shows_it_and_wakes_no_pass() -> None:
    cluster = Cluster([gpu_node("a", 1)])
    created = cluster.create_pod(vgpu_pod("p", memory=1000))
    inputs = CachedInputs(MemoryClusterClient(cluster.store))
    async with running(inputs):
        read = await inputs.read(cluster.config)
        pod = read.pods[("default", "p")]
        inputs.changed.clear()
        notes = {"volcano.sh/bind-phase": "allocating"}
        inputs.bound(pod, "a", notes)
        seen = await inputs.read(cluster.config)
        mine = seen.pods[("default", "p")]
        assert mine["spec"]["nodeName"] == "a" and mine["metadata"]["annotations"] == notes
        client = MemoryClusterClient(cluster.store)
        await client.bind("default", "p", node="a", annotations=notes, uid=created["metadata"]["uid"])
        await until(lambda: inputs.pods.items[("default", "p")]["spec"].get("nodeName") == "a")
        assert not inputs.changed.is_set(), "the echo of our own binding woke a pass"
        await client.delete(PODS, "p", namespace="default")
        await until(inputs.changed.is_set)


async def test_a_ledger_we_wrote_is_read_until_the_informer_catches_up() -> None:
    cluster = Cluster([gpu_node("a", 1)])
    inputs = CachedInputs(MemoryClusterClient(cluster.store))
    async with running(inputs):
        ours: Obj = {"kind": "GPULedger", "metadata": {"name": "a", "resourceVersion": "999999"}, "spec": {}}
        inputs.wrote_ledger(ours)
        kept = (await inputs.read(cluster.config)).ledgers["a"]  # decoded, as the cache keeps it
        assert kept["metadata"]["resourceVersion"] == "999999" and decode_ledger(kept).node == "a"
        older: Obj = {"kind": "GPULedger", "metadata": {"name": "a", "resourceVersion": "5"}, "spec": {}}
        inputs.cluster.ledgers._items[("", "a")] = older  # the informer still has an older version
        assert (await inputs.read(cluster.config)).ledgers["a"] is kept
        newer: Obj = {
            "kind": "GPULedger",
            "metadata": {"name": "a", "resourceVersion": "1000000"},
            "spec": {},
        }
        inputs.cluster.ledgers._items[("", "a")] = newer
        assert (await inputs.read(cluster.config)).ledgers == {"a": newer}


def _rich_pod(name: str) -> dict[str, Any]:
    """A pod with what real pods carry and no filter reads (image, env, probes, its own token
    volume) beside what filters do read (requests, host ports, a claim, an inline disk)."""
    pod = vgpu_pod(name, memory=1000, tolerations=[{"key": "gpu", "operator": "Exists"}])
    main = pod["spec"]["containers"][0]
    main.update(
        env=[{"name": "POD", "value": name}],
        command=["python", "train.py"],
        ports=[{"containerPort": 8080, "hostPort": 8080}],
        readinessProbe={"httpGet": {"port": 8080}},
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
    )
    main["resources"]["requests"]["cpu"] = "2"
    # What the API server defaults into every pod (no decision reads it), and a priority (one does).
    pod["spec"].update(
        dnsPolicy="ClusterFirst",
        restartPolicy="Always",
        serviceAccountName="default",
        terminationGracePeriodSeconds=30,
        securityContext={},
        enableServiceLinks=True,
        preemptionPolicy="PreemptLowerPriority",
        priority=1000,
        priorityClassName="training",
    )
    pod["spec"]["initContainers"] = [
        {"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "4"}}}
    ]
    pod["spec"]["volumes"] = [
        {
            "name": f"kube-api-access-{name}",
            "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]},
        },
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "disk", "csi": {"driver": "x"}},
        {"name": "config", "configMap": {"name": "c"}},
    ]
    pod["metadata"]["labels"] = {"app": "train"}
    return pod


def test_the_projection_changes_no_decision_input() -> None:
    pod = _rich_pod("p")
    original = copy.deepcopy(pod)
    projected = project_pod(pod, share=SharedParts())
    assert pod_facts(projected) == pod_facts(original)
    assert pod_request(projected, GuardConfig().nvidia) == pod_request(original, GuardConfig().nvidia)
    assert [v["name"] for v in projected["spec"]["volumes"]] == ["data", "disk"]
    assert set(projected["spec"]["containers"][0]) == {"name", "resources", "ports"}
    assert "dnsPolicy" not in projected["spec"] and projected["spec"]["priority"] == 1000


def test_replicas_facts_are_derived_once_and_equal_a_fresh_parse() -> None:
    share, memo = SharedParts(), FactsMemo()
    first, second = (project_pod(_rich_pod(n), share=share) for n in ("r0", "r1"))
    a, b = memo(first), memo(second)
    assert b == pod_facts(second) and b.uid != a.uid
    assert b.requests is a.requests and b.host_ports is a.host_ports  # derived once, then reused
    # An equal piece that is not the same object (no sharing) is parsed again, never guessed.
    third = project_pod(_rich_pod("r2"))
    assert memo(third).requests is not a.requests and memo(third) == pod_facts(third)


def test_replicas_with_only_their_own_token_volume_share_their_facts() -> None:
    share, memo = SharedParts(), FactsMemo()
    pods = []
    for name in ("r0", "r1"):
        pod = vgpu_pod(name, memory=1000)
        pod["spec"]["volumes"] = [{"name": f"kube-api-access-{name}", "projected": {"sources": []}}]
        pods.append(project_pod(pod, share=share))
    a, b = memo(pods[0]), memo(pods[1])
    assert b.requests is a.requests and b == pod_facts(pods[1])


async def test_our_own_ledger_write_is_kept_decoded_like_the_cache_keeps_ledgers() -> None:
    cluster = Cluster([gpu_node("a", 1)])
    inputs = CachedInputs(MemoryClusterClient(cluster.store))
    entry = Allocation(
        "u", "default", "p", "default", (ContainerGrant(0, "c", (DeviceGrant("GPU-a-0", 1024, 0),)),)
    )
    written = encode_ledger(NodeLedger(node="a", allocations={"u": entry}))
    written["metadata"]["resourceVersion"] = "7"
    inputs.wrote_ledger(written)
    ours = (await inputs.read(cluster.config)).ledgers["a"]
    assert "allocations" not in ours["spec"]  # no raw entries kept beside the decoded ones
    assert decode_ledger(ours).allocations == {"u": entry}


async def test_a_ledger_we_wrote_and_someone_deleted_is_not_brought_back_by_our_copy() -> None:
    """Our copy of a ledger we wrote stands in until the informer shows that version; deleted
    after our write, the copy goes with the DELETE (it used to stay for OVERLAY_TTL_SECONDS, and
    every write of that node met 404 meanwhile)."""
    cluster = Cluster([gpu_node("a", 1)])
    client = MemoryClusterClient(cluster.store)
    inputs = CachedInputs(client)
    async with running(inputs):
        written = await client.create(LEDGERS, encode_ledger(NodeLedger(node="a")))
        inputs.wrote_ledger(written)
        assert "a" in (await inputs.read(cluster.config)).ledgers
        await until(lambda: ("", "a") in inputs.cluster.ledgers.items)  # else the next wait is met at once
        await client.delete(LEDGERS, "a")
        await until(lambda: ("", "a") not in inputs.cluster.ledgers.items)
        assert "a" not in (await inputs.read(cluster.config)).ledgers


async def test_a_write_answered_after_the_informer_saw_its_ledger_deleted_brings_nothing_back() -> None:
    """The race the e2e suite met on kube-apiserver 1.20.2: our PUT succeeded, a story deleted the
    ledger, and the watch's DELETE was handled before our write's answer. The copy of a version
    older than a deletion the informer saw must not stand in (it did, for OVERLAY_TTL_SECONDS:
    every write of that node met 404, each ended the pass, and no other node's pod was bound)."""
    cluster = Cluster([gpu_node("a", 1)])
    client = MemoryClusterClient(cluster.store)
    inputs = CachedInputs(client)
    async with running(inputs):
        written = await client.create(LEDGERS, encode_ledger(NodeLedger(node="a")))
        await client.delete(LEDGERS, "a")
        await until(lambda: ("", "a") not in inputs.cluster.ledgers.items)
        inputs.wrote_ledger(written)  # the answer handled after the DELETE
        assert "a" not in (await inputs.read(cluster.config)).ledgers
        recreated = await client.create(LEDGERS, encode_ledger(NodeLedger(node="a")))
        inputs.wrote_ledger(recreated)  # a later version is ours again at once
        assert "a" in (await inputs.read(cluster.config)).ledgers


async def test_inputs_that_stop_leave_shared_informers_without_their_handlers() -> None:
    """``serve all`` restarts a crashed controller on the process's pod informer and caches: the
    stopped loop's handlers go with it instead of one more set per restart."""
    cluster = Cluster([gpu_node("a", 1)])
    client = MemoryClusterClient(cluster.store)
    pods, shared = pod_informer(client), ClusterCache(client)
    before = (len(pods._handlers), len(shared.ledgers._handlers), len(shared.nodes._handlers))
    for _ in range(3):
        inputs = CachedInputs(client, cluster=shared, pods=pods)
        inputs.listen(pods, lambda event: None)  # as run_controller's Binder does
        task = asyncio.ensure_future(inputs.run())
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert (len(pods._handlers), len(shared.ledgers._handlers), len(shared.nodes._handlers)) == before
