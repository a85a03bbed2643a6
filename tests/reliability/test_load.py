"""The webhook at saturation on loopback: no errors, bounded memory, and certificate rotation under
load without a single failed handshake.

The webhook runs in its own process (its RSS is read from /proc) with certificates followed from
files; the test drives it with 16 concurrent clients, a quarter of them opening a fresh TLS
connection per request (so handshakes happen all the time), and rotates the serving certificate
three times mid-run, the last time to a new CA (clients trust both CAs, as they do during a CA
rollover). Default: 60 s, issue 9's duration; ``--long``: 300 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from cryptography import x509

from tests.builders import pod
from tests.webhook.conftest import admission_review
from vgpu_guard.certs import KeyPair, ServingSpec, generate_ca, issue_serving_certificate

ROOT = Path(__file__).resolve().parents[2]
LONG = bool(os.environ.get("VGPU_GUARD_LONG"))
SECONDS = 300.0 if LONG else 60.0
WARMUP = 2.0
CONCURRENCY = 16
SPEC = ServingSpec(service="vgpu-guard-webhook", namespace="vgpu-guard", ip_addresses=("127.0.0.1",))


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _install(directory: Path, pair: KeyPair) -> None:
    """Write the pair the way a Secret volume changes: new files, then an atomic rename."""
    for name, data in (("tls.key", pair.key_pem), ("tls.crt", pair.cert_pem)):
        tmp = directory / f".{name}.tmp"
        tmp.write_bytes(data)
        tmp.rename(directory / name)


@pytest.mark.timeout(SECONDS + 240)
async def test_saturation_and_rotation_under_load(
    tmp_path: Path, reliability_report: Callable[[str], None]
) -> None:
    now = datetime.now(UTC)
    ca1, ca2 = (generate_ca(now=now, validity=timedelta(days=30)) for _ in range(2))
    leaves = [
        issue_serving_certificate(ca, SPEC, now=now, validity=timedelta(days=7))
        for ca in (ca1, ca1, ca1, ca2)
    ]
    _install(tmp_path, leaves[0])
    log = tmp_path / "webhook.log"
    with log.open("wb") as sink:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.reliability.webhook_child",
            str(tmp_path),
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=sink,
            stderr=sink,
        )
    try:
        for _ in range(200):
            if (tmp_path / "port").exists() or child.returncode is not None:
                break
            await asyncio.sleep(0.05)
        assert (tmp_path / "port").exists(), log.read_text()
        url = f"https://127.0.0.1:{(tmp_path / 'port').read_text()}/mutate/pods"
        trust = ssl.create_default_context(cadata=(ca1.cert_pem + ca2.cert_pem).decode())
        body = json.dumps(
            admission_review(
                pod({"volcano.sh/vgpu-memory": 3000}, annotations={"volcano.sh/vgpu-mode": "mig"})
            )
        ).encode()
        outcomes: Counter[str] = Counter()
        serials: set[int] = set()
        deadline = time.monotonic() + SECONDS

        async def client(index: int) -> None:
            fresh = index % 4 == 0  # a new TLS handshake for every request
            connector = aiohttp.TCPConnector(ssl=trust, force_close=fresh, limit=1)
            async with aiohttp.ClientSession(connector=connector) as session:
                while time.monotonic() < deadline:
                    try:
                        async with session.post(
                            url, data=body, headers={"Content-Type": "application/json"}
                        ) as r:
                            answer: dict[str, Any] = await r.json()
                            ok = (
                                r.status == 200
                                and answer["response"]["allowed"]
                                and "patch" in answer["response"]
                            )
                            outcomes["ok" if ok else f"bad {r.status}"] += 1
                    except (aiohttp.ClientError, ssl.SSLError, OSError) as e:
                        outcomes[f"error {type(e).__name__}"] += 1

        async def probe() -> None:
            """Which certificate is served now: a bare TLS handshake every 100 ms."""
            port = int((tmp_path / "port").read_text())
            while time.monotonic() < deadline:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=trust)
                except (ssl.SSLError, OSError) as e:
                    outcomes[f"probe error {type(e).__name__}"] += 1
                else:
                    peer = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
                    serials.add(x509.load_der_x509_certificate(peer).serial_number)
                    writer.close()
                    await writer.wait_closed()
                await asyncio.sleep(0.1)

        async def rotate() -> None:
            for leaf in leaves[1:]:
                await asyncio.sleep(SECONDS / 4)
                _install(tmp_path, leaf)

        async def measure() -> tuple[int, int]:
            await asyncio.sleep(WARMUP)
            start = _rss_kib(child.pid)
            await asyncio.sleep(max(0.0, deadline - time.monotonic() - 0.2))
            return start, _rss_kib(child.pid)

        results = await asyncio.gather(*(client(i) for i in range(CONCURRENCY)), probe(), rotate(), measure())
        rss_start, rss_end = cast(tuple[int, int], results[-1])  # measure()'s: gather keeps the order
    finally:
        child.terminate()
        await asyncio.wait_for(child.wait(), 15)
    total = sum(outcomes.values())
    growth = (rss_end - rss_start) / rss_start
    reliability_report(
        f"load ({SECONDS:.0f} s, {CONCURRENCY} clients, 1 in 4 handshaking per request): {total} requests "
        f"({total / SECONDS:.0f}/s), outcomes {dict(outcomes)}; 3 certificate rotations (one to a new CA), "
        f"{len(serials)} serving certificates seen; RSS {rss_start} -> {rss_end} KiB ({growth:+.1%})"
    )
    assert outcomes == Counter({"ok": total}), outcomes
    assert serials == {leaf.certificate.serial_number for leaf in leaves}, (
        "every rotated certificate was served"
    )
    assert growth < 0.10
