"""Probe CRDs for the contract suite: install one, wait until it is served, remove it again.

CRDs are cluster-scoped and probes run one after another on the same two servers, so each probe
installs its own CRD under a name no other probe uses and removes it when done (``installed``).
A real API server marks a CRD Established and starts serving it a moment after the create; the
helpers wait for both, so a probe sees the same thing on the double (which is immediate).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tests.contract.conftest import Side
from tests.contract.raw import Reply

Obj = dict[str, Any]
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
GROUP = "contract.vgpu-guard.io"


def crd(
    plural: str,
    kind: str,
    schema: Obj | None = None,
    *,
    group: str = GROUP,
    scope: str = "Namespaced",
    status: bool = False,
    versions: list[Obj] | None = None,
) -> Obj:
    """A v1 CRD with one served storage version ``v1`` (or ``versions`` as given)."""
    if versions is None:
        version: Obj = {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
        if status:
            version["subresources"] = {"status": {}}
        versions = [version]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"plural": plural, "singular": plural[:-1], "kind": kind, "listKind": f"{kind}List"},
            "versions": versions,
        },
    }


def spec_schema(properties: Obj, **extra: Any) -> Obj:
    """A root schema whose ``spec`` object has ``properties`` (and ``extra`` keywords)."""
    return {"type": "object", "properties": {"spec": {"type": "object", "properties": properties, **extra}}}


async def _until(check: Any, what: str, seconds: float = 20.0) -> Any:
    for _ in range(int(seconds / 0.1)):
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"gave up waiting: {what}")


async def remove(side: Side, name: str) -> None:
    """Delete the CRD ``name`` (if there) and wait until it is gone."""
    await side.admin.delete(f"{CRDS}/{name}")

    async def gone() -> bool:
        return (await side.admin.get(f"{CRDS}/{name}")).status == 404

    await _until(gone, f"{side.name}: CRD {name} deleted")


async def install(side: Side, body: Obj) -> str:
    """Create the CRD, wait until it is Established and its resource answers; returns its name."""
    name: str = body["metadata"]["name"]
    if (await side.admin.get(f"{CRDS}/{name}")).status == 200:
        await remove(side, name)  # a leftover of an interrupted run
    reply = await side.admin.post(CRDS, body)
    assert reply.status == 201, reply.body

    async def established() -> bool:
        got = await side.admin.get(f"{CRDS}/{name}")
        conditions = (got.body.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    await _until(established, f"{side.name}: CRD {name} Established")
    spec = body["spec"]
    served = [v["name"] for v in spec["versions"] if v.get("served")]

    async def answers() -> bool:
        for version in served:
            path = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"
            if (await side.admin.get(path)).status != 200:
                return False
        return True

    await _until(answers, f"{side.name}: CRD {name} served")
    return name


@asynccontextmanager
async def installed(side: Side, body: Obj) -> AsyncIterator[str]:
    """``install`` for the block, ``remove`` after it."""
    name = await install(side, body)
    try:
        yield name
    finally:
        await remove(side, name)


def invalid(reply: Reply) -> Obj:
    """A refusal as a client can rely on it, whatever order the server lists the errors in.

    kube-apiserver collects CRD schema errors from Go maps, so their order changes from call to
    call: the causes are compared as a sorted list, and the message as its head plus the fact
    that it lists exactly the causes (one bare, several in brackets) in the causes' order."""
    body = reply.body if isinstance(reply.body, dict) else {}
    details = body.get("details") or {}
    causes = details.get("causes") or []
    message = str(body.get("message") or "")
    head, sep, rest = message.partition(" is invalid: ")
    texts = [f"{c.get('field')}: {c.get('message')}" for c in causes]
    listed = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return {
        **reply.status_shape,
        "message": head + sep if causes else message,
        "message_lists_the_causes": rest == listed if causes else None,
        "details": {k: v for k, v in details.items() if k != "causes"},
        "causes": sorted(causes, key=lambda c: json.dumps(c, sort_keys=True)),
    }


def written(reply: Reply, *keys: str) -> Obj:
    """A successful write's code and the named top-level fields (metadata left out)."""
    body = reply.body if isinstance(reply.body, dict) else {}
    if reply.status >= 400:
        return {"code": reply.status, "refused": invalid(reply)}
    return {"code": reply.status, **{k: body.get(k) for k in keys}}
