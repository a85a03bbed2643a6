"""The client-side token bucket: kube-scheduler's --kube-api-qps/--kube-api-burst, in asyncio."""

from __future__ import annotations

from typing import Any

from vgpu_guard.kube.ratelimit import RateLimitedClient, TokenBucket, bucket
from vgpu_guard.kube.resources import EVENTS, PODS


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


async def test_the_burst_goes_at_once_then_one_token_per_interval() -> None:
    time = FakeTime()
    limiter = TokenBucket(10, 5, clock=time.clock, sleep=time.sleep)
    for _ in range(5):
        await limiter.acquire()
    assert time.now == 0.0
    await limiter.acquire()
    assert abs(time.now - 0.1) < 1e-9
    for _ in range(10):
        await limiter.acquire()
    assert abs(time.now - 1.1) < 1e-9
    assert limiter.acquired == 16


async def test_never_more_than_burst_plus_qps_times_t() -> None:
    time = FakeTime()
    limiter = TokenBucket(50, 100, clock=time.clock, sleep=time.sleep)
    sent = 0
    while time.now < 10.0:
        await limiter.acquire()
        sent += 1
    assert sent <= 100 + 50 * 10 + 1


async def test_an_idle_bucket_refills_only_up_to_burst() -> None:
    time = FakeTime()
    limiter = TokenBucket(10, 3, clock=time.clock, sleep=time.sleep)
    time.now = 1000.0
    for _ in range(3):
        await limiter.acquire()
    assert time.now == 1000.0
    await limiter.acquire()
    assert time.now > 1000.0


def test_qps_zero_means_no_bucket() -> None:
    assert bucket(0, 100) is None
    made = bucket(5, 0)
    assert made is not None and made.burst == 1


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def create(self, resource: Any, obj: Any, *, namespace: str | None = None) -> dict[str, Any]:
        self.calls.append(resource.plural)
        return dict(obj)

    async def bind(self, namespace: str, name: str, **kwargs: Any) -> None:
        self.calls.append("binding")


async def test_events_spend_their_own_bucket() -> None:
    time = FakeTime()
    requests = TokenBucket(1, 1, clock=time.clock, sleep=time.sleep)
    events = TokenBucket(1, 1, clock=time.clock, sleep=time.sleep)
    inner = Recorder()
    client = RateLimitedClient(inner, requests, events=events)  # type: ignore[arg-type]
    await client.create(PODS, {"metadata": {"name": "a"}})
    await client.create(EVENTS, {"metadata": {"name": "e"}})
    assert time.now == 0.0  # one token each, from different buckets
    await client.bind("default", "a", node="n", annotations={})
    assert time.now == 1.0  # the binding waited for the request bucket only
    assert (requests.acquired, events.acquired) == (2, 1)
    assert inner.calls == ["pods", "events", "binding"]
