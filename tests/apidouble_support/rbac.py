"""RBAC authorization against the Roles, ClusterRoles and bindings stored in the double.

Test code: the double serves without authorization (``simulate``); tests that need
the double to refuse what an identity may not do plug this ``Authorizer`` in
(``serve_double(authorizer=RBACAuthorizer)``, ``Frontend(store, authorizer=RBACAuthorizer(store))``):
the e2e ``double`` backend runs our processes under the chart's ServiceAccounts, tests/cli runs the
chart's hooks under theirs, and tests/contract/test_rbac.py compares it with kube-apiserver 1.20.

Sources: Kubernetes docs "Using RBAC Authorization"; plugin/pkg/auth/authorizer/rbac/rbac.go
(``RuleAllows``: verbs, apiGroups, resources with ``pods/binding``-style subresources and
``*/sub``, resourceNames, nonResourceURLs; the ``RBAC: allowed by ...`` reasons),
pkg/registry/rbac/validation/rule.go (subjects: User, Group, ServiceAccount; RoleBindings grant in
their namespace, also when they reference a ClusterRole),
k8s.io/apiserver/pkg/endpoints/request/requestinfo.go (what a URL asks for: verb, resource,
subresource, namespace, name — a namespace's own URL is *in* that namespace) and
k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go (``forbiddenMessage``). Checked
against a real 1.20 API server by tests/contract/test_rbac.py.

``system:masters`` never reaches here (the ``Frontend`` lets superusers through, as the real
server's authorizer chain does). Aggregated ClusterRoles (``aggregationRule``) are not expanded.
The bootstrap policy is not stored either; of it the double knows only the two bindings every
client relies on for non-resource URLs (system:discovery for authenticated users,
system:public-info-viewer for everyone), and that any authenticated user may create a
SelfSubjectAccessReview (system:basic-user).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tests.apidouble_support.http.server import PUBLIC_PATHS
from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble.identity import UserInfo
from vgpu_guard.apidouble.store import Store
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import Resource

__all__ = [
    "CLUSTER_ROLES",
    "CLUSTER_ROLE_BINDINGS",
    "ROLES",
    "ROLE_BINDINGS",
    "RBACAuthorizer",
    "RequestAttributes",
    "request_attributes",
]

_RBAC = "rbac.authorization.k8s.io"
ROLES = Resource(_RBAC, "v1", "roles", "Role", namespaced=True)
ROLE_BINDINGS = Resource(_RBAC, "v1", "rolebindings", "RoleBinding", namespaced=True)
CLUSTER_ROLES = Resource(_RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False)

# The bootstrap policy's non-resource grants (plugin/pkg/auth/authorizer/rbac/bootstrappolicy).
_DISCOVERY_PATHS = (
    "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz",
    "/version", "/version/",
)  # fmt: skip
_BOOTSTRAP: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("system:discovery", "system:authenticated", _DISCOVERY_PATHS),
    ("system:public-info-viewer", "system:authenticated", PUBLIC_PATHS),
    ("system:public-info-viewer", "system:unauthenticated", PUBLIC_PATHS),
)
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


@dataclass(frozen=True, slots=True)
class RequestAttributes:
    """What one request asks to do (authorizer.AttributesRecord of a resource request)."""

    verb: str
    group: str
    version: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""


def request_attributes(method: str, path: str, query: Mapping[str, str]) -> RequestAttributes | None:
    """The attributes the API server authorizes for ``method path`` (None: a non-resource URL)."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return None  # /api/v1, /apis/GROUP/VERSION: discovery
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, "get")
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) >= 3 else ""
    if not name and verb == "get":
        verb = "watch" if query.get("watch") in ("true", "1") else "list"
    elif not name and verb == "delete":
        verb = "deletecollection"
    return RequestAttributes(verb, group, version, resource, subresource, namespace, name)


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


def _describe_subject(subject: Obj, binding_ns: str) -> str:
    """rule.go describeSubject: ``ServiceAccount "name/ns"``, ``User "u"``, ``Group "g"``."""
    kind, name = str(subject.get("kind")), str(subject.get("name"))
    if kind == "ServiceAccount":
        name = f"{name}/{subject.get('namespace') or binding_ns}"
    return f"{kind} {json.dumps(name)}"


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


def _path_allowed(patterns: Any, path: str) -> bool:
    for pattern in patterns or []:
        if pattern in ("*", path):
            return True
        if isinstance(pattern, str) and pattern.endswith("*") and path.startswith(pattern[:-1]):
            return True
    return False


@dataclass(frozen=True, slots=True)
class _Grant:
    """One binding's role rules, and how the API server describes where they come from."""

    source: str
    rules: list[Obj]


