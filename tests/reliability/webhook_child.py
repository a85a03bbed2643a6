"""The webhook as its own process for the load test: real TLS, certificates followed from files.

Run as ``python -m tests.reliability.webhook_child DIR``: serves on 127.0.0.1 with the certificate
in DIR/tls.crt + tls.key (reloaded whenever they change, as in cert-manager mode), writes its port
to DIR/port, and runs until terminated. A separate process so the test can read its RSS.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from datetime import timedelta
from pathlib import Path

from prometheus_client import CollectorRegistry

from tests.builders import A100_40, default_config, gpu_node, view_of
from vgpu_guard.certs import CertificateFiles, ReloadableSSLContext, run_file_reloader
from vgpu_guard.webhook.server import running_webhook
from vgpu_guard.webhook.views import StaticViewSource


async def main(directory: Path) -> None:
    config = default_config()
    views = StaticViewSource(
        view_of(
            [gpu_node(f"a30-{i}") for i in range(20)]
            + [
                gpu_node(f"a100-{i}", count=8, memory=40960, card_type=A100_40, mode="mig", split=7)
                for i in range(5)
            ]
        )
    )
    context = ReloadableSSLContext(source="files")
    files = CertificateFiles(directory / "tls.crt", directory / "tls.key")
    context.load_files(files.cert_file, files.key_file)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    reloader = asyncio.create_task(run_file_reloader(context, files, interval=timedelta(seconds=0.1)))
    async with running_webhook(
        config=config,
        views=views,
        ssl_context=context.ssl_context,
        registry=CollectorRegistry(),
        host="127.0.0.1",
        port=0,
        ops_port=0,
    ) as webhook:
        (directory / "port.tmp").write_text(str(webhook.port))
        (directory / "port.tmp").rename(directory / "port")
        await stop.wait()
    reloader.cancel()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
