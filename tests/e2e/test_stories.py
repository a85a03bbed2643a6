"""The stories vgpu-guard exists for, end to end, through the API only.

The same code runs on both backends (``conftest.guard``): the chart installed through the API, our
webhook and controller as local processes under the chart's ServiceAccounts, RBAC enforced. Every
assertion is on what the API server answers: status codes, messages as the client shows them,
Warning headers, spec.nodeName, annotations, conditions, Events, Leases and GPULedger objects.

Nodes (harness.NODE_SET): e2e-a10-0 (pool seed-000), e2e-crash-0 (crash) and e2e-ha-0 (ha) each
have one 24 GiB A10 in hami-core mode; e2e-mig-0 (mig) one A100-40GB in MIG mode; pool ib has two
InfiniBand clusters of single-A10 nodes (ib-a: 2 nodes, ib-b: 3); four CPU workers (8 cpu each) are
the Volcano capacity queues are judged against. Pods pin themselves to a pool with a nodeSelector,
so the stories do not share GPUs.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Any

import pytest

from tests.e2e.conftest import CONTROLLER_0, WEBHOOK_0, Env, entries_of, gpu_pod, plain_pod
from tests.e2e.harness import CONTROLLER_SA, IB_LABEL, LEASE, NAMESPACE, POOL_LABEL, until
from vgpu_guard.engine.ledger import Allocation, DeviceGrant
from vgpu_guard.kube.errors import KubeError, NotFound
from vgpu_guard.kube.resources import GANG_PLACEMENTS, LEASES, LEDGERS, PODGROUPS, PODS, QUEUES, Resource

pytestmark = pytest.mark.asyncio(loop_scope="session")

Obj = dict[str, Any]
POD_WEBHOOK = "pods.vgpu.vgpu-guard.io"
QUEUE_WEBHOOK = "queues.vgpu-guard.io"
FAILED_CALLING = f'Internal error occurred: failed calling webhook "{POD_WEBHOOK}": '
ROUTED = "vgpu-guard: set spec.schedulerName=vgpu-guard (was volcano; vGPU routing on)"
STAMPED_HAMI = (
    "vgpu-guard: set annotation volcano.sh/vgpu-mode=hami-core (defaultMode auto, both modes offered)"
)
CARD = 24576


def denied(webhook: str, message: str) -> str:
    """A denial as kubectl prints it (k8s.io/apiserver admission/plugin/webhook/errors)."""
    return f'admission webhook "{webhook}" denied the request: {message}'


def annotations_of(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def condition(pod: Obj, kind: str) -> Obj | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def bound(pods: list[Obj]) -> list[Obj]:
    return [p for p in pods if (p.get("spec") or {}).get("nodeName")]


def card_memory(pods: list[Obj], uuid: str) -> int:
    """MiB of ``uuid`` the bound pods hold, from the device annotation the plugin reads."""
    total = 0
    for pod in bound(pods):
        for container in annotations_of(pod).get("volcano.sh/vgpu-ids-new", "").split(";"):
            for device in filter(None, container.split(":")):
                parts = device.split(",")
                if parts[0].split("[")[0] == uuid:
                    total += int(parts[2])
    return total


def _count(n: int, singular: str, plural: str) -> str:
    return f"1 node {singular}" if n == 1 else f"{n} nodes {plural}"


async def unavailable(env: Env, reasons: str) -> str:
    """The controller's ``0/N nodes are available`` message for a pod of one single-node pool.

    Only N and the counts of the other nodes depend on the cluster (the suite's eight nodes, plus
    e.g. kind's): GPU nodes of other pools fail the nodeSelector, nodes without GPUs have none."""
    from vgpu_guard.kube.resources import NODES

    nodes = (await env.api.list(NODES)).items
    gpu = sum(1 for n in nodes if "volcano.sh/node-vgpu-register" in annotations_of(n))
    parts = []
    if gpu > 1:
        parts.append(
            _count(
                gpu - 1,
                "doesn't match the pod's node selector/affinity",
                "don't match the pod's node selector/affinity",
            )
        )
    if len(nodes) > gpu:
        parts.append(_count(len(nodes) - gpu, "has no vGPU devices", "have no vGPU devices"))
    return f"0/{len(nodes)} nodes are available: {', '.join([*parts, reasons])}"


async def settled_gpu_pods(env: Env, *, bound_count: int, pending_count: int) -> list[Obj]:
    async def check() -> list[Obj] | None:
        pods = await env.pods()
        placed = bound(pods)
        waiting = [
            p
            for p in pods
            if p not in placed and (condition(p, "PodScheduled") or {}).get("status") == "False"
        ]
        confirmed = all(annotations_of(p).get("volcano.sh/bind-phase") == "success" for p in placed)
        ok = len(placed) == bound_count and len(waiting) == pending_count and confirmed
        return pods if ok else None

    pods: list[Obj] = await until(f"{bound_count} bound and {pending_count} unschedulable pods", check)
    return pods


# -- seed 000 -------------------------------------------------------------------------------------
async def test_seed_000_three_12gib_pods_on_one_free_24gib_card_two_bound_one_pending(env: Env) -> None:
    """Volcano put three 12 GiB pods on one free 24 GiB card. With vgpu-guard: two are bound with
    device annotations, the third stays Pending with the reason in PodScheduled and an Event."""
    for name in ("web-0", "web-1", "web-2"):
        created, warnings = await env.create(PODS, gpu_pod(name, 12288, pool="seed-000"))
        # The mode is stamped and the pod routed to our controller; kubectl shows both warnings.
        assert warnings == [STAMPED_HAMI, ROUTED]
        assert annotations_of(created)["volcano.sh/vgpu-mode"] == "hami-core"
        assert created["spec"]["schedulerName"] == "vgpu-guard"

    pods = await settled_gpu_pods(env, bound_count=2, pending_count=1)
    expected_reason = await unavailable(env, "1 GPU has no free memory (12288 MiB requested)")
    for pod in bound(pods):
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        assert pod["spec"]["nodeName"] == "e2e-a10-0"
        notes = annotations_of(pod)
        assert notes["volcano.sh/vgpu-node"] == "e2e-a10-0"
        assert notes["volcano.sh/vgpu-ids-new"] == "GPU-e2e-a10-0-0,NVIDIA,12288,0:"
        assert notes["volcano.sh/devices-to-allocate"] == "GPU-e2e-a10-0-0,NVIDIA,12288,0:"
        assert notes["vgpu-guard.io/allocation"] == f"e2e-a10-0/{uid}"
        assert (condition(pod, "PodScheduled") or {}).get("status") == "True"
        events = await env.events(name)
        assert [e["message"] for e in events if e["reason"] == "Scheduled"] == [
            f"Successfully assigned {env.ns}/{name} to e2e-a10-0 (GPU-e2e-a10-0-0,NVIDIA,12288,0:)"
        ]
    (waiting,) = [p for p in pods if p not in bound(pods)]
    scheduled = condition(waiting, "PodScheduled") or {}
    assert (scheduled.get("reason"), scheduled.get("message")) == ("Unschedulable", expected_reason)
    events = await env.events(waiting["metadata"]["name"])
    assert [(e["type"], e["message"]) for e in events if e["reason"] == "FailedScheduling"] == [
        ("Warning", expected_reason)
    ]
    # The ledger books both pods on the card and nothing more.
    ledger = await env.ledger("e2e-a10-0")
    assert ledger is not None
    entries = {a.pod_uid: a for a in entries_of(ledger)}
    assert set(entries) == {p["metadata"]["uid"] for p in bound(pods)}
    assert ledger["spec"]["summary"]["memoryMiB"] == CARD
    assert card_memory(pods, "GPU-e2e-a10-0-0") == CARD


# -- seed 001 -------------------------------------------------------------------------------------
def queue(name: str, cpu: str, memory: str | None = None) -> Obj:
    resource = {"cpu": cpu, **({"memory": memory} if memory else {})}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name, "labels": {"e2e.vgpu-guard.io/suite": "e2e"}},
        "spec": {"weight": 1, "guarantee": {"resource": resource}},
    }


