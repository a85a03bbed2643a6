"""``vgpu-guard serve all`` as a real process against the API double over HTTPS: it gets a
certificate into the shared Secret, becomes ready, answers admission over TLS with that CA,
elects a leader, and stops gracefully on SIGTERM."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import socket
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.apidouble_support.http.server import RunningDouble, serve_double
from tests.builders import gpu_node, pod
from tests.webhook.conftest import admission_review
from vgpu_guard.cli.app import run as run_cli
from vgpu_guard.kube.resources import CRDS, LEASES, NAMESPACES, NODES, PODS, SECRETS, Resource

BIN = Path(sys.executable).with_name("vgpu-guard")
CRDS_DIR = Path(__file__).resolve().parents[2] / "vgpu_guard" / "data" / "crds"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _wait_ready(
    session: aiohttp.ClientSession, url: str, process: asyncio.subprocess.Process, log: Path
) -> None:
    for _ in range(300):
        if process.returncode is not None:
            raise AssertionError(f"serve exited early with {process.returncode}:\n{log.read_text()}")
        try:
            async with session.get(url) as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"serve never became ready:\n{log.read_text()}")


def _cluster(api: RunningDouble) -> None:
    """What serve needs stored before it starts: its namespace, a GPU node, every CRD."""
    api.store.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vgpu-guard"}}
    )
    api.store.create(NODES, gpu_node("a30"))
    for crd in sorted(CRDS_DIR.rglob("*.yaml")):
        api.store.create(CRDS, yaml.safe_load(crd.read_text()))


@contextlib.asynccontextmanager
async def _serving(
    api: RunningDouble, tmp_path: Path, component: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, int, int, Path]]:
    """``vgpu-guard serve COMPONENT`` against ``api`` as a process, ready: (process, port, ops
    port, log). Stopped with SIGTERM on the way out, which must end it cleanly."""
    port, ops = _free_port(), _free_port()
    env = {
        **os.environ,
        "POD_NAMESPACE": "vgpu-guard",
        "POD_NAME": "serve-test-0",
        "VGPU_GUARD_CERT_MODE": "builtin",
        "VGPU_GUARD_TLS_SECRET": "vgpu-guard-tls",
        "VGPU_GUARD_WEBHOOK_SERVICE": "vgpu-guard-webhook",
        "VGPU_GUARD_CERT_EXTRA_DNS": "localhost",
    }
    log = tmp_path / "serve.log"
    # The log goes to a file: a pipe nobody reads fills up and blocks the process.
    with log.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            str(BIN),
            "serve",
            component,
            "--kubeconfig",
            str(api.kubeconfig),
            "--port",
            str(port),
            "--metrics-port",
            str(ops),
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=sink,
        )
    try:
        async with aiohttp.ClientSession() as plain:
            await _wait_ready(plain, f"http://127.0.0.1:{ops}/readyz", process, log)
        yield process, port, ops, log
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), timeout=30)
    stderr = log.read_text()
    assert code == 0, stderr
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert any(line["msg"] == "stopped" for line in lines)
    assert not [line for line in lines if line["level"] == "error"], stderr


async def test_serve_all_against_the_double(tmp_path: Path) -> None:
    async with serve_double(tmp_path) as api:
        _cluster(api)
        async with _serving(api, tmp_path, "all") as (_, port, ops, log):
            async with aiohttp.ClientSession() as plain:
                async with plain.get(f"http://127.0.0.1:{ops}/metrics") as response:
                    metrics = await response.text()
                assert 'vgpu_guard_certificate_expiry_timestamp_seconds{source="vgpu-guard-tls"}' in metrics
            secret: dict[str, Any] = api.store.get(SECRETS, "vgpu-guard-tls", namespace="vgpu-guard")
            ca = base64.b64decode(secret["data"]["ca.crt"]).decode()
            context = ssl.create_default_context(cadata=ca)
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as https:
                review = admission_review(pod({"volcano.sh/vgpu-memory": "12Gi"}))
                async with https.post(f"https://localhost:{port}/validate/pods", json=review) as response:
                    body = await response.json()
            assert body["response"]["allowed"] is False
            assert body["response"]["status"]["message"].startswith("[vgpu-memory-unit]")
            lease = api.store.get(LEASES, "vgpu-guard-controller", namespace="vgpu-guard")
            assert lease["spec"]["holderIdentity"] == "serve-test-0"
            # The "serving" line says where to find the process: both ports.
            lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
            serving = [line for line in lines if line.get("msg") == "serving"]
            assert serving and serving[0]["port"] == port and serving[0]["ops_port"] == ops, serving


def _watches(api: RunningDouble, resource: Resource) -> int:
    """Open watches of ``resource`` on the double: its watch registry (the table's watchers)."""
    info = api.store.type_of(resource)
    return len(api.store._table.watchers[info.key])  # the registry itself: counting is the point


async def test_serve_all_opens_one_pod_watch_for_the_webhook_and_the_controller(tmp_path: Path) -> None:
    """Issue 45: the webhook's cache of unbound pods reads the controller's pod informer in one
    process; two components alone open one watch each."""
    async with serve_double(tmp_path) as api:
        _cluster(api)
        async with _serving(api, tmp_path, "all"):
            for _ in range(100):  # the controller's informer watches once its LIST is done
                if _watches(api, PODS) and _watches(api, NODES):
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # time for a second watch to open, if one would
            assert _watches(api, PODS) == 1
            assert _watches(api, NODES) == 1  # the cluster cache was shared already


def test_bad_process_settings_fail_at_start_naming_the_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from vgpu_guard.cli.app import run

    monkeypatch.setenv("VGPU_GUARD_SERVING_VALIDITY", "one year")
    assert run(["serve", "webhook"]) == 2
    assert (
        "VGPU_GUARD_SERVING_VALIDITY: Value error, 'one year' is not a duration like 8760h, 90m or 1h30m"
        in (capsys.readouterr().err)
    )


# --- no kubeconfig, or a broken one: one line, exit 2 -------------------------------------------------


def _serve_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, home: Path, *argv: str
) -> str:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(home))
    assert run_cli(["serve", "webhook", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    return captured.err


def test_serve_without_a_kubeconfig_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    err = _serve_error(capsys, monkeypatch, tmp_path)
    assert err == (
        f"error: no kubeconfig: {tmp_path}/.kube/config (the default path) does not exist and this is not a pod "
        "in a cluster (no KUBERNETES_SERVICE_HOST); pass --kubeconfig FILE or set KUBECONFIG\n"
    )
    assert "current-context" not in err and "Config not found" not in err


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            "apiVersion: v1\nkind: Config\nclusters: []\n",
            "key current-context is missing or empty; run `kubectl config use-context NAME --kubeconfig {path}`",
        ),
        (
            "current-context: prod\ncontexts: [{name: dev, context: {}}]\n",
            "current-context 'prod' names no entry of contexts; run `kubectl config get-contexts --kubeconfig "
            "{path}` and use-context one of them",
        ),
        ("a: [\n", "not valid YAML at line 2; fix it or pass another --kubeconfig FILE"),
    ],
)
def test_serve_with_a_broken_kubeconfig_names_file_and_key(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    content: str,
    expected: str,
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(content)
    err = _serve_error(capsys, monkeypatch, tmp_path, "--kubeconfig", str(path))
    assert err == f"error: kubeconfig {path} (--kubeconfig): {expected.format(path=path)}\n"
