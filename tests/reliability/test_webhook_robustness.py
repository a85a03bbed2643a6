"""Webhook robustness: 100,000 fuzzed AdmissionReviews, never a 5xx, never a crash.

The bulk runs in-process (tests/reliability/webhook_fuzz.py) in two worker processes, one per
core, each with its own application: 2 x 1,000 hypothesis cases x 50 mutants = 100,000 requests
in the default run (37-52 s on 2 cores), 2 x 5,000 x 50 = 500,000 with ``--long``. Then a
sample of the same kind of cases goes over real HTTPS to a running webhook, which must keep
serving afterwards.
"""

from __future__ import annotations

import asyncio
import io
import multiprocessing
import os
import ssl
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import aiohttp
from hypothesis import HealthCheck, given, settings

from tests.builders import pod
from tests.reliability import webhook_fuzz
from tests.webhook.conftest import admission_review
from vgpu_guard.webhook.server import RunningWebhook

LONG = bool(os.environ.get("VGPU_GUARD_LONG"))
WORKERS = 2
EXAMPLES = 5_000 if LONG else 1_000  # per worker
VARIANTS = 50


def _worker(seed: int) -> tuple[int, dict[int, int], dict[str, int]]:
    import logging

    logging.getLogger("vgpu_guard").setLevel(logging.ERROR)  # 400s log a warning each
    stats = webhook_fuzz.fuzz(EXAMPLES, VARIANTS, seed)
    return stats.requests, dict(stats.statuses), dict(stats.categories)


def test_fuzzed_reviews_in_process(reliability_report: Callable[[str], None]) -> None:
    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=WORKERS, mp_context=context) as pool:
        results = list(pool.map(_worker, range(1, WORKERS + 1)))
    requests = sum(r[0] for r in results)
    statuses: Counter[int] = Counter()
    categories: Counter[str] = Counter()
    for _, s, c in results:
        statuses.update(s)
        categories.update(c)
    assert requests >= WORKERS * EXAMPLES * VARIANTS
    assert set(statuses) <= {200, 400, 413}
    reliability_report(
        f"webhook fuzz in-process ({time.perf_counter() - started:.0f} s): {requests} reviews, "
        f"HTTP {dict(sorted(statuses.items()))}, 0 5xx, 0 crashes; by mutation "
        + ", ".join(f"{k}={v}" for k, v in categories.most_common())
    )


async def test_fuzzed_reviews_over_https_and_the_server_keeps_serving(
    webhook: RunningWebhook, client_ssl: ssl.SSLContext, reliability_report: Callable[[str], None]
) -> None:
    bodies: list[tuple[str, bytes]] = []

    @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(webhook_fuzz.cases())
    def collect(case: tuple[str, bytes, int]) -> None:
        bodies.extend((path, body) for _, path, body in webhook_fuzz.mutants(*case, 50))

    collect()
    statuses: Counter[int] = Counter()
    connector = aiohttp.TCPConnector(ssl=client_ssl, limit=16)
    async with aiohttp.ClientSession(connector=connector) as http:
        queue = list(bodies)

        async def worker() -> None:
            while queue:
                path, body = queue.pop()
                async with http.post(
                    webhook.url + path, data=io.BytesIO(body), headers={"Content-Type": "application/json"}
                ) as response:
                    answer = await response.read()
                statuses[response.status] += 1
                webhook_fuzz.check_answer(response.status, answer, body)

        await asyncio.gather(*(worker() for _ in range(16)))
        good = admission_review(pod({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": "12Gi"}))
        async with http.post(webhook.url + "/validate/pods", json=good) as response:
            assert response.status == 200
            assert (await response.json())["response"]["allowed"] is False
    reliability_report(
        f"webhook fuzz over HTTPS: {len(bodies)} reviews, HTTP {dict(sorted(statuses.items()))}"
    )