OVER_GUARANTEE = denied(
    QUEUE_WEBHOOK,
    "[queue-guarantee-capacity] spec.guarantee.resource.cpu: 36 would bring guaranteed cpu to 68 but "
    "cluster capacity is 32 (4 Ready nodes); lower it to at most 0 or add nodes",
)


async def _seed_001_queues(env: Env) -> None:
    names = ["e2e-training", "e2e-inference", "e2e-notebooks", "e2e-batch"]

    async def drop() -> None:
        for name in names:
            with contextlib.suppress(NotFound):
                await env.api.delete(QUEUES, name)

    env.undo.append(drop)
    _, warnings = await env.create(QUEUES, queue("e2e-training", "16", "64Gi"))
    assert warnings == []
    _, warnings = await env.create(QUEUES, queue("e2e-inference", "8", "32Gi"))
    assert warnings == []
    _, warnings = await env.create(QUEUES, queue("e2e-notebooks", "8000m", "16Gi"))
    assert warnings == [
        "[queue-guarantee-capacity] spec.guarantee.resource.cpu: queues would guarantee 32 of 32 "
        "(100%, warning level 90%)"
    ]


async def test_seed_001_a_queue_guaranteeing_more_than_the_cluster_is_rejected(env: Env) -> None:
    """Queues guaranteeing 36 more cpu than 32 exist made Volcano crash-loop; the Queue webhook
    denies the one that overflows, with the numbers, and it is not created."""
    await _seed_001_queues(env)
    with pytest.raises(KubeError) as error:
        await env.create(QUEUES, queue("e2e-batch", "36"))
    assert (error.value.code, error.value.message) == (403, OVER_GUARANTEE)
    with pytest.raises(NotFound):
        await env.api.get(QUEUES, "e2e-batch")


