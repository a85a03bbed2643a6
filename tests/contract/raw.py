"""A raw HTTP client for probes: any method, path, body and content type, and the answer as it came.

Why not our ``ClusterClient``: the contract suite compares what the servers *say* (status codes,
Status bodies, headers, watch streams, refusals of odd requests), including what a well-behaved
client would never send. Authentication is a bearer token and the CA from a kubeconfig, which both
the double and the project's control plane write.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

Obj = dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """One answer: status, the headers probes look at, and the body (JSON when it parses)."""

    status: int
    body: Any
    warnings: tuple[str, ...] = ()
    content_type: str = ""

    @property
    def status_shape(self) -> dict[str, Any]:
        """The parts of a Status body clients act on (kind, status, reason, code, message)."""
        body = self.body if isinstance(self.body, dict) else {}
        return {
            "http": self.status,
            "kind": body.get("kind"),
            "status": body.get("status"),
            "reason": body.get("reason"),
            "code": body.get("code"),
            "message": body.get("message"),
        }


@dataclass(frozen=True)
class WatchEvent:
    type: str
    object: Obj


@dataclass
class RawClient:
    """Requests as one identity against one server (``close`` when done)."""

    server: str
    token: str
    ca_pem: bytes
    _session: aiohttp.ClientSession | None = field(default=None, repr=False)

    @classmethod
    def from_kubeconfig(cls, path: Path) -> RawClient:
        config = yaml.safe_load(path.read_text())
        context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        if "certificate-authority-data" in cluster:
            ca = base64.b64decode(cluster["certificate-authority-data"])
        else:
            ca = (path.parent / cluster["certificate-authority"]).read_bytes()
        return cls(server=cluster["server"].rstrip("/"), token=user["token"], ca_pem=ca)

    def as_token(self, token: str) -> RawClient:
        return RawClient(self.server, token, self.ca_pem)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            context = ssl.create_default_context(cadata=self.ca_pem.decode())
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=context),
                headers={"Authorization": f"Bearer {self.token}"},
            )
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: bytes | str | None = None,
        content_type: str | None = None,
        accept: str = "application/json",
        query: dict[str, str] | None = None,
        seconds: float = 30.0,
    ) -> Reply:
        headers = {"Accept": accept}
        body: bytes | str | None = data
        if json_body is not None:
            body = json.dumps(json_body)
            headers["Content-Type"] = content_type or "application/json"
        elif content_type:
            headers["Content-Type"] = content_type
        async with self._client().request(
            method,
            self.server + path,
            data=body,
            headers=headers,
            params=query,
            timeout=aiohttp.ClientTimeout(total=seconds),
        ) as response:
            raw = await response.read()
            try:
                parsed: Any = json.loads(raw)
            except ValueError:
                parsed = raw.decode(errors="replace")
            return Reply(
                status=response.status,
                body=parsed,
                warnings=tuple(response.headers.getall("Warning", [])),
                content_type=response.headers.get("Content-Type", "").split(";")[0],
            )

    async def get(self, path: str, **query: str) -> Reply:
        return await self.request("GET", path, query=query or None)

    async def post(self, path: str, obj: Any, **query: str) -> Reply:
        return await self.request("POST", path, json_body=obj, query=query or None)

    async def put(self, path: str, obj: Any, **query: str) -> Reply:
        return await self.request("PUT", path, json_body=obj, query=query or None)

    async def patch(self, path: str, patch: Any, content_type: str = "application/merge-patch+json") -> Reply:
        return await self.request("PATCH", path, json_body=patch, content_type=content_type)

    async def delete(self, path: str, options: Obj | None = None, **query: str) -> Reply:
        return await self.request("DELETE", path, json_body=options, query=query or None)

    async def watch(
        self, path: str, *, until: int = 1000, seconds: float = 10.0, **query: str
    ) -> tuple[int, list[WatchEvent], Any]:
        """Open a watch; collect events until ``until`` of them, the server ends it, or ``seconds``.

        Returns (HTTP status, events, body when the server refused the watch outright)."""
        params = {"watch": "true", **query}
        events: list[WatchEvent] = []
        async with self._client().get(
            self.server + path,
            params=params,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        ) as response:
            if response.status != 200:
                raw = await response.read()
                try:
                    return response.status, [], json.loads(raw)
                except ValueError:
                    return response.status, [], raw.decode(errors="replace")

            async def read() -> None:
                async for line in response.content:
                    if line.strip():
                        event = json.loads(line)
                        events.append(WatchEvent(event["type"], event.get("object") or {}))
                        if len(events) >= until:
                            return

            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(read(), seconds)
            return 200, events, None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
