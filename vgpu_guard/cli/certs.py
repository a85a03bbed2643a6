"""``vgpu-guard certs generate``: a CA and serving certificate for offline or manual installs.

For users who cannot let the webhook manage its own Secret (no Secret write RBAC, GitOps-only
clusters) or who test locally: the output can be loaded into a Secret
(``kubectl create secret generic ... --from-file=DIR``) and ``ca.crt`` base64-encoded into the
webhook configurations' caBundle.
"""

from __future__ import annotations

import argparse
import base64
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from vgpu_guard.certs import (
    DEFAULT_POLICY,
    CertificateError,
    ServingSpec,
    generate_ca,
    issue_serving_certificate,
)
from vgpu_guard.cli.argtypes import dns1035_label, dns1123_label

__all__ = ["add_parser", "run"]

_FILES = ("ca.crt", "ca.key", "tls.crt", "tls.key")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``certs generate`` under the main ``vgpu-guard`` parser."""
    certs = subparsers.add_parser("certs", help="certificate tools for the webhook's TLS")
    certs_sub = certs.add_subparsers(dest="certs_command", required=True)
    gen = certs_sub.add_parser(
        "generate",
        help="write a self-signed CA and a serving certificate for <service>.<namespace>.svc",
        description="Writes ca.crt, ca.key, tls.crt, tls.key (keys 0600) and prints the caBundle.",
    )
    gen.add_argument("--service", required=True, type=dns1035_label, help="the webhook Service name")
    gen.add_argument("--namespace", required=True, type=dns1123_label, help="the namespace of the Service")
    gen.add_argument("--out", type=Path, default=Path("."), help="output directory (default: current)")
    gen.add_argument(
        "--days",
        type=int,
        default=DEFAULT_POLICY.serving_validity.days,
        help=f"serving certificate validity in days (default: {DEFAULT_POLICY.serving_validity.days})",
    )
    gen.add_argument(
        "--ca-days",
        type=int,
        default=DEFAULT_POLICY.ca_validity.days,
        help=f"CA validity in days (default: {DEFAULT_POLICY.ca_validity.days})",
    )
    gen.add_argument("--dns", action="append", default=[], help="extra DNS SAN (repeatable)")
    gen.add_argument("--ip", action="append", default=[], help="extra IP SAN, e.g. 127.0.0.1 (repeatable)")
    gen.add_argument(
        "--cluster-domain", default="cluster.local", help="cluster DNS domain (default: cluster.local)"
    )
    gen.add_argument("--force", action="store_true", help="overwrite existing files")
    gen.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Generate and write; 0 on success, 1 when refusing or failing (message on stderr)."""
    if args.days <= 0 or args.ca_days < args.days:
        print(
            f"error: --days must be positive and at most --ca-days (got --days {args.days}, "
            f"--ca-days {args.ca_days}); a leaf cannot outlive its CA",
            file=sys.stderr,
        )
        return 1
    out: Path = args.out
    existing = [name for name in _FILES if (out / name).exists()]
    if existing and not args.force:
        print(
            f"error: {', '.join(existing)} already exist in {out}; pass --force to overwrite "
            "or choose another --out",
            file=sys.stderr,
        )
        return 1
    try:
        spec = ServingSpec(
            service=args.service,
            namespace=args.namespace,
            cluster_domain=args.cluster_domain,
            extra_dns=tuple(args.dns),
            ip_addresses=tuple(args.ip),
        )
        now = datetime.now(UTC)  # the one place that reads the clock: an interactive command
        ca = generate_ca(now=now, validity=timedelta(days=args.ca_days))
        serving = issue_serving_certificate(ca, spec, now=now, validity=timedelta(days=args.days))
    except CertificateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, data, mode in (
            ("ca.crt", ca.cert_pem, 0o644),
            ("ca.key", ca.key_pem, 0o600),
            ("tls.crt", serving.cert_pem, 0o644),
            ("tls.key", serving.key_pem, 0o600),
        ):
            path = out / name
            path.write_bytes(data)
            path.chmod(mode)
    except OSError as e:
        print(f"error: cannot write certificates to {out}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {', '.join(str(out / n) for n in _FILES)}")
    print(f"serving certificate for {', '.join(spec.dns_names() + list(spec.ip_addresses))}")
    print(f"valid until {serving.not_after.isoformat()}")
    print(f"caBundle: {base64.b64encode(ca.cert_pem).decode('ascii')}")
    return 0
