"""RBAC in the double: Roles, ClusterRoles and bindings stored in it decide what each identity may do.

Sources: Kubernetes docs "Using RBAC Authorization"; plugin/pkg/auth/authorizer/rbac/rbac.go and
k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go (forbiddenMessage).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.apidouble_support.http.server import serve_double
from tests.apidouble_support.rbac import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    ROLE_BINDINGS,
    ROLES,
    RBACAuthorizer,
)
from tests.apidouble_support.tokens import kubeconfig_for
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.frontend import Frontend
from vgpu_guard.apidouble.identity import service_account
from vgpu_guard.apidouble.store import Store
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import Forbidden
from vgpu_guard.kube.resources import LEASES, NODES, PODS

from .objects import node, pod

CONTROLLER = service_account("vgpu-guard", "controller")


def grant(store: Store) -> None:
    """The controller may read pods and nodes cluster-wide, bind pods, and use one Lease."""
    store.create(
        CLUSTER_ROLES,
        {"metadata": {"name": "vgpu-guard-controller"}, "rules": [
            {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        ]},
    )  # fmt: skip
    store.create(
        CLUSTER_ROLE_BINDINGS,
        {"metadata": {"name": "vgpu-guard-controller"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "vgpu-guard-controller"},
         "subjects": [{"kind": "ServiceAccount", "name": "controller", "namespace": "vgpu-guard"}]},
    )  # fmt: skip
    store.create(ROLES, {"metadata": {"name": "leader", "namespace": "kube-system"}, "rules": [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"],
         "resourceNames": ["vgpu-guard"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    ]})  # fmt: skip
    store.create(
        ROLE_BINDINGS,
        {"metadata": {"name": "leader", "namespace": "kube-system"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "leader"},
         "subjects": [{"kind": "ServiceAccount", "name": "controller", "namespace": "vgpu-guard"}]},
    )  # fmt: skip


@pytest.fixture(params=["memory", "aio"])
async def as_controller(request: pytest.FixtureRequest, store: Store, tmp_path: Path) -> Any:
    store.create(NODES, node("n1"))
    store.create(PODS, pod("p"))
    grant(store)
    if request.param == "memory":
        yield MemoryClusterClient(
            store, user=CONTROLLER, frontend=Frontend(store, authorizer=RBACAuthorizer(store))
        )
        return
    async with serve_double(tmp_path, store=store, authorizer=RBACAuthorizer) as api:
        c = await AioClusterClient.from_kubeconfig(str(kubeconfig_for(api, CONTROLLER)))
        try:
            yield c
        finally:
            await c.close()


async def test_granted_verbs_work(as_controller: Any) -> None:
    # rbac.go RulesAllow: verbs x apiGroups x resources from a ClusterRoleBinding to a ServiceAccount.
    assert [p["metadata"]["name"] for p in (await as_controller.list(PODS)).items] == ["p"]
    await as_controller.get(NODES, "n1")
    await as_controller.bind("default", "p", node="n1", annotations={})


async def test_forbidden_gets_the_api_servers_message(as_controller: Any) -> None:
    # responsewriters/errors.go forbiddenMessage, wrapped by errors.NewForbidden.
    with pytest.raises(Forbidden) as err:
        await as_controller.delete(PODS, "p", namespace="default")
    assert err.value.code == 403
    assert err.value.message == (
        'pods "p" is forbidden: User "system:serviceaccount:vgpu-guard:controller" cannot delete resource '
        '"pods" in API group "" in the namespace "default"'
    )
    with pytest.raises(Forbidden) as e2:
        await as_controller.create(NODES, node("n2"))
    assert 'cannot create resource "nodes" in API group "" at the cluster scope' in e2.value.message


async def test_subresources_need_their_own_rule(as_controller: Any) -> None:
    # RBAC "Referring to resources": pods/status is a separate resource from pods and pods/binding.
    with pytest.raises(Forbidden, match='cannot patch resource "pods/status"'):
        await as_controller.patch(
            PODS, "p", {"status": {"phase": "Running"}}, namespace="default", subresource="status"
        )


async def test_resource_names_limit_a_rule_to_named_objects(as_controller: Any, store: Store) -> None:
    # RBAC "Referring to resources": resourceNames restrict get/update to the listed names.
    await as_controller.create(
        LEASES, {"metadata": {"name": "vgpu-guard", "namespace": "kube-system"}, "spec": {}}
    )
    store.create(LEASES, {"metadata": {"name": "other", "namespace": "kube-system"}, "spec": {}})
    await as_controller.get(LEASES, "vgpu-guard", namespace="kube-system")
    with pytest.raises(Forbidden, match=r'leases\.coordination\.k8s\.io "other" is forbidden'):
        await as_controller.get(LEASES, "other", namespace="kube-system")
    with pytest.raises(Forbidden, match='in the namespace "default"'):
        await as_controller.get(LEASES, "vgpu-guard", namespace="default")  # Role grants only in kube-system
