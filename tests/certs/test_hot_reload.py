"""Hot reload over real TLS: an aiohttp HTTPS server on loopback, rotated without a restart."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509
from prometheus_client import REGISTRY

from vgpu_guard.certs import (
    CertificateBundle,
    CertificateFiles,
    FileWatcher,
    KeyPair,
    ReloadableSSLContext,
    ReloadFailed,
    RenewalPolicy,
    ServingSpec,
    issue_serving_certificate,
    plan_rotation,
    run_file_reloader,
    write_bundle_files,
)

# Real TLS validates against the real clock, so these tests use "now" rather than the fake T0.
NOW = datetime.now(UTC)


@dataclass
class Server:
    context: ReloadableSSLContext
    runner: web.AppRunner
    site: web.TCPSite
    port: int
    requests: int = 0


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    ctx = ReloadableSSLContext(source="test-hot-reload")
    app = web.Application()
    holder: list[Server] = []

    async def hello(request: web.Request) -> web.Response:
        holder[0].requests += 1
        return web.Response(text="ok")

    app.router.add_get("/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx.ssl_context)
    await site.start()
    port = runner.addresses[0][1]
    holder.append(Server(ctx, runner, site, port))
    yield holder[0]
    await runner.cleanup()


def _client_context(bundle: CertificateBundle) -> ssl.SSLContext:
    # A client that trusts exactly the caBundle, verifies the hostname/IP, like kube-apiserver.
    return ssl.create_default_context(cadata=bundle.ca_bundle_pem().decode())


class Connection:
    """One TLS connection speaking HTTP/1.1 keep-alive by hand, so the test knows exactly which
    TCP connection carried which request and which certificate it was shown."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int, trust: CertificateBundle) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=_client_context(trust))
        return cls(reader, writer)

    @property
    def serial(self) -> int:
        der = self.writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).serial_number

    async def get(self) -> str:
        self.writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n")
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        status, *headers = head.decode().split("\r\n")
        assert status.startswith("HTTP/1.1 200"), status
        length = next(int(h.split(":")[1]) for h in headers if h.lower().startswith("content-length:"))
        return (await self.reader.readexactly(length)).decode()

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


async def _serial_of_new_connection(port: int, trust: CertificateBundle) -> int:
    conn = await Connection.open(port, trust)
    try:
        assert await conn.get() == "ok"
        return conn.serial
    finally:
        await conn.close()


@pytest.fixture
def spec() -> ServingSpec:
    return ServingSpec(service="vgpu-guard-webhook", namespace="vgpu-system", ip_addresses=("127.0.0.1",))


@pytest.fixture
def bundle(spec: ServingSpec) -> CertificateBundle:
    return plan_rotation(None, spec, now=NOW).bundle  # type: ignore[union-attr]


def _reissue(bundle: CertificateBundle, spec: ServingSpec) -> KeyPair:
    return issue_serving_certificate(bundle.ca, spec, now=NOW, validity=timedelta(days=30))


async def test_new_connections_see_the_new_certificate_while_open_ones_finish(
    server: Server, bundle: CertificateBundle, spec: ServingSpec
) -> None:
    assert not server.context.loaded
    server.context.load_pair(bundle.serving)
    front = server.context.ssl_context
    async with asyncio.timeout(10):
        keepalive = await Connection.open(server.port, bundle)
        assert await keepalive.get() == "ok"
        assert keepalive.serial == bundle.serving.serial

        rotated = _reissue(bundle, spec)
        server.context.load_pair(rotated)

        assert await _serial_of_new_connection(server.port, bundle) == rotated.serial != bundle.serving.serial
        # The connection opened before the rotation is still up and still completes a request.
        assert await keepalive.get() == "ok"
        assert keepalive.serial == bundle.serving.serial
        await keepalive.close()

    # No restart: the same listening site, port and front context served every request.
    assert server.runner.addresses[0][1] == server.port
    assert list(server.runner.sites) == [server.site]
    assert server.context.ssl_context is front
    assert server.requests == 3
    assert server.context.serial == rotated.serial
    sample = REGISTRY.get_sample_value(
        "vgpu_guard_certificate_expiry_timestamp_seconds", {"source": "test-hot-reload"}
    )
    assert sample == rotated.not_after.timestamp()