# -- MIG rounding ---------------------------------------------------------------------------------
async def test_mig_request_is_rounded_to_the_profile_volcano_places_and_the_pod_says_so(env: Env) -> None:
    """3000 MiB in MIG mode fits no instance: the webhook rounds it to 1g.5gb (5120 MiB), records
    the profile, warns that the driver exposes less, routes the pod; the controller puts it on a
    1g.5gb slot of the A100."""
    created, warnings = await env.create(
        PODS, gpu_pod("mig-small", 3000, pool="mig", annotations={"volcano.sh/vgpu-mode": "mig"})
    )
    assert warnings == [
        'vgpu-guard: container "main": rounded volcano.sh/vgpu-memory 3000 -> 5120 (MIG 1g.5gb)',
        "vgpu-guard: MIG 1g.5gb on A100-SXM4-40GB exposes ~4864 MiB, not the 5120 MiB configured",
        "vgpu-guard: set annotation vgpu-guard.io/mig-profile=1g.5gb",
        ROUTED,
    ]
    assert created["spec"]["containers"][0]["resources"]["limits"]["volcano.sh/vgpu-memory"] == "5120"
    assert created["spec"]["containers"][0]["resources"]["requests"]["volcano.sh/vgpu-memory"] == "5120"
    assert annotations_of(created)["vgpu-guard.io/mig-profile"] == "1g.5gb"
    assert annotations_of(created)["volcano.sh/vgpu-mode"] == "mig"
    assert created["spec"]["schedulerName"] == "vgpu-guard"

    (pod,) = await settled_gpu_pods(env, bound_count=1, pending_count=0)
    assert pod["spec"]["nodeName"] == "e2e-mig-0"
    assert annotations_of(pod)["volcano.sh/vgpu-ids-new"] == "GPU-e2e-mig-0-0[group1-0],NVIDIA,5120,0:"
    ledger = await env.ledger("e2e-mig-0")
    assert ledger is not None
    (entry,) = [a for a in entries_of(ledger) if a.pod_uid == pod["metadata"]["uid"]]
    (device,) = entry.containers[0].devices
    assert device.mig is not None
    assert (device.uuid, device.memory, device.mig.profile) == (
        "GPU-e2e-mig-0-0",
        5120,
        "1g.5gb",
    )


