"""Client-side rate limiting: client-go's token bucket, shared by every request a process sends.

Why: kube-scheduler and every client-go controller pace their requests with ``--kube-api-qps`` and
``--kube-api-burst`` (a token bucket; a request waits for a token). The Python client has none, so
without this a controller can flood the API server in a burst, and a comparison "at equal QPS"
against kube-scheduler is not honest. ``RateLimitedClient`` wraps any ``ClusterClient``: each
request takes one token before it is sent; a watch takes one to open (its events are free, as in
client-go). Events get their own bucket (``events=``), as kube-scheduler's event recorder has its
own client, so a flood of FailedScheduling Events cannot starve the bindings.

``qps <= 0`` means unlimited (no bucket at all): the benchmarks' "unthrottled" row.
"""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Literal

from vgpu_guard.kube.client import ClusterClient, ObjectList, WatchEvent
from vgpu_guard.kube.resources import EVENTS, Resource

__all__ = ["RateLimitedClient", "TokenBucket", "bucket"]


class TokenBucket:
    """``qps`` tokens a second, at most ``burst`` saved up; ``acquire()`` waits for one.

    Waiters are served in arrival order (an ``asyncio.Lock`` is FIFO), so one busy caller cannot
    starve the others, and the bucket never hands out more than ``burst + qps * t`` tokens over
    any interval ``t``: the guarantee client-go's ``flowcontrol.NewTokenBucketRateLimiter`` gives.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if qps <= 0:
            raise ValueError(f"qps must be > 0 (got {qps}); use no bucket for unlimited")
        if burst < 1:
            raise ValueError(f"burst must be >= 1 (got {burst})")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._stamp = clock()
        self._lock = asyncio.Lock()
        self.acquired = 0  # tokens handed out: requests sent, for metrics and tests
        self.waited_seconds = 0.0  # time callers spent waiting for a token

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now

    async def acquire(self) -> None:
        async with self._lock:
            self._refill()
            if self._tokens < 1:
                wait = (1 - self._tokens) / self.qps
                self.waited_seconds += wait
                await self._sleep(wait)
                self._refill()
            self._tokens -= 1
            self.acquired += 1


def bucket(qps: float, burst: int) -> TokenBucket | None:
    """A bucket for ``qps``/``burst``, or None for unlimited (``qps <= 0``)."""
    return TokenBucket(qps, max(1, burst)) if qps > 0 else None


class RateLimitedClient:
    """A ``ClusterClient`` whose every request first takes a token (Events from their own bucket)."""

    def __init__(
        self, inner: ClusterClient, requests: TokenBucket | None, *, events: TokenBucket | None = None
    ) -> None:
        self.inner = inner
        self.requests = requests
        self.events = events if events is not None else requests

    async def _token(self, resource: Resource | None = None) -> None:
        limiter = self.events if resource is EVENTS else self.requests
        if limiter is not None:
            await limiter.acquire()

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        await self._token(resource)
        return await self.inner.get(resource, name, namespace=namespace)

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
        await self._token(resource)
        return await self.inner.list(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            continue_token=continue_token,
        )

    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int | None = None,
    ) -> AsyncIterator[WatchEvent]:
        await self._token(resource)
        async for event in self.inner.watch(
            resource,
            resource_version=resource_version,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            timeout_seconds=timeout_seconds,
        ):
            yield event

    async def create(
        self, resource: Resource, obj: Mapping[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        await self._token(resource)
        return await self.inner.create(resource, obj, namespace=namespace)

    async def replace(self, resource: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        await self._token(resource)
        return await self.inner.replace(resource, obj)

    async def replace_status(self, resource: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        await self._token(resource)
        return await self.inner.replace_status(resource, obj)

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any] | builtins.list[Any],
        *,
        namespace: str | None = None,
        patch_type: Literal["merge", "json"] = "merge",
        subresource: str | None = None,
    ) -> dict[str, Any]:
        await self._token(resource)
        return await self.inner.patch(
            resource, name, patch, namespace=namespace, patch_type=patch_type, subresource=subresource
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
    ) -> None:
        await self._token(resource)
        await self.inner.delete(
            resource,
            name,
            namespace=namespace,
            grace_period_seconds=grace_period_seconds,
            uid=uid,
            resource_version=resource_version,
        )

    async def bind(
        self,
        namespace: str,
        name: str,
        *,
        node: str,
        annotations: Mapping[str, str],
        uid: str | None = None,
    ) -> None:
        await self._token()
        await self.inner.bind(namespace, name, node=node, annotations=annotations, uid=uid)

    async def close(self) -> None:
        await self.inner.close()