async def test_rotating_to_a_new_ca_works_for_clients_trusting_the_rollover_bundle(
    server: Server, bundle: CertificateBundle, spec: ServingSpec
) -> None:
    # A short-lived CA made two days ago whose rollover window is open at the real "now".
    eager = RenewalPolicy(
        ca_validity=timedelta(days=400),
        ca_renew_before=timedelta(days=399),
        serving_validity=timedelta(days=30),
        serving_renew_before=timedelta(days=10),
    )
    bundle = plan_rotation(None, spec, now=NOW - timedelta(days=2), policy=eager).bundle  # type: ignore[union-attr]
    server.context.load_pair(bundle.serving)
    staged = plan_rotation(bundle, spec, now=NOW, policy=eager)
    assert staged is not None and staged.reasons == ("ca-rollover-staged",)
    digest = staged.bundle.ca_bundle_digest()
    rotation = plan_rotation(staged.bundle, spec, now=NOW, policy=eager, acknowledged_digest=digest)
    assert rotation is not None
    promoted = rotation.bundle
    assert promoted.ca != bundle.ca
    async with asyncio.timeout(10):
        # A client trusting the rollover caBundle (new CA + previous) accepts both generations.
        assert await _serial_of_new_connection(server.port, promoted) == bundle.serving.serial
        server.context.load_pair(promoted.serving)
        assert await _serial_of_new_connection(server.port, promoted) == promoted.serving.serial


async def test_a_client_without_the_ca_is_refused(
    server: Server, bundle: CertificateBundle, spec: ServingSpec
) -> None:
    server.context.load_pair(bundle.serving)
    stranger = plan_rotation(None, spec, now=NOW).bundle  # type: ignore[union-attr]
    async with (
        asyncio.timeout(10),
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=_client_context(stranger))) as session,
    ):
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await session.get(f"https://127.0.0.1:{server.port}/")
    assert server.requests == 0


async def test_files_mode_follows_the_files_and_survives_a_half_written_pair(
    server: Server, bundle: CertificateBundle, spec: ServingSpec, tmp_path: Path
) -> None:
    files = write_bundle_files(bundle, tmp_path)
    assert (files.key_file.stat().st_mode & 0o777) == 0o600
    watcher = FileWatcher(server.context, CertificateFiles(files.cert_file, files.key_file))
    assert watcher.poll() and not watcher.poll()
    async with asyncio.timeout(10):
        assert await _serial_of_new_connection(server.port, bundle) == bundle.serving.serial

        rotated = _reissue(bundle, spec)
        write_bundle_files(CertificateBundle(ca=bundle.ca, serving=rotated), tmp_path)
        assert watcher.poll()
        assert await _serial_of_new_connection(server.port, bundle) == rotated.serial

        # cert-manager mid-update: a new certificate next to the old key. Keep serving the last good one.
        third = _reissue(bundle, spec)
        files.cert_file.write_bytes(third.cert_pem)
        with pytest.raises(ReloadFailed, match="does not belong"):
            watcher.poll()
        assert await _serial_of_new_connection(server.port, bundle) == rotated.serial
        files.key_file.write_bytes(third.key_pem)
        assert watcher.poll()
        assert await _serial_of_new_connection(server.port, bundle) == third.serial


async def test_run_file_reloader_picks_up_changes_between_polls(
    bundle: CertificateBundle, spec: ServingSpec, tmp_path: Path
) -> None:
    ctx = ReloadableSSLContext(source="files")
    files = write_bundle_files(bundle, tmp_path)
    rotated = _reissue(bundle, spec)
    stop = asyncio.Event()
    seen: list[int | None] = []

    async def sleep(seconds: float) -> None:
        seen.append(ctx.serial)
        if len(seen) == 1:
            write_bundle_files(CertificateBundle(ca=bundle.ca, serving=rotated), tmp_path)
        elif len(seen) == 2:
            files.cert_file.unlink()  # a broken mount is logged, not fatal
        else:
            stop.set()

    async with asyncio.timeout(5):
        await run_file_reloader(ctx, files, interval=timedelta(seconds=10), sleep=sleep, stop=stop)
    assert seen == [bundle.serving.serial, rotated.serial, rotated.serial]
