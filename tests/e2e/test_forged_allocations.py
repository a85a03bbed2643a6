"""Forged GPU assignments after CREATE (issues 21, 22), end to end on both backends.

A tenant (a ServiceAccount with ordinary pod rights in its namespace) creates a plain pod and then
writes an assignment into it: by PATCH, through pods/status, and on a Binding. Each is refused by
``pod-allocations.vgpu-guard.io`` with our message, as kubectl would print it. The controller's own
binding of a vGPU pod (a Binding that carries the assignment) and the device plugin's bind-phase
confirmation still pass through the same webhook. On the real 1.20 control plane the chart runs in
the allNamespaces scope (no matchConditions there): the story's namespace carries no label at all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.conftest import Env, entries_of, gpu_pod, plain_pod
from tests.e2e.harness import ROLE_BINDINGS, ROLES, SERVICE_ACCOUNTS, until
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import KubeError, NotFound
from vgpu_guard.kube.resources import BINDINGS, PODS

pytestmark = pytest.mark.asyncio(loop_scope="session")

Obj = dict[str, Any]
WEBHOOK = "pod-allocations.vgpu-guard.io"
TENANT = "tenant"
NODE = "volcano.sh/vgpu-node"
IDS = "volcano.sh/vgpu-ids-new"
PHASE = "volcano.sh/bind-phase"
FORGED = {NODE: "e2e-ha-0", IDS: "GPU-e2e-ha-0-0,NVIDIA,24576,0:"}
WHO = "only the allocator and the device plugin (admission.allocationWriters) write allocation annotations"


ARBITER = "pod-assignments.vgpu-guard.io"


def denied(message: str, webhook: str = WEBHOOK) -> str:
    """A denial as kubectl prints it (k8s.io/apiserver admission/plugin/webhook/errors)."""
    return f'admission webhook "{webhook}" denied the request: {message}'


def answering(env: Env) -> str:
    """The entry a write that carries an assignment reaches: from 1.28 the arbiter's own (its
    matchConditions take exactly those writes), before it the one allocation entry; both run the
    same checks on the same path."""
    return ARBITER if env.guard.match_conditions else WEBHOOK


def added(user: str, where: str, webhook: str = WEBHOOK) -> str:
    return denied(
        f"[allocation-annotations] metadata.annotations[{NODE}]: e2e-ha-0 was added by {user} {where}; "
        f"{WHO}, leave it out\n"
        f"[allocation-annotations] metadata.annotations[{IDS}]: GPU-e2e-ha-0-0,NVIDIA,24576,0: was added by "
        f"{user} {where}; {WHO}, leave it out",
        webhook,
    )


def notes_of(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


@pytest_asyncio.fixture(loop_scope="session")
async def tenant(env: Env) -> AsyncIterator[tuple[AioClusterClient, str]]:
    """A client authenticated as a ServiceAccount that may create, patch and bind pods in env.ns."""
    meta = {"name": TENANT, "namespace": env.ns}
    await env.api.create(SERVICE_ACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta})
    rules = [
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["get", "list", "create", "update", "patch", "delete"],
        },
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["get", "update", "patch"]},
        # Both doors: pods/binding, and the legacy bindings resource (the Python client's
        # create_namespaced_binding), which reached neither allocation entry before issue 43.
        {"apiGroups": [""], "resources": ["pods/binding", "bindings"], "verbs": ["create"]},
    ]
    rbac = "rbac.authorization.k8s.io/v1"
    await env.api.create(
        ROLES, {"apiVersion": rbac, "kind": "Role", "metadata": meta, "rules": rules}, namespace=env.ns
    )
    binding = {
        "apiVersion": rbac,
        "kind": "RoleBinding",
        "metadata": meta,
        "subjects": [{"kind": "ServiceAccount", "name": TENANT, "namespace": env.ns}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TENANT},
    }
    await env.api.create(ROLE_BINDINGS, binding, namespace=env.ns)
    kubeconfig = await env.backend.kubeconfig_for(env.ns, TENANT)
    client = await AioClusterClient.from_kubeconfig(str(kubeconfig))
    try:
        yield client, f"system:serviceaccount:{env.ns}:{TENANT}"
    finally:
        await client.close()


async def test_a_tenant_cannot_write_an_assignment_into_a_plain_pod(
    env: Env, tenant: tuple[AioClusterClient, str]
) -> None:
    api, user = tenant
    # Nobody schedules this pod, so only the tenant's own Binding could place it.
    obj = plain_pod("victim")
    obj["spec"]["schedulerName"] = "nobody"
    await api.create(PODS, obj, namespace=env.ns)

    with pytest.raises(KubeError) as error:
        await api.patch(PODS, "victim", {"metadata": {"annotations": FORGED}}, namespace=env.ns)
    assert (error.value.code, error.value.message) == (403, added(user, "on UPDATE", answering(env)))

    with pytest.raises(KubeError) as error:
        await api.patch(
            PODS, "victim", {"metadata": {"annotations": FORGED}}, namespace=env.ns, subresource="status"
        )
    assert (error.value.code, error.value.message) == (
        403,
        added(user, "through pods/status", answering(env)),
    )

    with pytest.raises(KubeError) as error:
        await api.bind(env.ns, "victim", node="e2e-ha-0", annotations={NODE: "e2e-ha-0"})
    assert (error.value.code, error.value.message) == (
        403,
        denied(
            f"[allocation-annotations] metadata.annotations[{NODE}]: e2e-ha-0 on a Binding by {user} would be "
            f"copied onto pod {env.ns}/victim; {WHO}, bind without it"
        ),
    )

    legacy = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "victim", "annotations": FORGED},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "e2e-ha-0"},
    }
    with pytest.raises(KubeError) as error:
        await api.create(BINDINGS, legacy, namespace=env.ns)
    assert error.value.code == 403
    assert error.value.message == denied(
        f"[allocation-annotations] metadata.annotations[{NODE}]: e2e-ha-0 on a Binding by {user} would be "
        f"copied onto pod {env.ns}/victim; {WHO}, bind without it\n"
        f"[allocation-annotations] metadata.annotations[{IDS}]: {FORGED[IDS]} on a Binding by {user} would "
        f"be copied onto pod {env.ns}/victim; {WHO}, bind without it",
        answering(env),
    )

    stored = await env.pod("victim")
    assert not set(notes_of(stored)) & {NODE, IDS, PHASE}
    assert not (stored.get("spec") or {}).get("nodeName")
    # An ordinary change by the same tenant still goes through.
    await api.patch(PODS, "victim", {"metadata": {"labels": {"team": "a"}}}, namespace=env.ns)


async def test_the_controllers_binding_passes_and_a_tenant_cannot_rewrite_it(
    env: Env, tenant: tuple[AioClusterClient, str]
) -> None:
    api, user = tenant
    await env.create(PODS, gpu_pod("trainer", 1024, pool="ha"))

    async def confirmed() -> Obj | None:
        pod = await env.pod("trainer")
        return pod if notes_of(pod).get(PHASE) == "success" else None

    # The controller's Binding carried the assignment, the plugin's stand-in confirmed it.
    pod = await until("trainer bound by the controller and confirmed", confirmed)
    assert pod["spec"]["nodeName"] == "e2e-ha-0"
    held = notes_of(pod)[IDS]
    assert held == "GPU-e2e-ha-0-0,NVIDIA,1024,0:"

    with pytest.raises(KubeError) as error:
        await api.patch(
            PODS,
            "trainer",
            {"metadata": {"annotations": {IDS: "GPU-e2e-ha-0-0,NVIDIA,1,0:"}}},
            namespace=env.ns,
        )
    assert (error.value.code, error.value.message) == (
        403,
        denied(
            f"[allocation-annotations] metadata.annotations[{IDS}]: {held} was changed to "
            f"GPU-e2e-ha-0-0,NVIDIA,1,0: by {user} on UPDATE; {WHO}, keep {held}",
            answering(env),
        ),
    )
    assert notes_of(await env.pod("trainer"))[IDS] == held

    # Leave the card free for the next story: the ledger drops the pod once it is gone.
    uid = pod["metadata"]["uid"]
    await env.api.delete(PODS, "trainer", namespace=env.ns, grace_period_seconds=0)

    async def released() -> bool:
        try:
            await env.pod("trainer")
            return False
        except NotFound:
            ledger = await env.ledger("e2e-ha-0")
            return not any(e.pod_uid == uid for e in entries_of(ledger))

    await until("trainer's ledger entry released", released)
