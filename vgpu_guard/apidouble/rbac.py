"""RBAC authorization against the Roles, ClusterRoles and bindings stored in the double.

Sources: Kubernetes docs "Using RBAC Authorization"; plugin/pkg/auth/authorizer/rbac/rbac.go
(``RuleAllows``: verbs, apiGroups, resources with ``pods/binding``-style subresources and
``*/sub``, resourceNames), pkg/registry/rbac/validation/rule.go (subjects: User, Group,
ServiceAccount; RoleBindings grant in their namespace, also when they reference a ClusterRole)
and k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go (``forbiddenMessage``).

``system:masters`` never reaches here (the ``Frontend`` lets superusers through, as the real
server's authorizer chain does). Aggregated ClusterRoles (``aggregationRule``) are not expanded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble.identity import UserInfo
from vgpu_guard.apidouble.store import Store
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import Resource

__all__ = ["RBACAuthorizer"]

Obj = dict[str, Any]
_RBAC = "rbac.authorization.k8s.io"
ROLES = Resource(_RBAC, "v1", "roles", "Role", namespaced=True)
ROLE_BINDINGS = Resource(_RBAC, "v1", "rolebindings", "RoleBinding", namespaced=True)
CLUSTER_ROLES = Resource(_RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False)


def _subject_matches(subject: Obj, user: UserInfo, binding_ns: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == user.username)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_ns
        return user.username == f"system:serviceaccount:{ns}:{name}"
    return False


def _rule_allows(rule: Obj, *, verb: str, group: str, resource: str, subresource: str, name: str) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and verb not in verbs:
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and group not in groups:
        return False
    combined = f"{resource}/{subresource}" if subresource else resource
    resources = rule.get("resources") or []
    if not any(r in ("*", combined) or (subresource and r == f"*/{subresource}") for r in resources):
        return False
    names = rule.get("resourceNames") or []
    return not names or name in names


@dataclass(slots=True)
class RBACAuthorizer:
    """An ``Authorizer`` reading rbac.authorization.k8s.io/v1 objects from ``store`` per request."""

    store: Store

    def _rules(self, user: UserInfo, namespace: str) -> Iterable[Obj]:
        for crb in self.store.list(CLUSTER_ROLE_BINDINGS).items:
            if any(_subject_matches(s, user, "") for s in crb.get("subjects") or []):
                yield from self._role_rules(crb.get("roleRef") or {}, "")
        if namespace:
            for rb in self.store.list(ROLE_BINDINGS, namespace=namespace).items:
                if any(_subject_matches(s, user, namespace) for s in rb.get("subjects") or []):
                    yield from self._role_rules(rb.get("roleRef") or {}, namespace)

    def _role_rules(self, ref: Obj, namespace: str) -> list[Obj]:
        try:
            if ref.get("kind") == "ClusterRole":
                role = self.store.get(CLUSTER_ROLES, str(ref.get("name")))
            elif ref.get("kind") == "Role" and namespace:
                role = self.store.get(ROLES, str(ref.get("name")), namespace=namespace)
            else:
                return []
        except KubeError:
            return []  # a binding to a missing role grants nothing
        return [r for r in role.get("rules") or [] if isinstance(r, dict)]

    def authorize(
        self,
        user: UserInfo,
        *,
        verb: str,
        group: str,
        resource: str,
        subresource: str = "",
        namespace: str = "",
        name: str = "",
    ) -> None:
        for rule in self._rules(user, namespace):
            if _rule_allows(
                rule, verb=verb, group=group, resource=resource, subresource=subresource, name=name
            ):
                return
        shown = f"{resource}/{subresource}" if subresource else resource
        where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        why = f'User "{user.username}" cannot {verb} resource "{shown}" in API group "{group}" {where}'
        what = st.qualified(group, resource)
        message = f'{what} "{name}" is forbidden: {why}' if name else f"{what} is forbidden: {why}"
        raise st.forbidden(message, group=group, plural=resource, name=name)