# -- forged allocation annotations ----------------------------------------------------------------
def forged_message(user: str) -> str:
    return denied(
        POD_WEBHOOK,
        f"[allocation-annotations] metadata.annotations[volcano.sh/vgpu-node]: e2e-a10-0 was set by {user}; "
        "allocation annotations are written by the scheduler at binding, remove it\n"
        f"[allocation-annotations] metadata.annotations[volcano.sh/vgpu-ids-new]: GPU-e2e-a10-0-0,NVIDIA,24576,0: "
        f"was set by {user}; allocation annotations are written by the scheduler at binding, remove it",
    )


FORGED = {"volcano.sh/vgpu-node": "e2e-a10-0", "volcano.sh/vgpu-ids-new": "GPU-e2e-a10-0-0,NVIDIA,24576,0:"}


async def test_forged_allocation_annotations_are_rejected(env: Env) -> None:
    """A pod that writes the plugin's device assignment itself would bypass the ledger: denied,
    whether or not it asks for vGPU (the chart sends pods carrying these annotations too)."""
    for pod in (
        gpu_pod("forged-gpu", 12288, pool="seed-000", annotations=FORGED),
        plain_pod("forged-plain", FORGED),
    ):
        with pytest.raises(KubeError) as error:
            await env.create(PODS, pod)
        assert (error.value.code, error.value.message) == (403, forged_message(env.backend.admin_user))
        with pytest.raises(NotFound):
            await env.pod(pod["metadata"]["name"])


# -- server-side dry run --------------------------------------------------------------------------
TYPO = denied(
    POD_WEBHOOK,
    "[vgpu-memory-unit] spec.containers[0].resources.limits[volcano.sh/vgpu-memory]: 12Gi has a unit "
    "suffix but vgpu-memory counts MiB (12Gi would mean 12884901888 MiB); write 12288",
)


async def test_server_side_dry_run_gives_the_same_answers_and_creates_nothing(env: Env) -> None:
    """``kubectl apply --dry-run=server`` is how users check a manifest: same denial, same
    mutation and warnings, and nothing is stored."""
    for dry_run in (True, False):
        with pytest.raises(KubeError) as error:
            await env.create(PODS, gpu_pod("typo", "12Gi", pool="seed-000"), dry_run=dry_run)
        assert (error.value.code, error.value.message) == (403, TYPO)
    created, warnings = await env.create(PODS, gpu_pod("fine", 12288, pool="seed-000"), dry_run=True)
    assert warnings == [STAMPED_HAMI, ROUTED]
    assert annotations_of(created)["volcano.sh/vgpu-mode"] == "hami-core"
    assert created["spec"]["schedulerName"] == "vgpu-guard"
    await _seed_001_queues(env)
    with pytest.raises(KubeError) as error:
        await env.create(QUEUES, queue("e2e-batch", "36"), dry_run=True)
    assert (error.value.code, error.value.message) == (403, OVER_GUARANTEE)
    assert await env.pods() == []
    with pytest.raises(NotFound):
        await env.api.get(QUEUES, "e2e-batch")


# -- webhook outage -------------------------------------------------------------------------------
async def test_webhook_down_non_gpu_pods_still_admitted_gpu_pods_fail_closed(env: Env) -> None:
    """With the webhook process gone, pods our webhooks never see, or see failing open, are admitted,
    while Queues fail closed (failurePolicy Fail) with the API server's error; when it is back, GPU
    pods are admitted (and mutated) again.

    What GPU pods meet depends on the chart's scope. With matchConditions (1.28+) only GPU pods reach
    the pod webhooks, which fail closed: a pod that asks for no GPU is admitted, a GPU pod refused.
    In the allNamespaces scope (older servers, which drop matchConditions and send every pod of
    every namespace) the pod webhooks fail open, so an outage blocks no pod: both are admitted,
    the GPU pod unmutated and unchecked, the price docs/install.md states (the fail-closed preset,
    webhooks.scope=namespaceOptIn, guards labelled namespaces only)."""
    webhook = env.guard.processes[WEBHOOK_0]
    assert await webhook.stop() == 0
    created, warnings = await env.create(PODS, plain_pod("plain"))
    assert created["metadata"]["name"] == "plain" and warnings == []
    outage: list[tuple[Resource, Obj, str]] = [(QUEUES, queue("e2e-outage", "1"), QUEUE_WEBHOOK)]
    if env.guard.match_conditions:
        outage.insert(0, (PODS, gpu_pod("gpu", 12288, pool="seed-000"), POD_WEBHOOK))
    else:
        created, warnings = await env.create(PODS, gpu_pod("unchecked", 12288, pool="seed-000"))
        assert warnings == [] and "volcano.sh/vgpu-mode" not in annotations_of(created)
    for resource, obj, name in outage:
        with pytest.raises(KubeError) as error:
            await env.create(resource, obj)
        assert error.value.code == 500
        assert error.value.message.startswith(f'Internal error occurred: failed calling webhook "{name}": ')
    with pytest.raises(NotFound):
        await env.pod("gpu")

    await env.guard.ensure("webhook", WEBHOOK_0)
    created, warnings = await env.create(PODS, gpu_pod("gpu", 12288, pool="seed-000"))
    assert warnings == [STAMPED_HAMI, ROUTED]


