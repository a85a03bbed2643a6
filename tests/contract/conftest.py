"""The differential contract suite: every probe runs against the API double and a real API server.

    sides     (session) the two servers: "double" (the API double over HTTPS, RBAC on) and "real"
              (tests/real_cluster.py: E2E_KUBECONFIG or the project's 1.20.2 control plane)
    contract  (probe)   ``await contract.agree(probe)``: runs ``probe(side)`` on both sides at once,
              each in a fresh namespace, and asserts that both observe the same thing

A probe returns an *observation*: plain JSON of what a client sees (status code, Status reason and
message, the fields the product reads). Before comparing, each side's namespace name becomes "NS".
Where the double differs on purpose, known_differences.py says so with the reason, and there the
observations must differ (an entry that no longer differs fails, so the list stays true).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.apidouble_support.http.server import RunningDouble, serve_double
from tests.apidouble_support.rbac import RBACAuthorizer
from tests.apidouble_support.tokens import token_for
from tests.contract.known_differences import KNOWN
from tests.contract.raw import RawClient, Reply
from tests.real_cluster import RealCluster, deselect_real_cluster_items
from vgpu_guard.apidouble import service_account

Obj = dict[str, Any]
PROBE_LABEL = "contract.vgpu-guard.io/probe"
ROOT_CA = "kube-root-ca.crt"  # the ConfigMap kube-controller-manager publishes in every namespace


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every probe needs the real server: without one (and outside CI) they are left out, said once."""
    deselect_real_cluster_items(config, items, lambda item: "tests/contract/" in item.nodeid)


@dataclass
class Side:
    """One server as probes use it: an admin client, fresh namespaces, identities without rights."""

    name: str
    admin: RawClient
    double: RunningDouble | None = None
    minor: int = 0
    namespaces: list[str] = field(default_factory=list)

    async def namespace(self, **labels: str) -> str:
        """A fresh namespace (generateName ``contract-``), ready for pods, and settled: the
        controllers that write into every new namespace are done (its ``kube-root-ca.crt`` exists),
        so a LIST or watch of its config maps sees what the probe made and that one object, on
        both sides. kube-controller-manager publishes it asynchronously, late under load."""
        body = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"generateName": "contract-", "labels": {PROBE_LABEL: "true", **labels}},
        }
        reply = await self.admin.post("/api/v1/namespaces", body)
        assert reply.status == 201, reply.body
        name: str = reply.body["metadata"]["name"]
        self.namespaces.append(name)
        await self._service_account_ready(name)
        await self._root_ca_published(name)
        return name

    async def _root_ca_published(self, namespace: str) -> None:
        for _ in range(600):
            reply = await self.admin.get(f"/api/v1/namespaces/{namespace}/configmaps/{ROOT_CA}")
            if reply.status == 200:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"{self.name}: {ROOT_CA} never appeared in {namespace}")

    async def _service_account_ready(self, namespace: str) -> None:
        # Before 1.24 pods are refused until the default ServiceAccount has its token Secret.
        for _ in range(600):
            reply = await self.admin.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
            if reply.status == 200 and (self.minor >= 24 or reply.body.get("secrets")):
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"{self.name}: ServiceAccount {namespace}/default never got ready")

    async def service_account_client(self, namespace: str, name: str) -> RawClient:
        """A client authenticated as ServiceAccount ``namespace/name`` (created here, no rights)."""
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
        reply = await self.admin.post(f"/api/v1/namespaces/{namespace}/serviceaccounts", account)
        assert reply.status in (201, 409), reply.body
        if self.double is not None:
            return self.admin.as_token(token_for(self.double, service_account(namespace, name)))
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
        reply = await self.admin.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", request)
        assert reply.status == 201, reply.body
        return self.admin.as_token(reply.body["status"]["token"])

    async def cleanup(self) -> None:
        for namespace in self.namespaces:
            pods = await self.admin.get(f"/api/v1/namespaces/{namespace}/pods")
            for pod in pods.body.get("items", []) if isinstance(pods.body, dict) else []:
                await self.admin.delete(
                    f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}",
                    {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
                )
            await self.admin.delete(f"/api/v1/namespaces/{namespace}")
        self.namespaces.clear()


