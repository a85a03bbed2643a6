"""``Impersonate-User`` / ``Impersonate-Group``: acting as someone else, as kube-apiserver 1.20 allows.

``kubectl --as=system:serviceaccount:NS:NAME auth can-i ...`` sends these headers; the API
server's impersonation filter (apiserver/pkg/endpoints/filters/impersonation.go) asks the
authorizer whether the requester may ``impersonate`` the user (or the ServiceAccount, in its
namespace) and each group, answers 403 otherwise, and then serves the request as the impersonated
identity. Groups: as requested; without any, a ServiceAccount's groups, plus
``system:authenticated`` for anyone but ``system:anonymous``. Extra fields
(``Impersonate-Extra-*``) are authorized the same way on ``userextras/<key>``.
"""

from __future__ import annotations

from collections.abc import Mapping

from vgpu_guard.apidouble.http.rbac import RBACAuthorizer
from vgpu_guard.apidouble.identity import UserInfo

__all__ = ["ImpersonationError", "impersonated"]


class ImpersonationError(Exception):
    """Headers that cannot be honoured: the filter answers a plain-text 500 (InternalError), with
    the requests as Go prints ObjectReferences."""


_SA_PREFIX = "system:serviceaccount:"


def _check(
    authorizer: RBACAuthorizer | None, actor: UserInfo, resource: str, name: str, ns: str = ""
) -> None:
    if authorizer is None or actor.superuser:
        return
    sub = ""
    if resource.startswith("userextras/"):
        resource, sub = resource.split("/", 1)
    group = "authentication.k8s.io" if resource in ("userextras", "uids") else ""
    authorizer.authorize(
        actor, verb="impersonate", group=group, resource=resource, subresource=sub, namespace=ns, name=name
    )


def impersonated(headers: Mapping[str, str], actor: UserInfo, authorizer: RBACAuthorizer | None) -> UserInfo:
    """The identity a request acts as: ``actor``, or whom its Impersonate-* headers name."""
    username = headers.get("Impersonate-User", "")
    groups = [v for k, v in headers.items() if k.lower() == "impersonate-group"]
    specified = bool(groups)
    extras = [k for k in headers if k.lower().startswith("impersonate-extra-")]
    if not username:
        if groups or extras:
            refs = [f"{{Group  {g}    }}" for g in groups]
            for k in extras:
                key = k[len("impersonate-extra-") :].lower()
                refs.append(f"{{UserExtra  {headers[k]}  authentication.k8s.io/v1  {key}}}")
            raise ImpersonationError(f"requested [{' '.join(refs)}] without impersonating a user")
        return actor
    if username.startswith(_SA_PREFIX) and username.count(":") == 3:
        namespace, name = username[len(_SA_PREFIX) :].split(":")
        _check(authorizer, actor, "serviceaccounts", name, namespace)
        if not groups:
            groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
    else:
        _check(authorizer, actor, "users", username)
    for group in groups:
        _check(authorizer, actor, "groups", group)
    for key in extras:
        _check(authorizer, actor, f"userextras/{key[len('impersonate-extra-') :].lower()}", headers[key])
    if not specified and username != "system:anonymous" and "system:unauthenticated" not in groups:
        groups.append("system:authenticated")
    return UserInfo(username, tuple(groups))