# -- controller crash between ledger write and binding --------------------------------------------
async def test_controller_killed_between_ledger_write_and_binding_converges_without_overcommit(
    env: Env,
) -> None:
    """The controller books a pod in the GPULedger, then binds it. Kill it in between: after a
    restart the booked pod is bound once, and the card is never promised beyond 24 GiB.

    Fault: the window between the two writes is microseconds, so the story widens it by taking
    ``pods/binding`` out of the controller's ClusterRole (its Binding gets 403 while the ledger
    write goes through), SIGKILLs the process as soon as a watch shows the committed entry, then
    restores the chart's ClusterRole and restarts the process."""
    controller = env.guard.processes[CONTROLLER_0]
    role = env.guard.rendered("ClusterRole", CONTROLLER_SA)
    crippled = env.guard.rendered("ClusterRole", CONTROLLER_SA)
    crippled["rules"] = [r for r in crippled["rules"] if r.get("resources") != ["pods/binding"]]
    assert len(crippled["rules"]) == len(role["rules"]) - 1

    async def restore() -> None:
        await env.guard.apply(env.guard.rendered("ClusterRole", CONTROLLER_SA))

    env.undo.append(restore)
    await env.guard.apply(crippled)

    listed = await env.api.list(LEDGERS, field_selector="metadata.name=e2e-crash-0")
    created, _ = await env.create(PODS, gpu_pod("first", 12288, pool="crash"))
    uid = created["metadata"]["uid"]

    async def committed_entry() -> Allocation:
        async for event in env.api.watch(
            LEDGERS, resource_version=listed.resource_version, field_selector="metadata.name=e2e-crash-0"
        ):
            for entry in entries_of(event.object):
                if entry.pod_uid == uid and entry.committed:
                    await controller.kill()  # SIGKILL: no shutdown code, the Lease is not released
                    return entry
        raise AssertionError("the ledger watch ended before the entry was committed")

    entry = await asyncio.wait_for(committed_entry(), timeout=20)
    assert controller.process is not None and controller.process.returncode == -signal.SIGKILL
    # Between the two writes: booked in the ledger, not bound.
    assert entry.containers[0].devices[0] == DeviceGrant("GPU-e2e-crash-0-0", 12288, 0)
    assert "nodeName" not in (await env.pod("first"))["spec"]

    await restore()
    await env.guard.ensure("controller", CONTROLLER_0)
    for name in ("second", "third"):
        await env.create(PODS, gpu_pod(name, 12288, pool="crash"))
    pods = await settled_gpu_pods(env, bound_count=2, pending_count=1)
    by_name = {p["metadata"]["name"]: p for p in pods}
    assert by_name["first"]["spec"]["nodeName"] == "e2e-crash-0"
    assert annotations_of(by_name["first"])["vgpu-guard.io/allocation"] == f"e2e-crash-0/{uid}"
    assert card_memory(pods, "GPU-e2e-crash-0-0") == CARD
    ledger = await env.ledger("e2e-crash-0")
    assert ledger is not None
    assert {a.pod_uid for a in entries_of(ledger)} == {p["metadata"]["uid"] for p in bound(pods)}
    assert ledger["spec"]["summary"]["memoryMiB"] == CARD