Probe = Callable[[Side], Awaitable[Any]]


def normalise(observation: Any, side: Side) -> Any:
    """The observation with this side's namespace names replaced by "NS" (as JSON, compared exactly)."""
    text = json.dumps(observation, sort_keys=True, default=str)
    for namespace in side.namespaces:
        text = text.replace(namespace, "NS")
    return json.loads(text)


@dataclass
class Contract:
    """One probe's run on both sides."""

    test_name: str
    sides: dict[str, Side]

    async def agree(self, probe: Probe) -> dict[str, Any]:
        """Run ``probe`` on both sides; the observations must be equal (or differ, if known)."""
        double, real = self.sides["double"], self.sides["real"]
        try:
            seen = await asyncio.gather(probe(double), probe(real))
            observed = {"double": normalise(seen[0], double), "real": normalise(seen[1], real)}
        finally:
            await asyncio.gather(double.cleanup(), real.cleanup())
        reason = KNOWN.get(self.test_name)
        if reason is not None:
            assert observed["double"] != observed["real"], (
                f"{self.test_name} is listed as a known difference ({reason}) but both sides now agree: "
                "remove it from tests/contract/known_differences.py"
            )
            # Differing is not enough: the double must still answer what it answered when the
            # difference was accepted (a 500 would differ too).
            assert observed["double"] == _known_answer(self.test_name, observed["double"]), (
                f"{self.test_name}: the double's answer changed from the one recorded in "
                f"{KNOWN_ANSWERS.name} (UPDATE_GOLDEN=1 records the new one): "
                f"{json.dumps(observed['double'], sort_keys=True)}"
            )
            print(f"known difference: {reason}")
            return observed
        assert observed["double"] == observed["real"], _explain(observed)
        return observed


KNOWN_ANSWERS = Path(__file__).with_name("known_double_answers.json")


def _known_answer(test_name: str, observed: Any) -> Any:
    """The double's recorded answer for a known difference (``UPDATE_GOLDEN=1`` records it)."""
    answers = json.loads(KNOWN_ANSWERS.read_text()) if KNOWN_ANSWERS.exists() else {}
    if os.environ.get("UPDATE_GOLDEN"):
        answers[test_name] = observed
        KNOWN_ANSWERS.write_text(json.dumps(answers, indent=2, sort_keys=True) + "\n")
    return answers.get(test_name, "<not recorded>")


def _explain(observed: dict[str, Any]) -> str:
    return (
        "the double and the real API server disagree:\n"
        f"  double: {json.dumps(observed['double'], sort_keys=True)}\n"
        f"  real:   {json.dumps(observed['real'], sort_keys=True)}"
    )


async def _minor(client: RawClient) -> int:
    version: Reply = await client.get("/version")
    return int("".join(c for c in str(version.body.get("minor", "0")) if c.isdigit()) or 0)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def sides(
    real_api: RealCluster, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[dict[str, Side]]:
    async with serve_double(
        Path(tmp_path_factory.mktemp("contract-double")), authorizer=RBACAuthorizer
    ) as running:
        double = Side("double", RawClient.from_kubeconfig(running.kubeconfig), double=running)
        real = Side("real", RawClient.from_kubeconfig(real_api.kubeconfig))
        try:
            double.minor, real.minor = await _minor(double.admin), await _minor(real.admin)
            yield {"double": double, "real": real}
        finally:
            for side in (double, real):
                with contextlib.suppress(Exception):
                    await side.cleanup()
                await side.admin.close()


@pytest.fixture
def contract(sides: dict[str, Side], request: pytest.FixtureRequest) -> Contract:
    return Contract(request.node.name, sides)
