"""``vgpu-guard certs generate``: files, SANs, validity, refusals with exit codes."""

from __future__ import annotations

import argparse
import base64
import ipaddress
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509

from vgpu_guard.certs import KeyPair
from vgpu_guard.cli import certs as certs_cli


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="vgpu-guard")
    certs_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    assert args.func is certs_cli.run
    code: int = certs_cli.run(args)
    return code


def test_generate_writes_a_verifiable_pair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "certs"
    argv = ["certs", "generate", "--service", "wh", "--namespace", "ns", "--out", str(out), "--days", "30"]
    code = _run([*argv, "--ip", "127.0.0.1", "--dns", "localhost"])
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert (out / "tls.key").stat().st_mode & 0o777 == 0o600
    assert (out / "ca.key").stat().st_mode & 0o777 == 0o600
    serving = KeyPair((out / "tls.crt").read_bytes(), (out / "tls.key").read_bytes()).check()
    ca = KeyPair((out / "ca.crt").read_bytes(), (out / "ca.key").read_bytes()).check()
    serving.certificate.verify_directly_issued_by(ca.certificate)
    san = serving.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "wh.ns.svc" in san.get_values_for_type(x509.DNSName)
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    left = serving.not_after - datetime.now(UTC)
    assert timedelta(days=29) < left <= timedelta(days=30)
    printed = capsys.readouterr().out
    assert f"caBundle: {base64.b64encode(ca.cert_pem).decode()}" in printed


def test_generate_refuses_to_overwrite_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["certs", "generate", "--service", "wh", "--namespace", "ns", "--out", str(tmp_path)]
    assert _run(argv) == 0
    before = (tmp_path / "tls.crt").read_bytes()
    capsys.readouterr()
    assert _run(argv) == 1
    err = capsys.readouterr().err
    assert "already exist" in err and "--force" in err
    assert (tmp_path / "tls.crt").read_bytes() == before
    assert _run([*argv, "--force"]) == 0
    assert (tmp_path / "tls.crt").read_bytes() != before


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--ip", "not-an-ip"], "is not an IP address"),
        (["--days", "0"], "--days must be positive"),
        (["--days", "400", "--ca-days", "300"], "a leaf cannot outlive its CA"),
    ],
)
def test_generate_rejects_bad_input_with_a_way_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    argv = ["certs", "generate", "--service", "wh", "--namespace", "ns", "--out", str(tmp_path), *extra]
    assert _run(argv) == 1
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
