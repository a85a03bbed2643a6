"""Fixtures for the API double: a store with a fake clock, the double served over HTTPS, and the
two ``ClusterClient`` adapters (in-process and ``kubernetes.aio`` over HTTPS) to run one test body
against both.

    store            Store with FakeClock (fake_clock), watch window 50
    double           RunningDouble serving ``store`` over HTTPS (url, kubeconfig, tokens)
    client           parametrised: each test runs once per adapter ("memory", "aio")
    sync_api         the official *sync* kubernetes ApiClient for the double (use in a thread)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.apidouble_support.http.server import RunningDouble, serve_double
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.store import Store
from vgpu_guard.kube.aio import AioClusterClient


class FakeClock:
    """Time that moves only when told to (deletion timestamps, conditions)."""

    def __init__(self) -> None:
        self.now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(fake_clock: FakeClock) -> Store:
    return Store(clock=fake_clock, watch_window=50, seed=7)


@pytest.fixture
async def double(store: Store, tmp_path: Path) -> AsyncIterator[RunningDouble]:
    async with serve_double(tmp_path, store=store, bookmark_interval=0.05) as api:
        yield api


@pytest.fixture(params=["memory", "aio"])
async def client(request: pytest.FixtureRequest, store: Store, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield MemoryClusterClient(store, bookmark_interval=0.05)
        return
    async with serve_double(tmp_path, store=store, bookmark_interval=0.05) as api:
        c = await AioClusterClient.from_kubeconfig(str(api.kubeconfig), request_timeout=10)
        try:
            yield c
        finally:
            await c.close()


@pytest.fixture
async def sync_api(double: RunningDouble) -> AsyncIterator[Any]:
    from kubernetes import config

    api = config.new_client_from_config(str(double.kubeconfig))  # type: ignore[no-untyped-call]  # unannotated in kubernetes
    api.set_default_header("Connection", "close")  # no idle TLS connection outlives the test
    yield api
    api.close()
    # let the server see the client's close (TLS EOF) before the double shuts down
    await asyncio.sleep(0.1)


async def in_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a call of the sync client off the event loop (it blocks)."""
    return await asyncio.to_thread(fn, *args, **kwargs)
