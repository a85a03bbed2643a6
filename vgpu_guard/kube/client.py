"""ClusterClient: the one seam between vgpu-guard and an API server.

Every read, write and watch of the controller, the webhook's caches, the certificate manager,
``simulate`` and the e2e suite goes through this protocol. Two adapters implement it:

- ``vgpu_guard.kube.aio.AioClusterClient``: the official ``kubernetes.aio`` client (production,
  and tests against the API double served over HTTPS);
- ``vgpu_guard.apidouble.client.MemoryClusterClient``: calls the API double's store in-process (fast
  property tests with hundreds of thousands of operations).

Objects are plain dicts exactly as the API serves them. Errors are ``vgpu_guard.kube.errors``.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.resources import Resource

__all__ = ["ClusterClient", "ObjectList", "WatchEvent", "list_all"]


@dataclass(frozen=True, slots=True)
class ObjectList:
    """A LIST answer: the items and the collection's resourceVersion to watch from.

    ``continue_token`` is non-empty when more items follow (pass it back to get the next page);
    ``remaining_item_count`` is the server's estimate of how many, when it gives one.
    """

    items: list[Obj]
    resource_version: str
    continue_token: str = ""
    remaining_item_count: int | None = None


def typed_items(items: list[Obj], resource: Resource, list_api_version: str | None = None) -> list[Obj]:
    """Give every item the ``kind``/``apiVersion`` its list implies, as client-go's dynamic client does.

    kube-apiserver leaves both out of the items of a built-in LIST (only the ``...List`` carries
    them; custom resources' items and watch events have them), and code that sorts objects by
    ``kind`` would drop them all. Filled in place: the items are the caller's fresh copies.
    """
    api_version = list_api_version or resource.api_version
    for item in items:
        if not item.get("kind"):
            item["kind"] = resource.kind
        if not item.get("apiVersion"):
            item["apiVersion"] = api_version
    return items


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One watch event; BOOKMARK carries only ``metadata.resourceVersion`` in ``object``."""

    type: Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
    object: Obj = field(default_factory=dict)


class ClusterClient(Protocol):
    """What vgpu-guard needs from an API server; see the module docstring for the adapters."""

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj: ...

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ObjectList: ...

    def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Stream changes after ``resource_version``; raises ``Expired`` when it is too old."""
        ...

    async def create(
        self, resource: Resource, obj: Mapping[str, Any], *, namespace: str | None = None
    ) -> Obj: ...

    async def replace(self, resource: Resource, obj: Mapping[str, Any]) -> Obj:
        """PUT; a ``metadata.resourceVersion`` in ``obj`` is a precondition (409 ``Conflict`` when stale)."""
        ...

    async def replace_status(self, resource: Resource, obj: Mapping[str, Any]) -> Obj:
        """PUT to the ``status`` subresource, same precondition rule as ``replace``."""
        ...

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any] | builtins.list[Any],
        *,
        namespace: str | None = None,
        patch_type: Literal["merge", "json"] = "merge",
        subresource: str | None = None,
    ) -> Obj: ...

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
        """Delete; ``uid`` and ``resource_version`` are preconditions (Conflict when the object
        changed). NotFound is raised, not swallowed."""
        ...

    async def bind(
        self,
        namespace: str,
        name: str,
        *,
        node: str,
        annotations: Mapping[str, str],
        uid: str | None = None,
    ) -> None:
        """POST pods/binding: node and annotations land atomically; 409 when already bound."""
        ...

    async def close(self) -> None: ...


async def list_all(
    client: ClusterClient,
    resource: Resource,
    *,
    optional: bool = False,
    page_size: int = 500,
    namespace: str | None = None,
) -> builtins.list[Obj]:
    """Every object of ``resource`` (of ``namespace`` when given), ``page_size`` a page; with
    ``optional``, a resource the server does not serve (a CRD not installed) is an empty list
    instead of ``NotFound``/``Unsupported``."""
    from vgpu_guard.kube.errors import NotFound, Unsupported

    items: builtins.list[Obj] = []
    token: str | None = None
    while True:
        try:
            page = await client.list(resource, namespace=namespace, limit=page_size, continue_token=token)
        except (NotFound, Unsupported):
            if optional:
                return []
            raise
        items.extend(page.items)
        if not page.continue_token:
            return items
        token = page.continue_token
