"""LIST: the shape of items, pagination with ``limit``/``continue``, label and field selectors."""

from __future__ import annotations

import base64
import re
import uuid
from typing import Any

import pytest

from tests.contract.conftest import Contract, Side
from tests.contract.raw import Reply

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


# -- helpers for the probes below ---------------------------------------------------------------
def names(reply: Any) -> list[str]:
    return (
        [i["metadata"]["name"] for i in reply.body.get("items", [])] if isinstance(reply.body, dict) else []
    )


def page(reply: Reply, *, any_order: bool = False) -> dict[str, Any]:
    """What a paginating client reads from one LIST answer (``any_order``: served from the watch
    cache, whose order is its hash map's)."""
    if reply.status != 200:
        return reply.status_shape
    meta = reply.body.get("metadata") or {}
    return {
        "http": reply.status,
        "names": sorted(names(reply)) if any_order else names(reply),
        "has_token": bool(meta.get("continue")),
        "remaining": meta.get("remainingItemCount"),
    }


def digits_masked(text: Any) -> Any:
    """Numbers in a message (resource versions) vary between servers; the words must not."""
    return re.sub(r"\d+", "N", text) if isinstance(text, str) else text


# -- pagination ---------------------------------------------------------------------------------
async def test_limit_zero_means_no_limit(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        await make_config_maps(side, ns, ["a", "b", "c"])
        reply = await side.admin.get(f"/api/v1/namespaces/{ns}/configmaps", limit="0")
        return page(reply)

    await contract.agree(probe)


async def test_negative_limit(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        await make_config_maps(side, ns, ["a", "b"])
        return page(await side.admin.get(f"/api/v1/namespaces/{ns}/configmaps", limit="-1"))

    await contract.agree(probe)


async def test_continue_token_reads_the_first_pages_snapshot(contract: Contract) -> None:
    """After the first page, "c" is deleted, "b" changed and "d" added: the token still pages the
    list as it was (the etcd revision of the first page), as often as it is used."""

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        await make_config_maps(side, ns, ["a", "b", "c"])
        first = await side.admin.get(path, limit="1")
        token = first.body["metadata"]["continue"]
        assert (await side.admin.delete(f"{path}/c")).status == 200
        patched = await side.admin.patch(f"{path}/b", {"data": {"k": "changed"}})
        assert patched.status == 200
        await make_config_maps(side, ns, ["d"])
        second = await side.admin.get(path, limit="5", **{"continue": token})
        again = await side.admin.get(path, limit="5", **{"continue": token})
        fresh = await side.admin.get(path)
        return {
            "first": page(first),
            "second": page(second),
            "second_data": [i["data"].get("k") for i in second.body["items"]],
            "second_rv_is_the_first_pages": second.body["metadata"]["resourceVersion"]
            == first.body["metadata"]["resourceVersion"],
            "again": page(again),
            "fresh": page(fresh),
        }

    await contract.agree(probe)


async def test_garbled_continue_tokens_are_a_400(contract: Contract) -> None:
    tokens = {
        "not base64": "garbage!",
        "dangling character": "abcde",
        "padding": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ==",
        "not json": base64.urlsafe_b64encode(b"hello").decode().rstrip("="),
        "unknown version": base64.urlsafe_b64encode(b'{"v":"x","rv":5,"start":"a"}').decode().rstrip("="),
        "no resource version": base64.urlsafe_b64encode(b'{"v":"meta.k8s.io/v1","start":"a"}')
        .decode()
        .rstrip("="),
        "no start": base64.urlsafe_b64encode(b'{"v":"meta.k8s.io/v1","rv":5}').decode().rstrip("="),
        "path traversal": base64.urlsafe_b64encode(b'{"v":"meta.k8s.io/v1","rv":5,"start":"../x"}')
        .decode()
        .rstrip("="),
    }

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        await make_config_maps(side, ns, ["a"])
        out = {}
        for what, token in tokens.items():
            reply = await side.admin.get(
                f"/api/v1/namespaces/{ns}/configmaps", limit="1", **{"continue": token}
            )
            out[what] = reply.status_shape
        return out

    await contract.agree(probe)


async def test_continue_with_a_resource_version_is_a_400(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        await make_config_maps(side, ns, ["a", "b"])
        first = await side.admin.get(path, limit="1")
        token = first.body["metadata"]["continue"]
        rv = first.body["metadata"]["resourceVersion"]
        with_rv = await side.admin.get(path, limit="1", resourceVersion=rv, **{"continue": token})
        with_zero = await side.admin.get(path, limit="1", resourceVersion="0", **{"continue": token})
        return {"with_rv": with_rv.status_shape, "with_zero": page(with_zero)}

    await contract.agree(probe)


async def test_a_selective_page_hands_out_a_token_while_any_key_follows(contract: Contract) -> None:
    """The API server fills a page from etcd and hands out a token when more keys follow, whether
    or not they match the selector; the next page can then be empty."""

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        await make_config_maps(side, ns, ["a", "b"], tier="web")
        await make_config_maps(side, ns, ["c"], tier="db")
        first = await side.admin.get(path, limit="2", labelSelector="tier=web")
        token = first.body["metadata"].get("continue", "")
        second = await side.admin.get(path, limit="2", labelSelector="tier=web", **{"continue": token})
        sparse = await side.admin.get(path, limit="1", labelSelector="tier=db")
        return {"first": page(first), "second": page(second), "sparse": page(sparse)}

    await contract.agree(probe)


# -- label selectors ----------------------------------------------------------------------------
async def test_label_selectors_equality_sets_and_existence(contract: Contract) -> None:
    selectors = [
        "tier=web",
        "tier==web",
        "tier!=web",
        "tier in (web,db)",
        "tier notin (web)",
        "tier",
        "!tier",
        "tier in (web),team=a",
        "tier in ()",
        "tier=",
        "size>2",
        "size<3",
        " tier = web ",
    ]

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        await make_config_maps(side, ns, ["web-a"], tier="web", team="a", size="2")
        await make_config_maps(side, ns, ["web-b"], tier="web", team="b", size="3")
        await make_config_maps(side, ns, ["db"], tier="db", size="10")
        await make_config_maps(side, ns, ["plain"])
        await make_config_maps(side, ns, ["empty"], tier="")
        out = {}
        for selector in selectors:
            reply = await side.admin.get(path, labelSelector=selector)
            out[selector] = names(reply) if reply.status == 200 else reply.status_shape
        return out

    await contract.agree(probe)


async def test_invalid_label_selectors_are_a_400(contract: Contract) -> None:
    selectors = [
        "tier in web",
        "tier in (web",
        "=web",
        "tier=web=x",
        "tier web",
        "tier,",
        "Tier_/x=y",
        "tier=a b",
        "a/b/c=x",
        "tier=" + "x" * 64,
        "tier notin",
        "!tier=web",
        "tier=(web)",
        "size>x",
        "tier in (a b)",
        ",tier",
        "tier>=2",
    ]

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        out = {}
        for selector in selectors:
            reply = await side.admin.get(f"/api/v1/namespaces/{ns}/configmaps", labelSelector=selector)
            out[selector] = reply.status_shape
        return out

    await contract.agree(probe)


# -- field selectors ----------------------------------------------------------------------------
async def test_field_selectors_on_name_and_namespace(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        await make_config_maps(side, ns, ["a", "b", "c"])
        out = {}
        for selector in (
            "metadata.name=b",
            "metadata.name==b",
            "metadata.name!=b",
            f"metadata.namespace={ns}",
            "metadata.namespace=elsewhere",
            "metadata.name=a,metadata.name=b",
            "metadata.name!=a,metadata.name!=kube-root-ca.crt",
            "metadata.name=",
        ):
            reply = await side.admin.get(path, fieldSelector=selector)
            out[selector] = names(reply) if reply.status == 200 else reply.status_shape
        return out

    await contract.agree(probe)


async def test_unsupported_or_garbled_field_selectors_are_a_400(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        out = {}
        for path, selector in (
            (f"/api/v1/namespaces/{ns}/configmaps", "data.k=v"),
            (f"/api/v1/namespaces/{ns}/configmaps", "metadata.labels=x"),
            (f"/api/v1/namespaces/{ns}/configmaps", "metadata.name"),
            (f"/api/v1/namespaces/{ns}/configmaps", "metadata.name in (a)"),
            ("/api/v1/namespaces", "spec.finalizers=kubernetes"),
            (f"/api/v1/namespaces/{ns}/podtemplates", "template.spec.nodeName=x"),
        ):
            reply = await side.admin.get(path, fieldSelector=selector)
            out[selector] = reply.status_shape
        return out

    await contract.agree(probe)


# -- scopes -------------------------------------------------------------------------------------
async def test_cluster_scoped_list_of_namespaces(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        run = uuid.uuid4().hex[:12]  # this run's namespaces only, on a cluster that keeps others
        marker = {"contract.vgpu-guard.io/cluster-list": run}
        first = await side.namespace(**marker, order="1")
        await side.namespace(**marker, order="2")
        reply = await side.admin.get(
            "/api/v1/namespaces", labelSelector=f"contract.vgpu-guard.io/cluster-list={run}"
        )
        by_name = await side.admin.get("/api/v1/namespaces", fieldSelector=f"metadata.name={first}")
        active = await side.admin.get(
            "/api/v1/namespaces",
            labelSelector=f"contract.vgpu-guard.io/cluster-list={run}",
            fieldSelector="status.phase=Active",
        )
        items = reply.body["items"]
        return {
            "list": [reply.body.get("kind"), reply.body.get("apiVersion")],
            "orders": sorted(i["metadata"]["labels"]["order"] for i in items),
            "no_namespace_field": all("namespace" not in i["metadata"] for i in items),
            "phases": [i["status"]["phase"] for i in items],
            "by_name": names(by_name),
            "active": len(active.body["items"]),
        }

    await contract.agree(probe)


async def test_list_across_all_namespaces(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        first, second = await side.namespace(), await side.namespace()
        run = uuid.uuid4().hex[:12]
        await make_config_maps(side, first, ["z", "a"], across=run)
        await make_config_maps(side, second, ["m"], across=run)
        reply = await side.admin.get("/api/v1/configmaps", labelSelector=f"across={run}")
        paged = await side.admin.get("/api/v1/configmaps", labelSelector=f"across={run}", limit="2")
        token = paged.body["metadata"].get("continue", "")
        rest = await side.admin.get(
            "/api/v1/configmaps", labelSelector=f"across={run}", **{"continue": token}
        )
        narrowed = await side.admin.get("/api/v1/configmaps", fieldSelector=f"metadata.namespace={second}")
        mine = sorted(
            (i["metadata"]["namespace"] == first, i["metadata"]["name"]) for i in reply.body["items"]
        )
        return {
            "items": mine,
            "in_key_order": [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in reply.body["items"]]
            == sorted((i["metadata"]["namespace"], i["metadata"]["name"]) for i in reply.body["items"]),
            "paged": [len(paged.body["items"]), bool(token), len(rest.body["items"])],
            "narrowed": sorted(names(narrowed)),
            "namespace_of_narrowed": sorted({i["metadata"]["namespace"] for i in narrowed.body["items"]}),
        }

    await contract.agree(probe)


# -- resourceVersion ----------------------------------------------------------------------------
async def test_list_resource_version_is_a_growing_string(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        await make_config_maps(side, ns, ["a", "b", "c"])
        before = await side.admin.get(path)
        await make_config_maps(side, ns, ["d"])
        after = await side.admin.get(path)
        rv_before, rv_after = (
            before.body["metadata"]["resourceVersion"],
            after.body["metadata"]["resourceVersion"],
        )
        item_rvs = [i["metadata"]["resourceVersion"] for i in after.body["items"]]
        zero = await side.admin.get(path, resourceVersion="0", limit="1")
        not_older = await side.admin.get(path, resourceVersion=rv_after, limit="1")
        return {
            "is_string": isinstance(rv_before, str) and bool(rv_before),
            "grew": int(rv_after) > int(rv_before),
            "list_rv_not_older_than_items": all(int(rv_after) >= int(r) for r in item_rvs),
            "zero_ignores_limit": page(zero, any_order=True),
            "not_older_than_pages": page(not_older),
        }

    await contract.agree(probe)


async def test_list_resource_version_match_exact_reads_the_past(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        await make_config_maps(side, ns, ["a", "b"])
        then = await side.admin.get(path)
        rv = then.body["metadata"]["resourceVersion"]
        await side.admin.delete(f"{path}/a")
        await make_config_maps(side, ns, ["c"])
        exact = await side.admin.get(path, resourceVersion=rv, resourceVersionMatch="Exact")
        exact_paged = await side.admin.get(path, resourceVersion=rv, resourceVersionMatch="Exact", limit="1")
        newer = await side.admin.get(path, resourceVersion=rv, resourceVersionMatch="NotOlderThan")
        no_rv = await side.admin.get(path, resourceVersionMatch="Exact")
        bogus = await side.admin.get(path, resourceVersion=rv, resourceVersionMatch="Bogus")
        return {
            "exact": page(exact),
            "exact_rv_echoed": exact.body["metadata"]["resourceVersion"] == rv,
            "exact_paged": page(exact_paged),
            "newer": page(newer, any_order=True),
            "no_rv": no_rv.status_shape,
            "bogus": bogus.status_shape,
        }

    await contract.agree(probe)


async def test_list_resource_version_from_the_future_or_garbled(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        current = int((await side.admin.get(path)).body["metadata"]["resourceVersion"])
        future = await side.admin.get(path, resourceVersion=str(current + 1_000_000))
        garbled = await side.admin.get(path, resourceVersion="abc")
        shape = future.status_shape
        shape["message"] = digits_masked(shape["message"])
        causes = (future.body.get("details") or {}).get("causes") if isinstance(future.body, dict) else None
        return {"future": shape, "causes": causes, "garbled": garbled.status_shape}

    await contract.agree(probe)
