"""Who is asking: the identities the double authenticates by bearer token.

kube-apiserver turns a token into ``user.Info`` (username, uid, groups); admission webhooks see it
as ``request.userInfo`` and RBAC authorizes it. ``system:masters`` bypasses RBAC, as the real
server's superuser group does.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ADMIN", "ANONYMOUS", "UserInfo", "service_account"]


@dataclass(frozen=True, slots=True)
class UserInfo:
    """One authenticated identity (k8s.io/apiserver/pkg/authentication/user.Info)."""

    username: str
    groups: tuple[str, ...] = ("system:authenticated",)
    uid: str = ""

    @property
    def superuser(self) -> bool:
        return "system:masters" in self.groups

    def as_review(self) -> dict[str, object]:
        """``request.userInfo`` of an AdmissionReview."""
        out: dict[str, object] = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            out["uid"] = self.uid
        return out


ADMIN = UserInfo("kubernetes-admin", ("system:masters", "system:authenticated"))
ANONYMOUS = UserInfo("system:anonymous", ("system:unauthenticated",))


def service_account(namespace: str, name: str) -> UserInfo:
    """The identity a ServiceAccount token carries (``system:serviceaccount:NS:NAME``)."""
    return UserInfo(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
    )
