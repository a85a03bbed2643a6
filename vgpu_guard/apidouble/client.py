"""``MemoryClusterClient``: the ``ClusterClient`` protocol served by the API double in-process.

Same semantics as the HTTPS double (both go through ``vgpu_guard.apidouble.frontend.Frontend``:
authorization when a test plugs one in, admission webhooks, the store), minus HTTP, so property
tests can run hundreds of thousands of operations. Every call yields to the event loop once, as
real I/O would, so concurrent tasks interleave at the same points they would against a server.

Calls misbehave on purpose only when a test plugs a ``Faults`` in (its fault plans live in
tests/apidouble_support/faults.py); ``simulate`` plugs none.

Every error leaves with the ``Request`` it was about (as the production adapter's do), injected
faults included, so log lines read the same against the double as against a real server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal, Protocol

from vgpu_guard.apidouble.frontend import Frontend
from vgpu_guard.apidouble.identity import ADMIN, UserInfo
from vgpu_guard.apidouble.store import Store
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.client import ObjectList, WatchEvent, typed_items
from vgpu_guard.kube.errors import KubeError, Request
from vgpu_guard.kube.resources import PODS, Resource

__all__ = ["Fault", "Faults", "MemoryClusterClient"]

_Strings = list[str]  # aliases: inside the client, `list` is the LIST verb
_Anys = list[Any]


class Fault(Protocol):
    """An injected fault that let its call through (``Faults.before`` returned it)."""

    drop_after: int | None  # a watch: the server ends the stream after this many events

    def after(self) -> None:
        """Raises when the call's answer is lost after it was applied."""
        ...


class Faults(Protocol):
    """Calls that misbehave on purpose: tests plug a fault plan in; the product never does."""

    async def before(self, verb: str, resource: Resource | None) -> Fault | None:
        """Before ``verb`` on ``resource`` runs: wait, raise, or let it through with a ``Fault``."""
        ...


@contextmanager
def _about(request: Request) -> Iterator[None]:
    """Attach ``request`` to the ``KubeError`` that leaves the block (the frontend's errors and
    injected faults carry only the server's Status)."""
    try:
        yield
    except KubeError as e:
        e.about(request)
        raise


def _ns(resource: Resource, namespace: str | None) -> str:
    return (namespace or "") if resource.namespaced else ""


