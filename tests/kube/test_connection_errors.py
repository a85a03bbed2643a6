"""A request that gets no answer says why in words: an untrusted certificate is not "a retry may
succeed", and a refused connection is not a Python tuple repr."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.apidouble_support.http._tls import make_serving_tls
from tests.apidouble_support.http.server import serve_double, write_kubeconfig
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import Unavailable
from vgpu_guard.kube.resources import NODES


async def _list_nodes(kubeconfig: Path) -> Unavailable:
    client = await AioClusterClient.from_kubeconfig(str(kubeconfig), request_timeout=5)
    try:
        with pytest.raises(Unavailable) as failed:
            await client.list(NODES)
    finally:
        await client.close()
    return failed.value


async def test_a_server_certificate_the_kubeconfig_does_not_trust(tmp_path: Path) -> None:
    async with serve_double(tmp_path / "double") as double:
        other_ca = make_serving_tls().ca_pem
        kubeconfig = write_kubeconfig(
            tmp_path / "wrong-ca", url=double.url, ca_pem=other_ca, users={"admin": double.admin_token}
        )
        error = await _list_nodes(kubeconfig)
    host, port = double.url.removeprefix("https://").rsplit(":", 1)
    assert error.reason == "TLS"
    assert str(error) == (
        f"list v1/nodes: TLS to {host}:{port} failed: the server's certificate is not trusted "
        "(unable to get local issuer certificate); check the kubeconfig's certificate-authority for "
        "this server (a retry does not help)"
    )


async def test_a_refused_connection_is_said_in_words(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    kubeconfig = write_kubeconfig(
        tmp_path / "nobody",
        url=f"https://127.0.0.1:{port}",
        ca_pem=make_serving_tls().ca_pem,
        users={"admin": "t"},
    )
    error = await _list_nodes(kubeconfig)
    assert str(error) == (
        f"list v1/nodes: cannot connect to 127.0.0.1:{port}: Connection refused; "
        "the connection to the API server failed (a retry may succeed)"
    )
