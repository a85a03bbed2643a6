"""WATCH: events after a resourceVersion, selectors and their transitions, bookmarks, the end of a
watch at ``timeoutSeconds``, and 410 Expired for a resourceVersion that is too old."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from typing import Any

import pytest

from tests.contract.conftest import Contract, Side
from tests.contract.raw import WatchEvent

pytestmark = pytest.mark.asyncio(loop_scope="session")

WINDOW_OVERRUN = 1050  # more writes to one resource than the double's watch window keeps


def config_map(name: str, labels: dict[str, str] | None = None, value: str = "v") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}},
        "data": {"k": value},
    }


def pod_template(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name},
        "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
    }


async def current_rv(side: Side, path: str) -> str:
    reply = await side.admin.get(path)
    assert reply.status == 200, reply.body
    rv: str = reply.body["metadata"]["resourceVersion"]
    return rv


def seen(event: WatchEvent) -> dict[str, Any]:
    """One event as a client reads it (no uids, timestamps or version values)."""
    obj = event.object
    meta = obj.get("metadata") or {}
    return {
        "type": event.type,
        "kind": obj.get("kind"),
        "apiVersion": obj.get("apiVersion"),
        "name": meta.get("name"),
        "data": obj.get("data"),
        "labels": meta.get("labels"),
    }


def versions_increase(events: list[WatchEvent]) -> bool:
    rvs = [int(e.object["metadata"]["resourceVersion"]) for e in events]
    return all(a < b for a, b in itertools.pairwise(rvs))


def error_shape(events: list[WatchEvent], *, exact_message: bool) -> Any:
    if not events:
        return None
    obj = events[0].object
    message = obj.get("message")
    if not exact_message:
        message = "too old" in str(message)
    return {
        "type": events[0].type,
        "kind": obj.get("kind"),
        "apiVersion": obj.get("apiVersion"),
        "status": obj.get("status"),
        "reason": obj.get("reason"),
        "code": obj.get("code"),
        "message": message,
        "events": len(events),
    }


async def test_watch_from_a_resource_version_replays_added_modified_deleted(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        start = await current_rv(side, path)
        assert (await side.admin.post(path, config_map("a"))).status == 201
        assert (await side.admin.patch(f"{path}/a", {"data": {"k": "changed"}})).status == 200
        assert (await side.admin.delete(f"{path}/a")).status == 200
        status, events, _ = await side.admin.watch(path, until=3, seconds=5, resourceVersion=start)
        return {
            "http": status,
            "events": [seen(e) for e in events],
            "increasing": versions_increase(events),
            "after_start": all(int(e.object["metadata"]["resourceVersion"]) > int(start) for e in events),
        }

    await contract.agree(probe)


async def test_watch_without_resource_version_starts_with_the_current_state(contract: Contract) -> None:
    """Unset and "0" both begin with a synthetic ADDED per existing object (in any order), then
    the changes."""

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        for name in ("b", "a"):
            assert (await side.admin.post(path, config_map(name))).status == 201
        out = {}
        for rv, later in (("", "later-unset"), ("0", "later-zero")):
            query = {"resourceVersion": rv} if rv else {}
            existing = len((await side.admin.get(path)).body["items"])

            async def change(name: str) -> None:
                await asyncio.sleep(0.5)
                assert (await side.admin.post(path, config_map(name))).status == 201

            (status, events, _), _ = await asyncio.gather(
                side.admin.watch(path, until=existing + 1, seconds=5, **query), change(later)
            )
            out[rv or "unset"] = {
                "http": status,
                "synthetic": sorted(e.object["metadata"]["name"] for e in events[:-1]),
                "types": sorted({e.type for e in events[:-1]}),
                "then": seen(events[-1]) if events else None,
            }
        return out

    await contract.agree(probe)


async def test_watch_with_a_label_selector_turns_transitions_into_added_and_deleted(
    contract: Contract,
) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        start = await current_rv(side, path)
        assert (await side.admin.post(path, config_map("a", {"tier": "web"}))).status == 201
        assert (await side.admin.post(path, config_map("b", {"tier": "db"}))).status == 201
        assert (await side.admin.patch(f"{path}/b", {"metadata": {"labels": {"tier": "web"}}})).status == 200
        assert (await side.admin.patch(f"{path}/a", {"metadata": {"labels": {"tier": "db"}}})).status == 200
        assert (await side.admin.patch(f"{path}/b", {"data": {"k": "changed"}})).status == 200
        assert (await side.admin.delete(f"{path}/b")).status == 200
        status, events, _ = await side.admin.watch(
            path, until=5, seconds=5, resourceVersion=start, labelSelector="tier=web"
        )
        _, by_set, _ = await side.admin.watch(
            path, until=2, seconds=3, resourceVersion=start, labelSelector="tier in (db),tier notin (web)"
        )
        return {
            "http": status,
            "events": [seen(e) for e in events],
            "increasing": versions_increase(events),
            "by_set": [seen(e) for e in by_set],
        }

    await contract.agree(probe)


async def test_watch_with_a_field_selector_on_the_name(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        start = await current_rv(side, path)
        for name in ("a", "b"):
            assert (await side.admin.post(path, config_map(name))).status == 201
        assert (await side.admin.delete(f"{path}/b")).status == 200
        assert (await side.admin.delete(f"{path}/a")).status == 200
        status, events, _ = await side.admin.watch(
            path, until=3, seconds=3, resourceVersion=start, fieldSelector="metadata.name=b"
        )
        _, refused, body = await side.admin.watch(path, until=1, seconds=3, fieldSelector="data.k=v")
        shape = (
            {k: body.get(k) for k in ("kind", "reason", "code", "message")}
            if isinstance(body, dict)
            else body
        )
        return {"http": status, "events": [seen(e) for e in events], "unsupported": [refused, shape]}

    await contract.agree(probe)


async def test_watch_on_namespaces_across_the_cluster(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        start = await current_rv(side, "/api/v1/namespaces")
        marker = uuid.uuid4().hex[:12]  # this run's namespace only, on a cluster that keeps others
        await side.namespace(**{"contract.vgpu-guard.io/watch": marker})
        status, events, _ = await side.admin.watch(
            "/api/v1/namespaces",
            until=1,
            seconds=5,
            resourceVersion=start,
            labelSelector=f"contract.vgpu-guard.io/watch={marker}",
        )
        return {
            "http": status,
            "events": [(e.type, e.object.get("kind"), e.object.get("apiVersion")) for e in events],
            "phase": [e.object.get("status", {}).get("phase") for e in events],
            "no_namespace_field": all("namespace" not in e.object["metadata"] for e in events),
        }

    await contract.agree(probe)


async def test_bookmarks_carry_only_kind_api_version_and_resource_version(contract: Contract) -> None:
    """A watch that allows bookmarks and ends in 4 s gets one about 2 s before its end, carrying a
    resourceVersion at least as new as a change its selector does not show (a config map written
    in another namespace); the bookmark object holds nothing but kind, apiVersion and that version."""

    async def probe(side: Side) -> Any:
        ns, elsewhere = await side.namespace(), await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        start = await current_rv(side, path)
        written: list[str] = []

        async def change() -> None:
            await asyncio.sleep(0.5)
            reply = await side.admin.post(f"/api/v1/namespaces/{elsewhere}/configmaps", config_map("other"))
            assert reply.status == 201, reply.body
            written.append(reply.body["metadata"]["resourceVersion"])

        began = time.monotonic()
        (status, events, _), _ = await asyncio.gather(
            side.admin.watch(
                path, seconds=8, resourceVersion=start, allowWatchBookmarks="true", timeoutSeconds="4"
            ),
            change(),
        )
        elapsed = time.monotonic() - began
        bookmarks = [e.object for e in events if e.type == "BOOKMARK"]
        first = bookmarks[0] if bookmarks else {}
        meta = first.get("metadata") or {}
        return {
            "http": status,
            "types": sorted({e.type for e in events}),
            "top_level": sorted(k for k, v in first.items() if v not in (None, {}, [])),
            "kind": [first.get("kind"), first.get("apiVersion")],
            "metadata": sorted(k for k, v in meta.items() if v is not None),
            "covers_the_other_write": bool(meta) and int(meta["resourceVersion"]) >= int(written[0]),
            "ended_by_the_server": elapsed < 7,
        }

    await contract.agree(probe)


async def test_no_bookmarks_unless_asked(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        assert (await side.admin.post(path, config_map("a"))).status == 201
        start = await current_rv(side, path)
        status, events, _ = await side.admin.watch(path, seconds=6, resourceVersion=start, timeoutSeconds="3")
        return {"http": status, "types": sorted({e.type for e in events})}

    await contract.agree(probe)


async def test_a_watch_ends_at_timeout_seconds(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        start = await current_rv(side, path)
        began = time.monotonic()
        status, events, _ = await side.admin.watch(
            path, seconds=10, resourceVersion=start, timeoutSeconds="2"
        )
        elapsed = time.monotonic() - began
        return {"http": status, "events": len(events), "ended_by_the_server": 1.0 <= elapsed < 6.0}

    await contract.agree(probe)


async def test_a_watch_from_a_future_resource_version_sees_nothing_older(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/configmaps"
        future = str(int(await current_rv(side, path)) + 1_000_000)

        async def change() -> None:
            await asyncio.sleep(0.5)
            assert (await side.admin.post(path, config_map("a"))).status == 201

        (status, events, body), _ = await asyncio.gather(
            side.admin.watch(path, until=1, seconds=3, resourceVersion=future, timeoutSeconds="2"), change()
        )
        return {"http": status, "events": [seen(e) for e in events], "refusal": body}

    await contract.agree(probe)


async def test_a_garbled_watch_resource_version(contract: Contract) -> None:
    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        out = {}
        for rv in ("abc", "-1"):
            status, events, body = await side.admin.watch(
                f"/api/v1/namespaces/{ns}/configmaps",
                until=1,
                seconds=3,
                resourceVersion=rv,
                timeoutSeconds="1",
            )
            shape = (
                {k: body.get(k) for k in ("kind", "status", "reason", "code", "message")}
                if isinstance(body, dict)
                else body
            )
            out[rv] = {
                "http": status,
                "events": [(e.type, e.object.get("code")) for e in events],
                "body": shape,
            }
        return out

    await contract.agree(probe)


async def test_a_watch_from_a_compacted_resource_version_is_expired(contract: Contract) -> None:
    """A watch from a resourceVersion whose history is gone ends at once with an ERROR event
    carrying a 410 Expired Status. On the real server pod templates bypass the watch cache
    (``--watch-cache-sizes=podtemplates#0``), so the history is etcd's, gone once a compaction
    (every 5 s) passed it; in the double it is its watch window (1000 events a resource), which
    the probe overruns. The wording differs by source (etcd's "The resourceVersion for the
    provided watch is too old." against the watch cache's "too old resource version: R (O)"), so
    of the message only "too old" is compared."""

    async def probe(side: Side) -> Any:
        ns = await side.namespace()
        path = f"/api/v1/namespaces/{ns}/podtemplates"
        start = await current_rv(side, path)
        names = [f"t{i}" for i in range(WINDOW_OVERRUN)]
        for batch in range(0, len(names), 25):
            replies = await asyncio.gather(
                *(side.admin.post(path, pod_template(n)) for n in names[batch : batch + 25])
            )
            assert all(r.status == 201 for r in replies), [r.body for r in replies if r.status != 201][:1]
        deadline = time.monotonic() + 75
        while True:
            status, events, _ = await side.admin.watch(
                path, until=1, seconds=3, resourceVersion=start, timeoutSeconds="1"
            )
            if (events and events[0].type == "ERROR") or time.monotonic() > deadline:
                break
            await asyncio.sleep(2)
        return {"http": status, "error": error_shape(events, exact_message=False)}

    await contract.agree(probe)