class MemoryClusterClient:
    """``ClusterClient`` over an in-process ``Store`` (optionally a shared ``Frontend``)."""

    def __init__(
        self,
        store: Store,
        *,
        user: UserInfo = ADMIN,
        faults: Faults | None = None,
        frontend: Frontend | None = None,
        bookmark_interval: float = 1.0,
    ):
        if frontend is not None and frontend.store is not store:
            raise ValueError("the frontend must serve the same store")
        self.store = store
        self.frontend = frontend or Frontend(store)
        self.user = user
        self.faults = faults
        self.bookmark_interval = bookmark_interval
        self.warnings: list[str] = []  # every warning the "server" sent, in order

    async def _before(self, verb: str, resource: Resource | None) -> Fault | None:
        await asyncio.sleep(0)  # a real call yields to the loop; so do we
        return None if self.faults is None else await self.faults.before(verb, resource)

    @staticmethod
    def _after(fault: Fault | None) -> None:
        if fault is not None:
            fault.after()

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        with _about(Request("get", resource, name, _ns(resource, namespace))):
            rule = await self._before("get", resource)
            obj = self.frontend.get(resource, name, namespace=namespace, user=self.user)
            self._after(rule)
        return obj

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ObjectList:
        with _about(Request("list", resource, namespace=_ns(resource, namespace))):
            rule = await self._before("list", resource)
            out = self.frontend.list(
                resource,
                user=self.user,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=limit,
                continue_token=continue_token,
            )
            self._after(rule)
        typed_items(out.items, resource)
        return out

    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
    ) -> AsyncIterator[WatchEvent]:
        """Events after ``resource_version``; BOOKMARKs every ``bookmark_interval`` when idle, once
        the resource has changed since the watch began (the watch cache sends none before)."""
        with _about(Request("watch", resource, namespace=_ns(resource, namespace))):
            rule = await self._before("watch", resource)
            w = self.frontend.watch(
                resource,
                resource_version=resource_version,
                user=self.user,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
            )
            self._after(rule)
        drop_after = rule.drop_after if rule is not None else None
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        w.wakeup = wake.set
        deadline = loop.time() + timeout_seconds if timeout_seconds else None
        sent = 0
        try:
            while True:
                for etype, obj in w.pop():
                    if drop_after is not None and sent >= drop_after:
                        return  # the injected fault: the server ended the stream early
                    yield WatchEvent(etype, obj)  # type: ignore[arg-type]
                    sent += 1
                if w.closed:
                    return
                wake.clear()
                if w.events:
                    continue
                wait = self.bookmark_interval
                if deadline is not None:
                    wait = min(wait, deadline - loop.time())
                    if wait <= 0:
                        return
                try:
                    # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
                    # that arrives as the event fires, and the watch then never ends.
                    async with asyncio.timeout(wait):
                        await wake.wait()
                except TimeoutError:
                    mark = w.bookmark() if allow_bookmarks else None
                    if mark is not None and (deadline is None or loop.time() < deadline):
                        yield WatchEvent("BOOKMARK", mark)
        finally:
            w.close()

    def _remember(self, warnings: _Strings) -> None:
        self.warnings.extend(warnings)

    async def create(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        meta = obj.get("metadata") or {}
        ns = _ns(resource, namespace or meta.get("namespace"))
        with _about(Request("create", resource, str(meta.get("name") or ""), ns)):
            rule = await self._before("create", resource)
            out = await self.frontend.create(
                resource, obj, namespace=namespace, user=self.user, dry_run=dry_run
            )
            self._remember(out.warnings)
            self._after(rule)
        return out.object

    async def _replace(self, verb: str, resource: Resource, obj: Mapping[str, Any], subresource: str) -> Obj:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        with _about(Request("update", resource, name, _ns(resource, meta.get("namespace")), subresource)):
            rule = await self._before(verb, resource)
            out = await self.frontend.update(
                resource,
                obj,
                name=name,
                namespace=meta.get("namespace"),
                subresource=subresource,
                user=self.user,
            )
            self._remember(out.warnings)
            self._after(rule)
        return out.object

    async def replace(self, resource: Resource, obj: Mapping[str, Any]) -> Obj:
        return await self._replace("replace", resource, obj, "")

    async def replace_status(self, resource: Resource, obj: Mapping[str, Any]) -> Obj:
        return await self._replace("replace_status", resource, obj, "status")

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any] | _Anys,
        *,
        namespace: str | None = None,
        patch_type: Literal["merge", "json"] = "merge",
        subresource: str | None = None,
    ) -> Obj:
        request = Request("patch", resource, name, _ns(resource, namespace), subresource or "")
        with _about(request):
            rule = await self._before("patch", resource)
            out = await self.frontend.patch(
                resource,
                name,
                patch,
                namespace=namespace,
                patch_type=patch_type,
                subresource=subresource or "",
                user=self.user,
            )
            self._remember(out.warnings)
            self._after(rule)
        return out.object

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> None:
        with _about(Request("delete", resource, name, _ns(resource, namespace))):
            rule = await self._before("delete", resource)
            out = await self.frontend.delete(
                resource,
                name,
                namespace=namespace,
                grace_period_seconds=grace_period_seconds,
                uid=uid,
                resource_version=resource_version,
                user=self.user,
            )
            self._remember(out.warnings)
            self._after(rule)

    async def bind(
        self,
        namespace: str,
        name: str,
        *,
        node: str,
        annotations: Mapping[str, str],
        uid: str | None = None,
    ) -> None:
        with _about(Request("create", PODS, name, namespace, "binding")):
            await self._bind(namespace, name, node=node, annotations=annotations, uid=uid)

    async def _bind(
        self, namespace: str, name: str, *, node: str, annotations: Mapping[str, str], uid: str | None
    ) -> None:
        rule = await self._before("bind", PODS)
        meta: Obj = {"name": name, "namespace": namespace, "annotations": dict(annotations)}
        if uid:
            meta["uid"] = uid
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"kind": "Node", "name": node},
        }
        out = await self.frontend.bind(namespace, name, binding, user=self.user)
        self._remember(out.warnings)
        self._after(rule)

    async def close(self) -> None:
        return None