# -- two controllers ------------------------------------------------------------------------------
async def test_two_controllers_one_leader_no_overcommit_and_the_standby_takes_over(env: Env) -> None:
    """Two controller replicas: one holds the Lease and allocates, the other waits; three 12 GiB
    pods on a 24 GiB card give two bound and one Pending. When the leader stops, the standby takes
    the Lease and carries on: a freed slot goes to the waiting pod, still within 24 GiB."""
    first = env.guard.processes[CONTROLLER_0]
    second = await env.guard.ensure("controller", "e2e-controller-1")

    async def lease() -> Obj:
        return await env.api.get(LEASES, LEASE, namespace=NAMESPACE)

    held = await lease()
    assert held["spec"]["holderIdentity"] == CONTROLLER_0
    assert "vgpu_guard_leader 1.0" in await first.metrics()
    assert "vgpu_guard_leader 0.0" in await second.metrics()

    for name in ("ha-0", "ha-1", "ha-2"):
        await env.create(PODS, gpu_pod(name, 12288, pool="ha"))
    pods = await settled_gpu_pods(env, bound_count=2, pending_count=1)
    assert card_memory(pods, "GPU-e2e-ha-0-0") == CARD
    assert (await lease())["spec"]["holderIdentity"] == CONTROLLER_0

    assert await first.stop() == 0  # graceful: the Lease is released
    taken: Obj = await until(
        "the standby to take the Lease",
        lambda: _holder(env, "e2e-controller-1"),
    )
    assert taken["spec"]["leaseTransitions"] == held["spec"].get("leaseTransitions", 0) + 1
    (gone, _) = bound(pods)
    await env.api.delete(PODS, gone["metadata"]["name"], namespace=env.ns, grace_period_seconds=0)
    pods = await settled_gpu_pods(env, bound_count=2, pending_count=0)
    assert card_memory(pods, "GPU-e2e-ha-0-0") == CARD
    assert "vgpu_guard_leader 1.0" in await second.metrics()
    ledger = await env.ledger("e2e-ha-0")
    assert ledger is not None
    assert {a.pod_uid for a in entries_of(ledger)} == {p["metadata"]["uid"] for p in bound(pods)}


async def _holder(env: Env, identity: str) -> Obj | None:
    lease = await env.api.get(LEASES, LEASE, namespace=NAMESPACE)
    return lease if lease["spec"].get("holderIdentity") == identity else None


# -- seed 004 -------------------------------------------------------------------------------------
async def test_seed_004_a_gang_is_pinned_to_the_one_ib_cluster_that_holds_it(env: Env) -> None:
    """A 3-member gang of whole A10s: only ib-b (3 nodes) can hold it, ib-a (2) cannot. Volcano
    could split it across both; vgpu-guard chooses ib-b at the first member's admission, records
    it in a GangPlacement, adds the cluster to every member's required node affinity, and the
    controller binds all three inside ib-b."""
    group = "train"
    await env.create(
        PODGROUPS,
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": group, "labels": {"e2e.vgpu-guard.io/suite": "e2e"}},
            "spec": {"minMember": 3},
        },
    )

    def member(i: int) -> Obj:
        return gpu_pod(f"{group}-{i}", 24576, pool="ib", annotations={"scheduling.k8s.io/group-name": group})

    # The webhook answers from its watch cache: wait until it has seen the PodGroup (a dry run
    # decides without recording anything), as a Volcano Job's pods would arrive after it.
    missing = f"vgpu-guard: PodGroup {env.ns}/{group} not found; gang sized as 1 member"

    async def podgroup_seen() -> bool:
        _, warnings = await env.create(PODS, member(0), dry_run=True)
        return missing not in warnings

    await until("the webhook to see the PodGroup", podgroup_seen, within=10)
    with pytest.raises(NotFound):
        await env.api.get(GANG_PLACEMENTS, group, namespace=env.ns)  # dry runs record nothing

    for i in range(3):
        created, warnings = await env.create(PODS, member(i))
        ib = (
            f"vgpu-guard: chose IB cluster ib-b for gang {env.ns}/{group} (the only one that fits); required node affinity added"
            if i == 0
            else f"vgpu-guard: gang {env.ns}/{group} runs in IB cluster ib-b; node affinity added"
        )
        assert warnings == [STAMPED_HAMI, ROUTED, ib]
        terms = created["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [
            {"matchExpressions": [{"key": IB_LABEL, "operator": "In", "values": ["ib-b"]}]}
        ]
    placement = await env.api.get(GANG_PLACEMENTS, group, namespace=env.ns)
    assert (placement["spec"]["group"], placement["spec"]["cluster"], placement["spec"]["minMember"]) == (
        group,
        "ib-b",
        3,
    )

    pods = await settled_gpu_pods(env, bound_count=3, pending_count=0)
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["e2e-ib-b-0", "e2e-ib-b-1", "e2e-ib-b-2"]


