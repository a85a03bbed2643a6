"""The request path in front of the store: authorization, then the admission chain, then storage.

Both doors into the double go through here: ``MemoryClusterClient`` in process (``simulate``, the
tests) and the tests' HTTPS server (tests/apidouble_support/http/), so authorization and webhooks
act the same on both. The order
is kube-apiserver's (k8s.io/apiserver/pkg/endpoints/handlers/create.go, update.go, delete.go):
authorize -> decode + defaults + built-in admission (``Store.prepare``) -> mutating webhooks ->
validation (``Store.complete``) -> validating webhooks -> storage (``Store.commit``).

With no webhook configurations stored and no authorizer the path costs a few function calls, which
keeps the controller's property tests (100k operations) fast.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._webhook_warnings import attach_warnings
from vgpu_guard.apidouble.identity import ADMIN, UserInfo
from vgpu_guard.apidouble.store import Pending, RetryWrite, Store, Watch
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.client import ObjectList
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import BINDINGS, PODS, Resource

__all__ = ["AdmissionRunner", "Authorizer", "Frontend", "Written"]

_RETRIES = 5


class Authorizer(Protocol):
    """Who may do what. The double ships none: it serves without authorization
    (``simulate`` acts as the admin); tests plug RBAC in (tests/apidouble_support/rbac.py).
    Superusers (``system:masters``) never reach it."""

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
        """Raises ``Forbidden`` when ``user`` may not do ``verb`` on the resource."""
        ...

    def authorize_path(self, user: UserInfo, method: str, path: str, query: Mapping[str, str]) -> None:
        """A request for a path nothing serves, authorized as its URL reads (requestinfo.go)."""
        ...

    def review(self, user: UserInfo, spec: Mapping[str, Any]) -> tuple[bool, str]:
        """A SelfSubjectAccessReview's ``spec`` (one kind of attributes): (allowed, reason)."""
        ...


class AdmissionRunner(Protocol):
    """What stands for the API server's webhook calls: ``simulate``'s in-process arbiter
    (cli/inprocess_arbiter.py), or the tests' calls of stored webhook configurations
    (tests/apidouble_support/admission.py)."""

    def active(self) -> bool:
        """False when no webhook configuration exists (the fast path)."""
        ...

    async def mutate(self, pending: Pending, user: UserInfo) -> None: ...

    async def validate(self, pending: Pending, user: UserInfo) -> None: ...


