"""A throw-away CA and serving certificate for the double's HTTPS listener.

Made with the same generator as the webhook's certificates (``vgpu_guard.certs``): the served
double's TLS is then the product's own, not a second certificate path.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from vgpu_guard.certs import ServingSpec, generate_ca, issue_serving_certificate

__all__ = ["ServingTLS", "make_serving_tls"]


@dataclass(frozen=True, slots=True)
class ServingTLS:
    """PEM bytes: the CA clients trust, and the server's certificate chain and key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def make_serving_tls(hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), *, days: int = 7) -> ServingTLS:
    """A CA and a leaf for ``hosts`` (IP addresses become IP SANs, the rest DNS SANs)."""
    now = datetime.datetime.now(datetime.UTC)
    validity = datetime.timedelta(days=days)
    ips, names = [], []
    for host in hosts:
        try:
            ips.append(str(ipaddress.ip_address(host)))
        except ValueError:
            names.append(host)
    ca = generate_ca(now=now, validity=validity)
    # The in-cluster name of the API server, plus the loopback names clients dial.
    spec = ServingSpec(
        service="kubernetes", namespace="default", extra_dns=tuple(names), ip_addresses=tuple(ips)
    )
    leaf = issue_serving_certificate(ca, spec, now=now, validity=validity)
    return ServingTLS(ca_pem=ca.cert_pem, cert_pem=leaf.cert_pem, key_pem=leaf.key_pem)
