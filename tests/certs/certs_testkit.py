"""Helpers for certificate tests: a fake clock, a small fake ClusterClient, TLS verification.

``FakeClusterClient`` implements only the protocol methods the certificates module uses (get,
create, replace) with the API server's semantics (resourceVersion precondition → ``Conflict``,
duplicate name → ``AlreadyExists``, missing → ``NotFound``); the rest fail loudly. Replace with
``vgpu_guard.apidouble.client.MemoryClusterClient`` once it lands.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import ipaddress
import itertools
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.x509 import verification

from vgpu_guard.kube.errors import AlreadyExists, Conflict, Invalid, NotFound
from vgpu_guard.kube.resources import Resource

Key = tuple[str, str, str, str]  # (group, plural, namespace, name)


class FakeClusterClient:
    """Objects keyed by resource and name; every write bumps a global resourceVersion."""

    def __init__(self) -> None:
        self._objects: dict[Key, dict[str, Any]] = {}
        self._rv = itertools.count(1)
        self.writes: list[tuple[str, str, str]] = []  # (verb, kind, name)
        self.conflicts = 0
        # Yield to the loop inside each call so concurrent tasks really interleave.
        self.yield_between = True

    def _key(self, resource: Resource, name: str, namespace: str | None) -> Key:
        return (resource.group, resource.plural, (namespace or "") if resource.namespaced else "", name)

    async def _pause(self) -> None:
        if self.yield_between:
            await asyncio.sleep(0)

    def put(self, resource: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Seed an object directly (what the chart would have applied)."""
        stored = copy.deepcopy(dict(obj))
        meta = stored.setdefault("metadata", {})
        meta["resourceVersion"] = str(next(self._rv))
        self._objects[self._key(resource, meta["name"], meta.get("namespace"))] = stored
        return copy.deepcopy(stored)

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        await self._pause()
        try:
            return copy.deepcopy(self._objects[self._key(resource, name, namespace)])
        except KeyError:
            raise NotFound(f'{resource.plural} "{name}" not found', code=404, reason="NotFound") from None

    async def create(
        self, resource: Resource, obj: Mapping[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        await self._pause()
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not name:
            raise Invalid("metadata.name: Required value", code=422, reason="Invalid")
        key = self._key(resource, name, namespace or meta.get("namespace"))
        if key in self._objects:
            raise AlreadyExists(
                f'{resource.plural} "{name}" already exists', code=409, reason="AlreadyExists"
            )
        if meta.get("resourceVersion"):
            raise Invalid("metadata.resourceVersion: must not be set on create", code=422, reason="Invalid")
        self.writes.append(("create", resource.kind, name))
        stored = self.put(
            resource, {**obj, "metadata": {**meta, "namespace": namespace or meta.get("namespace")}}
        )
        return stored

    async def replace(self, resource: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        await self._pause()
        meta = obj.get("metadata") or {}
        key = self._key(resource, meta["name"], meta.get("namespace"))
        current = self._objects.get(key)
        if current is None:
            raise NotFound(f'{resource.plural} "{meta["name"]}" not found', code=404, reason="NotFound")
        wanted = meta.get("resourceVersion")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            self.conflicts += 1
            raise Conflict(
                f'Operation cannot be fulfilled on {resource.plural} "{meta["name"]}": '
                "the object has been modified; please apply your changes to the latest version and try again",
                code=409,
                reason="Conflict",
            )
        self.writes.append(("replace", resource.kind, meta["name"]))
        return self.put(resource, obj)

    def __getattr__(self, name: str) -> Any:
        # list/watch/patch/delete/bind/replace_status: not used by the certificates module.
        raise AttributeError(
            f"FakeClusterClient does not implement {name!r}; the certs module should not need it"
        )

    async def close(self) -> None:
        return None


T0 = datetime(2030, 1, 1, tzinfo=UTC)
MUTATING = "vgpu-guard-mutating"
VALIDATING = "vgpu-guard-validating"


class FakeClock:
    """A clock tests move by hand; ``sleep`` advances it instead of waiting."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += timedelta(seconds=seconds)
        await asyncio.sleep(0)


def webhook_configuration(kind: str, name: str, hooks: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": f"hook{i}.vgpu-guard.io",
                "clientConfig": {
                    "service": {"name": "vgpu-guard-webhook", "namespace": "vgpu-system", "path": f"/h{i}"},
                },
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
            }
            for i in range(hooks)
        ],
    }


def ca_bundles_in(config: dict[str, Any]) -> list[bytes]:
    """The decoded caBundle of each webhook entry of a configuration."""
    return [base64.b64decode(h["clientConfig"]["caBundle"]) for h in config["webhooks"]]


def verify_like_apiserver(leaf_pem: bytes, ca_bundle_pem: bytes, *, host: str, now: datetime) -> None:
    """Verify a serving certificate as a TLS client dialling ``host`` would; raises if it would not."""
    roots = x509.load_pem_x509_certificates(ca_bundle_pem)
    leaf = x509.load_pem_x509_certificate(leaf_pem)
    subject: verification.Subject
    try:
        subject = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        subject = x509.DNSName(host)
    verifier = (
        verification.PolicyBuilder().store(verification.Store(roots)).time(now).build_server_verifier(subject)
    )
    verifier.verify(leaf, [])