@dataclass(slots=True)
class Written:
    """A write's answer: the object (or Status) and the warnings for ``Warning:`` headers."""

    object: Obj
    warnings: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Frontend:
    """The double's request path; ``authorizer``/``admission`` are None when switched off."""

    store: Store
    authorizer: Authorizer | None = None
    admission: AdmissionRunner | None = None

    # -- authorization ---------------------------------------------------------------------------
    def authorize(
        self,
        user: UserInfo,
        verb: str,
        resource: Resource,
        *,
        namespace: str | None = None,
        name: str = "",
        subresource: str = "",
    ) -> None:
        if self.authorizer is None or user.superuser:
            return
        self.authorizer.authorize(
            user,
            verb=verb,
            group=resource.group,
            resource=resource.plural,
            subresource=subresource,
            namespace=namespace or "",
            name=name,
        )

    # -- reads -----------------------------------------------------------------------------------
    def get(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        user: UserInfo = ADMIN,
        subresource: str = "",
    ) -> Obj:
        self.store.type_of(resource)
        self.authorize(user, "get", resource, namespace=namespace, name=name, subresource=subresource)
        return self.store.get(resource, name, namespace=namespace)

    def list(
        self,
        resource: Resource,
        *,
        user: UserInfo = ADMIN,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> ObjectList:
        self.store.type_of(resource)
        self.authorize(user, "list", resource, namespace=namespace)
        return self.store.list(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            continue_token=continue_token,
            resource_version=resource_version,
            resource_version_match=resource_version_match,
        )

    def watch(
        self,
        resource: Resource,
        *,
        resource_version: str | None,
        user: UserInfo = ADMIN,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Watch:
        self.store.type_of(resource)
        self.authorize(user, "watch", resource, namespace=namespace)
        return self.store.watch(
            resource,
            resource_version=resource_version,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
        )

    # -- writes ----------------------------------------------------------------------------------
    async def _write(self, prepare: Callable[[], Pending], user: UserInfo) -> Written:
        for _ in range(_RETRIES):
            pending = prepare()
            chain = self.admission if self.admission is not None and self.admission.active() else None
            try:
                if chain is not None:
                    await chain.mutate(pending, user)
                self.store.complete(pending)
                if chain is not None:
                    await chain.validate(pending, user)
            except KubeError as e:
                attach_warnings(e, pending.warnings)  # webhook warnings come with the error too
                raise
            try:
                return Written(self.store.commit(pending), pending.warnings)
            except RetryWrite:
                continue  # an unconditional write raced another one while webhooks ran: redo it
        raise st.internal(f"gave up after {_RETRIES} attempts: the object kept changing during admission")

    async def create(
        self,
        resource: Resource,
        body: Any,
        *,
        namespace: str | None = None,
        user: UserInfo = ADMIN,
        dry_run: bool = False,
    ) -> Written:
        if (resource.group, resource.plural) == (BINDINGS.group, BINDINGS.plural):
            return await self._create_binding(body, namespace=namespace, user=user, dry_run=dry_run)
        info = self.store.type_of(resource)
        if info.namespaced and not namespace and isinstance(body, dict):
            namespace = (body.get("metadata") or {}).get("namespace")  # as kubectl takes it from the object
        self.authorize(user, "create", resource, namespace=namespace)
        return await self._write(
            lambda: self.store.prepare.create(resource, body, namespace=namespace, dry_run=dry_run), user
        )

    async def update(
        self,
        resource: Resource,
        body: Any,
        *,
        name: str,
        namespace: str | None = None,
        subresource: str = "",
        user: UserInfo = ADMIN,
        dry_run: bool = False,
    ) -> Written:
        self.store.type_of(resource)
        self.authorize(user, "update", resource, namespace=namespace, name=name, subresource=subresource)
        return await self._write(
            lambda: self.store.prepare.update(
                resource, body, name=name, namespace=namespace, subresource=subresource, dry_run=dry_run
            ),
            user,
        )

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: Literal["merge", "json"] = "merge",
        subresource: str = "",
        user: UserInfo = ADMIN,
        dry_run: bool = False,
    ) -> Written:
        self.store.type_of(resource)
        self.authorize(user, "patch", resource, namespace=namespace, name=name, subresource=subresource)
        return await self._write(
            lambda: self.store.prepare.patch(
                resource,
                name,
                patch,
                namespace=namespace,
                patch_type=patch_type,
                subresource=subresource,
                dry_run=dry_run,
            ),
            user,
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        user: UserInfo = ADMIN,
        dry_run: bool = False,
    ) -> Written:
        self.store.type_of(resource)
        self.authorize(user, "delete", resource, namespace=namespace, name=name)
        return await self._write(
            lambda: self.store.prepare.delete(
                resource,
                name,
                namespace=namespace,
                grace_period_seconds=grace_period_seconds,
                uid=uid,
                resource_version=resource_version,
                dry_run=dry_run,
            ),
            user,
        )

    async def bind(
        self, namespace: str, name: str, binding: Any, *, user: UserInfo = ADMIN, dry_run: bool = False
    ) -> Written:
        """POST pods/NAME/binding: RBAC ``create`` on ``pods/binding`` with the pod's name."""
        self.authorize(user, "create", PODS, namespace=namespace, name=name, subresource="binding")
        return await self._write(
            lambda: self.store.prepare.bind(namespace, name, binding, dry_run=dry_run), user
        )

    async def _create_binding(
        self, body: Any, *, namespace: str | None, user: UserInfo, dry_run: bool
    ) -> Written:
        """POST bindings, the legacy door to the same bind: RBAC ``create`` on ``bindings`` with no
        name (a create on a collection, requestinfo.go), the pod named by the Binding."""
        if not namespace and isinstance(body, dict):
            namespace = (body.get("metadata") or {}).get("namespace")
        if not namespace:
            raise st.bad_request("a namespace is required to create bindings")
        self.authorize(user, "create", BINDINGS, namespace=namespace)
        ns = namespace
        return await self._write(lambda: self.store.prepare.bind(ns, None, body, dry_run=dry_run), user)