# -- routing: a mixed gang ------------------------------------------------------------------------
async def test_routing_binds_a_mixed_gang_whole_and_its_podgroup_says_running(env: Env) -> None:
    """Issue 35: with routing on, a gang whose launcher asks no vGPU waited forever (Volcano never
    saw the routed workers, our controller never placed the launcher). The launcher is routed with
    its gang (its PodGroup's minResources ask vGPU), placed by the node constraints on a CPU worker,
    bound once the workers' GPUs are committed, with no ledger entry; the PodGroup says Running."""
    group = "mixed"
    await env.create(
        PODGROUPS,
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": group, "labels": {"e2e.vgpu-guard.io/suite": "e2e"}},
            "spec": {"minMember": 3, "minResources": {"cpu": "1", "volcano.sh/vgpu-number": "2"}},
        },
    )
    notes = {"scheduling.k8s.io/group-name": group}
    launcher = plain_pod("launcher", annotations=notes)
    launcher["spec"].update(schedulerName="volcano", nodeSelector={POOL_LABEL: "cpu"})
    routed = f"vgpu-guard: set spec.schedulerName=vgpu-guard (was volcano; routing sends vGPU gang {env.ns}/{group} whole)"

    async def podgroup_seen() -> bool:  # the webhook answers from its watch cache
        _, warnings = await env.create(PODS, launcher, dry_run=True)
        return routed in warnings

    await until("the webhook to see the PodGroup", podgroup_seen, within=10)
    created, warnings = await env.create(PODS, launcher)
    assert warnings == [routed] and created["spec"]["schedulerName"] == "vgpu-guard"
    for i in range(2):
        await env.create(PODS, gpu_pod(f"worker-{i}", 8192, pool="seed-000", annotations=notes))

    async def all_bound() -> list[Obj] | None:
        pods = await env.pods()
        return pods if len(bound(pods)) == 3 else None

    try:
        pods = await until("the whole gang bound", all_bound)
    except AssertionError:
        for p in await env.pods():
            print(
                "DEBUG",
                p["metadata"]["name"],
                p["spec"].get("nodeName"),
                p["spec"].get("schedulerName"),
                (p.get("status") or {}).get("conditions"),
                annotations_of(p),
            )
        raise
    where = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    assert where["worker-0"] == where["worker-1"] == "e2e-a10-0"
    assert where["launcher"].startswith("e2e-worker-")
    launcher_now = next(p for p in pods if p["metadata"]["name"] == "launcher")
    assert "volcano.sh/vgpu-ids-new" not in annotations_of(launcher_now)
    ledger = await env.api.get(LEDGERS, "e2e-a10-0")
    holders = {a.name for a in entries_of(ledger) if a.namespace == env.ns}
    assert holders == {"worker-0", "worker-1"}

    async def running() -> Obj | None:
        podgroup = await env.api.get(PODGROUPS, group, namespace=env.ns)
        status = podgroup.get("status") or {}
        return status if status.get("phase") == "Running" else None

    status = await until("the PodGroup Running", running)
    assert [(c["type"], c["reason"]) for c in status["conditions"]] == [
        ("Scheduled", "tasks in gang are ready to be scheduled")
    ]
