"""Put the caBundle into our webhook configurations (the leader's job; the caller decides).

Read-modify-write with the resourceVersion from the GET as precondition (a PUT), so a concurrent
edit (Helm upgrade, kubectl) is never overwritten blindly: on 409 we re-read and re-apply.

RBAC (ClusterRole, because webhook configurations are cluster-scoped), least privilege:

    admissionregistration.k8s.io
      mutatingwebhookconfigurations    get, update   resourceNames: [<ours>]
      validatingwebhookconfigurations  get, update   resourceNames: [<ours>]

No list/watch (we address configurations by name) and no patch (we PUT with a precondition).
"""

from __future__ import annotations

import base64
import copy
import logging
from collections.abc import Sequence
from typing import Any

from vgpu_guard.certs._errors import InjectionFailed
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import Conflict, KubeError
from vgpu_guard.kube.resources import MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS, Resource

__all__ = ["inject_ca_bundle"]

logger = logging.getLogger("vgpu_guard.certs")


def _with_ca_bundle(config: dict[str, Any], encoded: str) -> dict[str, Any] | None:
    """A copy of ``config`` with every webhook's caBundle set; ``None`` when already up to date."""
    updated = copy.deepcopy(config)
    changed = False
    for webhook in updated.get("webhooks") or []:
        client_config = webhook.setdefault("clientConfig", {})
        if client_config.get("caBundle") != encoded:
            client_config["caBundle"] = encoded
            changed = True
    return updated if changed else None


async def _inject_one(
    client: ClusterClient, resource: Resource, name: str, encoded: str, *, max_attempts: int
) -> bool:
    for _ in range(max_attempts):
        config = await client.get(resource, name)
        updated = _with_ca_bundle(config, encoded)
        if updated is None:
            return False
        try:
            await client.replace(resource, updated)
        except Conflict:
            continue
        return True
    raise Conflict(
        f"{resource.kind} {name} changed on each of {max_attempts} attempts", code=409, reason="Conflict"
    )


async def inject_ca_bundle(
    client: ClusterClient,
    ca_bundle_pem: bytes,
    *,
    mutating: Sequence[str] = (),
    validating: Sequence[str] = (),
    max_attempts: int = 5,
) -> list[str]:
    """Set ``clientConfig.caBundle`` (base64 of ``ca_bundle_pem``) on every webhook of the named
    configurations; return the ``kind/name`` of those actually changed.

    Every configuration is attempted even when one fails; then ``InjectionFailed`` lists them all,
    so a missing configuration does not starve the others of a rollover.
    """
    encoded = base64.b64encode(ca_bundle_pem).decode("ascii")
    changed: list[str] = []
    failures: list[str] = []
    targets = [(MUTATING_WEBHOOKS, n) for n in mutating] + [(VALIDATING_WEBHOOKS, n) for n in validating]
    for resource, name in targets:
        try:
            if await _inject_one(client, resource, name, encoded, max_attempts=max_attempts):
                changed.append(f"{resource.kind}/{name}")
        except KubeError as e:
            failures.append(f"{resource.kind}/{name}: {type(e).__name__}: {e.message}")
    if changed:
        logger.info(
            "caBundle injected", extra={"fields": {"event": "ca_bundle_injected", "configurations": changed}}
        )
    if failures:
        raise InjectionFailed(
            "could not set caBundle on " + "; ".join(failures) + ". Check that the configurations exist "
            "(the chart creates them) and that the ClusterRole grants get and update on them by resourceNames"
        )
    return changed
