"""Issue 22: callers cannot slow admission down. Limits are asserted as behaviour, not timings.

Metric labels come only from the route table; /metrics and the probes run off the admission loop;
body size, Content-Type, header/body read deadlines, keep-alive and the connection cap are
configurable and take effect; one object with too many containers is denied before any rule runs.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from tests.builders import config_with, default_config, pod
from tests.reliability.webhook_fuzz import call
from tests.webhook.conftest import admission_review
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.object_size import count_containers
from vgpu_guard.webhook.app import ROUTES, create_app
from vgpu_guard.webhook.server import RunningWebhook, running_webhook
from vgpu_guard.webhook.views import StaticViewSource

MEM, NUM = "volcano.sh/vgpu-memory", "volcano.sh/vgpu-number"


def _label_sets(registry: CollectorRegistry) -> dict[str, set[tuple[tuple[str, str], ...]]]:
    """Per metric family, the distinct label sets of its samples (a histogram's ``le`` aside)."""
    out: dict[str, set[tuple[tuple[str, str], ...]]] = {}
    for family in registry.collect():
        out.setdefault(family.name, set()).update(
            tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le")) for sample in family.samples
        )
    return out


async def test_random_resource_values_add_at_most_one_label_set_per_path_and_family(
    views: StaticViewSource, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("ERROR", logger="vgpu_guard.webhook")
    registry = CollectorRegistry()
    app = create_app(config=default_config(), views=views, registry=registry)
    app.freeze()
    status, _ = await call(app, "/validate/pods", json.dumps(admission_review(pod({NUM: 1}))).encode())
    assert status == 200
    before = _label_sets(registry)
    for i in range(20_000):
        route = ROUTES[i % len(ROUTES)]
        review = admission_review(pod({NUM: 1}), resource=f"r{uuid.uuid4().hex}", group=f"g{i}.example")
        status, _ = await call(app, route.path, json.dumps(review).encode())
        assert status == 200
    after = _label_sets(registry)
    assert set(after) == set(before)
    for family, label_sets in after.items():  # at most one per path: labels come from the route table
        assert len(label_sets - before[family]) <= len(ROUTES), family
    added = after["vgpu_guard_admission_requests"] - before["vgpu_guard_admission_requests"]
    assert added == {
        (
            ("allowed", "true"),
            ("dry_run", "false"),
            ("operation", "CREATE"),
            ("resource", "other"),
            ("webhook", r.path),
        )
        for r in ROUTES
    }


def test_containers_are_counted_over_every_pod_template() -> None:
    container = {"name": "c"}
    assert count_containers(pod(containers=[container] * 3)) == (3, "spec.containers")
    cronjob = {
        "kind": "CronJob",
        "spec": {
            "jobTemplate": {
                "spec": {"template": {"spec": {"containers": [container], "initContainers": [container] * 2}}}
            }
        },
    }
    assert count_containers(cronjob) == (3, "spec.jobTemplate.spec.template.spec.initContainers")
    vcjob = {
        "kind": "Job",
        "spec": {
            "tasks": [
                {"template": {"spec": {"containers": [container]}}},
                {"template": {"spec": {"containers": [container] * 4, "ephemeralContainers": [container]}}},
            ]
        },
    }
    assert count_containers(vcjob) == (6, "spec.tasks[1].template.spec.containers")
    assert count_containers(None) == (0, "spec")


# --- over real HTTPS, with small configured limits -----------------------------------------------------

LIMITS = {
    "maxRequestBytes": 65536,
    "maxContainers": 3,
    "headerTimeoutSeconds": 0.3,
    "bodyTimeoutSeconds": 0.3,
    "keepAliveTimeoutSeconds": 0.3,
    "maxConnections": 2,
}


@pytest.fixture
def config() -> GuardConfig:
    return config_with(webhook=LIMITS)


class _Blocking(Collector):
    """A collector whose collect() blocks until released: a scrape that takes as long as we like."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def collect(self) -> Iterator[Metric]:
        if self.armed:
            self.entered.set()
            self.release.wait(30)
        return iter(())


@pytest.fixture
def blocking() -> _Blocking:
    return _Blocking()


@pytest.fixture
async def webhook(
    config: GuardConfig, views: StaticViewSource, server_ssl: ssl.SSLContext, blocking: _Blocking
) -> AsyncIterator[RunningWebhook]:
    registry = CollectorRegistry()
    registry.register(blocking)
    async with running_webhook(
        config=config,
        views=views,
        ssl_context=server_ssl,
        registry=registry,
        host="127.0.0.1",
        port=0,
        ops_port=0,
    ) as running:
        yield running
        blocking.release.set()


async def _post(
    http: aiohttp.ClientSession,
    webhook: RunningWebhook,
    body: Any,
    *,
    content_type: str | None = "application/json",
) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {} if content_type is None else {"Content-Type": content_type}
    skip = () if content_type is not None else ("Content-Type",)
    async with http.post(
        webhook.url + "/validate/pods", data=data, headers=headers, skip_auto_headers=skip
    ) as response:
        return response.status, await response.json(content_type=None)


def _counter(webhook: RunningWebhook, name: str) -> float:
    value = webhook.registry.get_sample_value(name)
    return 0.0 if value is None else value


async def test_a_review_is_answered_while_a_scrape_is_blocked(
    http: aiohttp.ClientSession, webhook: RunningWebhook, blocking: _Blocking
) -> None:
    ops = f"http://127.0.0.1:{webhook.ops_port}"
    blocking.armed = True
    async with aiohttp.ClientSession() as scraper:
        scrape = asyncio.ensure_future(scraper.get(ops + "/metrics"))
        assert await asyncio.to_thread(blocking.entered.wait, 10)
        # The scrape is stuck inside collect(); admission and the probes still answer.
        status, body = await _post(http, webhook, admission_review(pod({NUM: 1, MEM: 100})))
        assert status == 200 and body["response"]["allowed"] is True
        async with scraper.get(ops + "/healthz") as health:
            assert health.status == 200
        async with scraper.get(ops + "/readyz") as ready:
            assert ready.status == 200 and await ready.text() == "ready\n"
        assert not scrape.done()
        blocking.release.set()
        async with await scrape as response:
            assert response.status == 200
            assert "vgpu_guard_admission_requests_total" in await response.text()


async def test_configured_body_limit_gets_413_naming_it(
    http: aiohttp.ClientSession, webhook: RunningWebhook
) -> None:
    status, answer = await _post(http, webhook, b"{" + b" " * 70_000 + b"}")
    assert (status, answer) == (413, {"error": "body larger than 65536 bytes (webhook.maxRequestBytes)"})


@pytest.mark.parametrize(
    ("content_type", "message"),
    [
        ("text/plain", "Content-Type header is 'text/plain'; send the AdmissionReview as application/json"),
        (
            "application/x-www-form-urlencoded",
            "Content-Type header is 'application/x-www-form-urlencoded'; "
            "send the AdmissionReview as application/json",
        ),
        (None, "Content-Type header is missing; send the AdmissionReview as application/json"),
    ],
)
async def test_a_review_not_sent_as_json_gets_415_naming_the_header(
    http: aiohttp.ClientSession, webhook: RunningWebhook, content_type: str | None, message: str
) -> None:
    review = admission_review(pod({NUM: 1, MEM: 100}))
    status, answer = await _post(http, webhook, review, content_type=content_type)
    assert (status, answer) == (415, {"error": message})
    status, _ = await _post(http, webhook, review, content_type="application/json; charset=utf-8")
    assert status == 200


async def test_an_object_with_too_many_containers_is_denied_before_any_rule(
    http: aiohttp.ClientSession, webhook: RunningWebhook
) -> None:
    container = {"name": "c", "image": "busybox", "resources": {"limits": {NUM: 1, MEM: "12Gi"}}}
    status, body = await _post(http, webhook, admission_review(pod(containers=[container] * 4)))
    assert status == 200
    assert body["response"]["allowed"] is False
    assert body["response"]["status"] == {
        "status": "Failure",
        "code": 422,
        "reason": "Invalid",
        "message": "[object-too-large] spec.containers: 4 containers in one object exceed this webhook's limit "
        "of 3 (webhook.maxContainers); split the object, or raise webhook.maxContainers",
    }
    assert body["response"]["auditAnnotations"] == {"rules": "object-too-large"}
    # At the limit the rules run.
    status, body = await _post(
        http, webhook, admission_review(pod(containers=[dict(container, name=f"c{i}") for i in range(3)]))
    )
    assert body["response"]["status"]["message"].startswith("[vgpu-multi-container]")


# --- raw connections: cap, header and body deadlines, keep-alive ---------------------------------------


async def _connect(
    webhook: RunningWebhook, client_ssl: ssl.SSLContext
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(
        webhook.host, webhook.port, ssl=client_ssl, server_hostname="127.0.0.1"
    )


def _request(body: bytes, *, length: int | None = None) -> bytes:
    return (
        b"POST /validate/pods HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body) if length is None else length}\r\n\r\n".encode()
        + body
    )


async def _response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    return int(lines[0].split()[1]), await reader.readexactly(int(headers["content-length"]))


async def _closed_by_server(reader: asyncio.StreamReader) -> bool:
    """True when the server ends the connection (EOF or reset) within a generous bound."""
    try:
        async with asyncio.timeout(10):
            return await reader.read(1) == b""
    except (ConnectionError, ssl.SSLError):
        return True


async def _open_connections_drop_to(webhook: RunningWebhook, count: int) -> None:
    """Wait (bounded) until the server has processed the close: the gauge is the assertion."""
    for _ in range(1000):
        if _counter(webhook, "vgpu_guard_admission_connections_open") <= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"open connections stayed above {count}")


REVIEW = json.dumps(admission_review(pod({NUM: 1, MEM: 100}))).encode()


async def test_connections_over_the_cap_are_closed_and_counted(
    webhook: RunningWebhook, client_ssl: ssl.SSLContext
) -> None:
    open_ = []
    for _ in range(2):
        reader, writer = await _connect(webhook, client_ssl)
        writer.write(_request(REVIEW))
        assert (await _response(reader))[0] == 200  # served, so the server counts it
        open_.append((reader, writer))
    reader, writer = await _connect(webhook, client_ssl)
    writer.write(_request(REVIEW))
    assert await _closed_by_server(reader)
    writer.close()
    assert _counter(webhook, "vgpu_guard_admission_connections_refused_total") == 1
    assert _counter(webhook, "vgpu_guard_admission_connections_open") == 2
    # The two admitted connections keep working; once one closes, a new connection is served.
    reader0, writer0 = open_[0]
    writer0.write(_request(REVIEW))
    assert (await _response(reader0))[0] == 200
    open_[1][1].close()
    await _open_connections_drop_to(webhook, 1)
    reader, writer = await _connect(webhook, client_ssl)
    writer.write(_request(REVIEW))
    assert (await _response(reader))[0] == 200
    for _, w in [open_[0], (reader, writer)]:
        w.close()


async def test_a_client_that_never_finishes_its_headers_is_cut(
    webhook: RunningWebhook, client_ssl: ssl.SSLContext
) -> None:
    reader, writer = await _connect(webhook, client_ssl)
    writer.write(b"POST /validate/pods HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    assert await _closed_by_server(reader)
    writer.close()


async def test_a_body_that_stops_arriving_gets_408_naming_the_limit(
    webhook: RunningWebhook, client_ssl: ssl.SSLContext
) -> None:
    reader, writer = await _connect(webhook, client_ssl)
    writer.write(_request(REVIEW[:10], length=len(REVIEW)))
    status, body = await _response(reader)
    assert (status, json.loads(body)) == (
        408,
        {"error": "body not received within 0.3 s (webhook.bodyTimeoutSeconds)"},
    )
    assert await _closed_by_server(reader)
    writer.close()


async def test_an_idle_keep_alive_connection_is_closed(
    webhook: RunningWebhook, client_ssl: ssl.SSLContext
) -> None:
    reader, writer = await _connect(webhook, client_ssl)
    writer.write(_request(REVIEW))
    assert (await _response(reader))[0] == 200
    assert await _closed_by_server(reader)
    writer.close()


async def test_a_connection_that_sends_nothing_is_closed(
    webhook: RunningWebhook, client_ssl: ssl.SSLContext
) -> None:
    reader, writer = await _connect(webhook, client_ssl)
    assert await _closed_by_server(reader)
    writer.close()
    await _open_connections_drop_to(webhook, 0)
