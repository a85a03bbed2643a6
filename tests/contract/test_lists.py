"""LIST: the shape of items, pagination with ``limit``/``continue``, label and field selectors."""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.conftest import Contract, Side

pytestmark = pytest.mark.asyncio(loop_scope="session")


def config_map(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}},
        "data": {"k": "v"},
    }


async def make_config_maps(side: Side, ns: str, names: list[str], **labels: str) -> None:
    for name in names:
        reply = await side.admin.post(f"/api/v1/namespaces/{ns}/configmaps", config_map(name, labels))
        assert reply.status == 201, reply.body


async def test_builtin_list_items_carry_no_kind_or_api_version(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        await make_config_maps(side, ns, ["a"])
        reply = await side.admin.get(f"/api/v1/namespaces/{ns}/configmaps")
        body = reply.body
        return {
            "list": [body.get("kind"), body.get("apiVersion")],
            "items": [sorted(k for k in item if k in ("kind", "apiVersion")) for item in body["items"]],
        }

    await contract.agree(probe)


async def test_limit_hands_out_a_continue_token_and_the_remaining_count(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        await make_config_maps(side, ns, ["a", "b", "c"])
        first = await side.admin.get(f"/api/v1/namespaces/{ns}/configmaps", limit="2")
        token = first.body["metadata"].get("continue", "")
        second = await side.admin.get(f"/api/v1/namespaces/{ns}/configmaps", limit="2", **{"continue": token})
        return {
            "first": [i["metadata"]["name"] for i in first.body["items"]],
            "remaining": first.body["metadata"].get("remainingItemCount"),
            "has_token": bool(token),
            "second": [i["metadata"]["name"] for i in second.body["items"]],
            "second_token": second.body["metadata"].get("continue", ""),
        }

    await contract.agree(probe)