@dataclass(slots=True)
class RBACAuthorizer:
    """An ``Authorizer`` reading rbac.authorization.k8s.io/v1 objects from ``store`` per request."""

    store: Store

    def _grants(self, user: UserInfo, namespace: str, errors: list[str]) -> Iterator[_Grant]:
        for crb in self.store.list(CLUSTER_ROLE_BINDINGS).items:
            ref = crb.get("roleRef") or {}
            for subject in crb.get("subjects") or []:
                if _subject_matches(subject, user, ""):
                    source = (
                        f"ClusterRoleBinding {json.dumps(crb['metadata']['name'])} of {ref.get('kind')} "
                        f"{json.dumps(str(ref.get('name')))} to {_describe_subject(subject, '')}"
                    )
                    yield _Grant(source, self._role_rules(ref, "", errors))
                    break
        if not namespace:
            return
        for rb in self.store.list(ROLE_BINDINGS, namespace=namespace).items:
            ref = rb.get("roleRef") or {}
            for subject in rb.get("subjects") or []:
                if _subject_matches(subject, user, namespace):
                    where = json.dumps(f"{rb['metadata']['name']}/{namespace}")
                    source = (
                        f"RoleBinding {where} of {ref.get('kind')} {json.dumps(str(ref.get('name')))} "
                        f"to {_describe_subject(subject, namespace)}"
                    )
                    yield _Grant(source, self._role_rules(ref, namespace, errors))
                    break

    def _role_rules(self, ref: Obj, namespace: str, errors: list[str]) -> list[Obj]:
        try:
            if ref.get("kind") == "ClusterRole":
                role = self.store.get(CLUSTER_ROLES, str(ref.get("name")))
            elif ref.get("kind") == "Role" and namespace:
                role = self.store.get(ROLES, str(ref.get("name")), namespace=namespace)
            else:
                return []
        except KubeError:
            what = "clusterrole" if ref.get("kind") == "ClusterRole" else "role"
            errors.append(f'{what}.rbac.authorization.k8s.io "{ref.get("name")}" not found')
            return []  # a binding to a missing role grants nothing
        return [r for r in role.get("rules") or [] if isinstance(r, dict)]

    def decide(
        self,
        user: UserInfo,
        *,
        verb: str,
        group: str,
        resource: str,
        subresource: str = "",
        namespace: str = "",
        name: str = "",
    ) -> tuple[bool, str]:
        """(allowed, reason) as the RBAC authorizer answers a SubjectAccessReview."""
        errors: list[str] = []
        for grant in self._grants(user, namespace, errors):
            for rule in grant.rules:
                if _rule_allows(
                    rule, verb=verb, group=group, resource=resource, subresource=subresource, name=name
                ):
                    return True, f"RBAC: allowed by {grant.source}"
        if not errors:
            return False, ""
        return False, "RBAC: " + (errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")

    def decide_path(self, user: UserInfo, *, verb: str, path: str) -> tuple[bool, str]:
        """(allowed, reason) for a non-resource URL (nonResourceURLs rules, bootstrap bindings)."""
        for role, group, paths in _BOOTSTRAP:
            if group in user.groups and verb == "get" and _path_allowed(paths, path):
                why = f'ClusterRoleBinding "{role}" of ClusterRole "{role}" to Group "{group}"'
                return True, f"RBAC: allowed by {why}"
        errors: list[str] = []
        for grant in self._grants(user, "", errors):
            for rule in grant.rules:
                verbs = rule.get("verbs") or []
                if ("*" in verbs or verb in verbs) and _path_allowed(rule.get("nonResourceURLs"), path):
                    return True, f"RBAC: allowed by {grant.source}"
        return False, ""

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
        if group == "" and resource == "namespaces" and name and not namespace:
            namespace = name  # requestinfo.go: /api/v1/namespaces/NAME is in namespace NAME
        allowed, _ = self.decide(
            user,
            verb=verb,
            group=group,
            resource=resource,
            subresource=subresource,
            namespace=namespace,
            name=name,
        )
        if allowed:
            return
        shown = f"{resource}/{subresource}" if subresource else resource
        where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        why = f'User "{user.username}" cannot {verb} resource "{shown}" in API group "{group}" {where}'
        what = st.qualified(group, resource)
        message = f'{what} "{name}" is forbidden: {why}' if name else f"{what} is forbidden: {why}"
        raise st.forbidden(message, group=group, plural=resource, name=name)

    def authorize_path(self, user: UserInfo, method: str, path: str, query: Mapping[str, str]) -> None:
        """A path nothing serves is authorized first, as the API server's filters do (403 first)."""
        attrs = request_attributes(method, path, query)
        if attrs is not None:
            self.authorize(
                user,
                verb=attrs.verb,
                group=attrs.group,
                resource=attrs.resource,
                subresource=attrs.subresource,
                namespace=attrs.namespace,
                name=attrs.name,
            )

    def review(self, user: UserInfo, spec: Mapping[str, Any]) -> tuple[bool, str]:
        """A SelfSubjectAccessReview's answer for its resource or non-resource attributes."""
        resource_attrs, path_attrs = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        if isinstance(resource_attrs, Mapping):
            a = {k: str(v) for k, v in resource_attrs.items() if isinstance(v, str)}
            return self.decide(
                user,
                verb=a.get("verb", ""),
                group=a.get("group", ""),
                resource=a.get("resource", ""),
                subresource=a.get("subresource", ""),
                namespace=a.get("namespace", ""),
                name=a.get("name", ""),
            )
        if isinstance(path_attrs, Mapping):
            verb, path = str(path_attrs.get("verb") or ""), str(path_attrs.get("path") or "")
            return self.decide_path(user, verb=verb, path=path)
        return True, ""
