"""``MemoryClusterClient``: the ``ClusterClient`` protocol served by the API double in-process.

Same semantics as the HTTPS double (both go through ``vgpu_guard.apidouble.frontend.Frontend``:
RBAC, admission webhooks, the store), minus HTTP, so property tests can run hundreds of thousands
of operations. Every call yields to the event loop once, as real I/O would, so concurrent tasks
interleave at the same points they would against a server.

``FaultPlan`` makes the API misbehave on purpose, for "faults of the API" tests: a rule names the
verb and resource it hits, how many times, and what happens:

    plan = FaultPlan()
    plan.add(verb="replace", resource=LEDGERS, error=conflict_error(), times=2)   # two 409s
    plan.add(verb="bind", when="after", error=unavailable_error())               # applied, answer lost
    plan.add(verb="watch", drop_after=3)                                          # stream ends early
    client = MemoryClusterClient(store, faults=plan)

``when="before"`` fails the call without touching the store; ``when="after"`` applies it and then
fails (the response was lost: the caller must cope with a write that did happen). ``delay`` slows
a call down (``asyncio.sleep``, so a test's fake clock or ``wait_for`` timeout applies).

Every error leaves with the ``Request`` it was about (as the production adapter's do), injected
faults included, so log lines read the same against the double as against a real server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from vgpu_guard.apidouble.frontend import Frontend
from vgpu_guard.apidouble.identity import ADMIN, UserInfo
from vgpu_guard.apidouble.store import Store
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.client import ObjectList, WatchEvent, typed_items
from vgpu_guard.kube.errors import Conflict, Expired, KubeError, Request, Unavailable
from vgpu_guard.kube.resources import PODS, Resource

__all__ = [
    "FaultPlan",
    "FaultRule",
    "MemoryClusterClient",
    "conflict_error",
    "expired_error",
    "timeout_error",
    "unavailable_error",
]

_Strings = list[str]  # aliases: inside the client, `list` is the LIST verb
_Anys = list[Any]
Verb = Literal["get", "list", "watch", "create", "replace", "replace_status", "patch", "delete", "bind"]


def conflict_error(name: str = "object") -> Conflict:
    """A 409 as the API server sends for a stale resourceVersion."""
    msg = (
        f'Operation cannot be fulfilled on "{name}": the object has been modified; please apply your '
        "changes to the latest version and try again"
    )
    return Conflict(msg, code=409, reason="Conflict")


def unavailable_error(
    message: str = "injected fault: the server is currently unable to handle the request",
) -> Unavailable:
    """A 503 ServiceUnavailable."""
    return Unavailable(message, code=503, reason="ServiceUnavailable")


def timeout_error() -> Unavailable:
    """What the production adapter raises when a request times out on the client side."""
    return Unavailable("injected fault: request timed out", code=0, reason="Timeout")


def expired_error(resource_version: str = "1") -> Expired:
    """The 410 a watch gets when its resourceVersion left the server's window."""
    return Expired(f"too old resource version: {resource_version} (injected)", code=410, reason="Expired")


@dataclass(slots=True)
class FaultRule:
    """One rule of a ``FaultPlan``; see the module docstring."""

    verb: Verb | None = None
    resource: Resource | None = None
    error: KubeError | None = None
    when: Literal["before", "after"] = "before"
    delay: float = 0.0
    times: int | None = 1  # None: every matching call
    skip: int = 0  # let this many matching calls through first
    drop_after: int | None = None  # watch only: end the stream after this many events
    hits: int = 0

    def matches(self, verb: str, resource: Resource | None) -> bool:
        if self.verb is not None and self.verb != verb:
            return False
        if self.resource is not None and resource is not None:
            return (self.resource.group, self.resource.plural) == (resource.group, resource.plural)
        return self.resource is None


@dataclass(slots=True)
class FaultPlan:
    """Ordered fault rules; the first live matching rule applies to a call."""

    rules: list[FaultRule] = field(default_factory=list)
    log: list[tuple[str, str]] = field(default_factory=list)  # (verb, plural) of calls that hit a rule

    def add(
        self,
        *,
        verb: Verb | None = None,
        resource: Resource | None = None,
        error: KubeError | None = None,
        when: Literal["before", "after"] = "before",
        delay: float = 0.0,
        times: int | None = 1,
        skip: int = 0,
        drop_after: int | None = None,
    ) -> FaultRule:
        if error is None and not delay and drop_after is None:
            raise ValueError("a fault rule needs an error, a delay or drop_after")
        if drop_after is not None and verb not in (None, "watch"):
            raise ValueError("drop_after only applies to watch")
        rule = FaultRule(verb, resource, error, when, delay, times, skip, drop_after)
        self.rules.append(rule)
        return rule

    def take(self, verb: str, resource: Resource | None) -> FaultRule | None:
        for rule in self.rules:
            if not rule.matches(verb, resource):
                continue
            if rule.skip > 0:
                rule.skip -= 1
                continue
            if rule.times is not None and rule.hits >= rule.times:
                continue
            rule.hits += 1
            self.log.append((verb, resource.plural if resource else ""))
            return rule
        return None

    def clear(self) -> None:
        self.rules.clear()


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
        faults: FaultPlan | None = None,
        frontend: Frontend | None = None,
        bookmark_interval: float = 1.0,
    ):
        if frontend is not None and frontend.store is not store:
            raise ValueError("the frontend must serve the same store")
        self.store = store
        self.frontend = frontend or Frontend(store)
        self.user = user
        self.faults = faults or FaultPlan()
        self.bookmark_interval = bookmark_interval
        self.warnings: list[str] = []  # every warning the "server" sent, in order

    async def _before(self, verb: str, resource: Resource | None) -> FaultRule | None:
        await asyncio.sleep(0)  # a real call yields to the loop; so do we
        rule = self.faults.take(verb, resource)
        if rule is None:
            return None
        if rule.delay:
            await asyncio.sleep(rule.delay)
        if rule.error is not None and rule.when == "before":
            raise rule.error
        return rule

    @staticmethod
    def _after(rule: FaultRule | None) -> None:
        if rule is not None and rule.error is not None and rule.when == "after":
            raise rule.error

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
    ) -> None:
        with _about(Request("delete", resource, name, _ns(resource, namespace))):
            rule = await self._before("delete", resource)
            out = await self.frontend.delete(
                resource,
                name,
                namespace=namespace,
                grace_period_seconds=grace_period_seconds,
                uid=uid,
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
