"""Fuzzed AdmissionReviews against the webhook application in-process (no sockets).

Hypothesis draws the structure of each case (a well-formed review around a hostile pod, a wrong
kind, a malformed envelope, a huge or deeply nested object, invalid quantities and annotations,
unicode everywhere); each drawn case is then expanded into ``VARIANTS`` byte-level and tree-level
mutants by a generator seeded from the case (truncation, a byte flipped, a subtree swapped for a
hostile value), so a worker reaches tens of thousands of requests per core in seconds. Every
request goes through the real aiohttp application (router, middleware, ``client_max_size``) via
``Application._handle`` with a real ``web.Request``: only the socket is missing. Over real HTTPS the
same cases are replayed in a smaller sample (tests/reliability/test_webhook_robustness.py).

What every answer must be: 200 with a well-formed AdmissionReview response carrying the request's
uid (``allowed`` a bool, a base64 JSONPatch only when allowed, a status with code and message when
denied), or 400/413 with an ``error`` string. Never a 5xx, never an exception.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

from aiohttp import streams, web
from aiohttp.http import HttpVersion11, RawRequestMessage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from tests.builders import A100_40, default_config, gpu_node, view_of
from vgpu_guard.webhook.app import MAX_BODY, create_app
from vgpu_guard.webhook.views import StaticViewSource

__all__ = ["FuzzStats", "cases", "check_answer", "fuzz", "make_app", "mutants"]

PATHS = ("/mutate/pods", "/validate/pods", "/validate/workloads", "/validate/queues")
VGPU = (
    "volcano.sh/vgpu-number",
    "volcano.sh/vgpu-memory",
    "volcano.sh/vgpu-cores",
    "volcano.sh/vgpu-memory-percentage",
)
ANNOTATIONS = (
    "volcano.sh/vgpu-mode",
    "volcano.sh/vgpu-ids-new",
    "volcano.sh/vgpu-node",
    "volcano.sh/bind-phase",
    "scheduling.k8s.io/group-name",
    "vgpu-guard.io/mig-profile",
    "vgpu-guard.io/allocation",
)
WEIRD = st.sampled_from(
    [
        "",
        "0",
        "-1",
        "1e309",
        "NaN",
        "12Gi",
        "1.5",
        "0x10",
        "١٢",
        "9" * 400,
        "½",
        "\u0000",
        "🚀",
        "1Ei",
        "-0",
        " 3 ",
        "3m",
        "+4",
        "1e3",
    ]
)
text = st.one_of(st.text(max_size=40), WEIRD)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), text)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)),
    max_leaves=12,
)
quantity = st.one_of(
    WEIRD, st.integers(-5, 2**40), st.floats(allow_nan=False, allow_infinity=False), json_values
)
# Every strategy a draw uses is built once, here: a strategy built inside a composite is validated
# and its recursive properties worked out again on every draw, which was a fifth of a worker's time.
# Where a drawn value may be swapped for junk, a coin is drawn and then the junk, which is what
# ``one_of(just(value), junk)`` drew, without a new strategy per call.
coin = st.booleans()
VGPU_KEYS = st.lists(st.sampled_from(VGPU), unique=True, max_size=4)
VGPU_MAP = st.dictionaries(st.sampled_from(VGPU), quantity, max_size=3)
NOTES = st.dictionaries(st.one_of(st.sampled_from(ANNOTATIONS), text), st.one_of(text, WEIRD), max_size=4)
WORKLOADS = st.sampled_from(
    [("Deployment", "deployments"), ("Job", "jobs"), ("CronJob", "cronjobs"), ("StatefulSet", "statefulsets")]
)
QUEUE_RESOURCES = st.dictionaries(
    st.sampled_from(["cpu", "memory", "volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "nvidia.com/gpu"]),
    quantity,
    max_size=3,
)
OPERATIONS = st.sampled_from(["CREATE"] * 6 + ["UPDATE", "DELETE", "CONNECT", "PATCH"])
TOP_LEVEL = st.sampled_from(["metadata", "spec"])


def _or_junk(draw: Any, value: Any, junk: st.SearchStrategy[Any] = json_values) -> Any:
    """``value``, or a value drawn from ``junk`` instead (a coin decides)."""
    return value if draw(coin) else draw(junk)


def _or_text(draw: Any, value: str) -> str:
    out: str = _or_junk(draw, value, text)
    return out


@st.composite
def containers(draw: Any) -> list[Any]:
    out = []
    for i in range(draw(st.integers(0, 3))):
        limits = {k: draw(quantity) for k in draw(VGPU_KEYS)}
        requests = limits if draw(coin) else draw(VGPU_MAP)
        container: dict[str, Any] = {"name": _or_text(draw, f"c{i}"), "image": "cuda"}
        container["resources"] = _or_junk(draw, {"limits": limits, "requests": requests})
        if draw(coin):
            container["securityContext"] = {"privileged": _or_junk(draw, draw(coin))}
        out.append(_or_junk(draw, container) if draw(st.integers(0, 9)) == 9 else container)
    return out


CONTAINERS = containers()


@st.composite
def pods(draw: Any) -> dict[str, Any]:
    notes = draw(NOTES)
    spec: dict[str, Any] = {"containers": draw(CONTAINERS)}
    if draw(coin):
        spec["initContainers"] = draw(CONTAINERS)
    if draw(coin):
        spec["schedulerName"] = _or_text(draw, "vgpu-guard")
    if draw(st.integers(0, 4)) == 4:
        spec["affinity"] = draw(json_values)
    pod: dict[str, Any] = {
        "apiVersion": _or_text(draw, "v1"),
        "kind": _or_text(draw, "Pod"),
        "metadata": {"name": draw(text), "namespace": draw(text), "annotations": notes},
        "spec": spec,
    }
    if draw(st.integers(0, 5)) == 5:
        pod[draw(TOP_LEVEL)] = draw(json_values)
    return pod


PODS = pods()


@st.composite
def objects(draw: Any) -> tuple[str, str, str, Any]:
    """(group, resource, kind, object): a pod, a workload around a pod template, a queue, or junk."""
    pod = draw(PODS)
    choice = draw(st.integers(0, 5))
    if choice <= 2:
        return "", "pods", "Pod", pod
    if choice == 3:
        kind, resource = draw(WORKLOADS)
        template = {"metadata": pod["metadata"], "spec": pod["spec"]}
        spec: dict[str, Any] = {"template": template}
        if kind == "CronJob":
            spec = {"jobTemplate": {"spec": {"template": template}}}
        group = "batch" if kind in ("Job", "CronJob") else "apps"
        return (
            group,
            resource,
            kind,
            {"apiVersion": f"{group}/v1", "kind": kind, "metadata": pod["metadata"], "spec": spec},
        )
    if choice == 4:
        queue = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": draw(text)},
            "spec": {
                "guarantee": {"resource": draw(QUEUE_RESOURCES)},
                "capability": draw(QUEUE_RESOURCES),
                "deserved": draw(QUEUE_RESOURCES),
                "parent": draw(text),
            },
        }
        return "scheduling.volcano.sh", "queues", "Queue", queue
    return draw(text), draw(text), draw(text), draw(json_values)


OBJECTS = objects()


@st.composite
def cases(draw: Any) -> tuple[str, bytes, int]:
    """(path, body, seed for the mutants)."""
    group, resource, kind, obj = draw(OBJECTS)
    operation = draw(OPERATIONS)
    odd = draw(st.integers(0, 9)) == 9  # one case in ten has a hostile envelope as well
    gvk = {"group": group, "version": "v1", "kind": kind}
    request: dict[str, Any] = {
        "uid": draw(text) if odd else str(uuid.UUID(int=draw(st.integers(0, 2**128 - 1)))),
        "kind": gvk,
        "resource": {"group": group, "version": "v1", "resource": resource},
        "operation": operation,
        "userInfo": draw(json_values) if odd else {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": draw(json_values) if odd else (obj if draw(coin) else None),
        "dryRun": draw(json_values) if odd else draw(coin),
        "namespace": draw(text),
    }
    review: Any = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    # Hypothesis favours small integers: the ordinary shapes get them, the broken ones the top.
    shape = draw(st.integers(0, 29))
    if shape == 29:
        review = draw(json_values)  # not a review at all
    elif shape == 28:
        review["kind"] = draw(text)
    elif shape == 27:
        keys = sorted(request)
        del review["request"][keys[draw(st.integers(0, len(keys) - 1))]]
    try:
        body = json.dumps(review, ensure_ascii=draw(coin)).encode("utf-8", "surrogatepass")
    except ValueError:  # NaN is JSON-able in Python; surrogates may not encode
        body = b'{"apiVersion": "admission.k8s.io/v1"'
    return draw(st.sampled_from(PATHS)), body, draw(st.integers(0, 2**32))


HOSTILE: tuple[Any, ...] = (
    None,
    "",
    "\udcff" * 3,
    "💥" * 1000,
    -1,
    2**64,
    1e308,
    [],
    {},
    [[[[[[[[[[[[]]]]]]]]]]]],
    {"a": {"b": {"c": {"d": {"e": {}}}}}},
    "x" * 70_000,
)


def _nested(depth: int) -> bytes:
    return (
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": '
        + b'{"a":' * depth
        + b"1"
        + b"}" * depth
        + b"}"
    )


def _swap(tree: Any, rng: random.Random) -> Any:
    """Replace one random subtree of a JSON value with a hostile value."""
    if isinstance(tree, dict) and tree and rng.random() < 0.8:
        key = rng.choice(list(tree))
        return {**tree, key: _swap(tree[key], rng)}
    if isinstance(tree, list) and tree and rng.random() < 0.8:
        i = rng.randrange(len(tree))
        return [*tree[:i], _swap(tree[i], rng), *tree[i + 1 :]]
    return rng.choice(HOSTILE)


def mutants(path: str, body: bytes, seed: int, count: int) -> Iterator[tuple[str, str, bytes]]:
    """(category, path, body): the case itself, then ``count - 1`` mutants of it."""
    rng = random.Random(seed)
    yield "case", path, body
    try:
        tree = json.loads(body)
    except ValueError:
        tree = None
    for _ in range(count - 1):
        roll = rng.random()
        target = rng.choice(PATHS)
        if roll < 0.35 and tree is not None:
            mutated = _swap(tree, rng)
            yield "subtree", target, json.dumps(mutated, ensure_ascii=False).encode("utf-8", "surrogatepass")
        elif roll < 0.42:
            yield "truncated", target, body[: rng.randrange(len(body) + 1)]
        elif roll < 0.5 and body:
            i = rng.randrange(len(body))
            yield "byte-flip", target, body[:i] + bytes([rng.randrange(256)]) + body[i + 1 :]
        elif roll < 0.52:
            yield "deep", target, _nested(rng.choice((50, 500, 5_000, 50_000)))
        elif roll < 0.525:
            yield (
                "huge",
                target,
                body[:-1] + b', "pad": "' + b"y" * rng.choice((2**20, 3 * 2**20)) + b'"}'
                if body.endswith(b"}")
                else body,
            )
        elif roll < 0.527:
            yield "too-large", target, b" " * (MAX_BODY + 1)
        else:
            yield "case", target, body


def make_app() -> web.Application:
    views = StaticViewSource(
        view_of(
            [gpu_node("a30"), gpu_node("a100", count=8, memory=40960, card_type=A100_40, mode="mig", split=7)]
        )
    )
    app = create_app(config=default_config(), views=views)
    app.freeze()
    return app


class _Protocol:
    """The part of aiohttp's RequestHandler a Request and its StreamReader touch."""

    transport = None
    ssl_context = None
    peername = ("127.0.0.1", 1)
    sockname = ("127.0.0.1", 443)
    _reading_paused = False

    def pause_reading(self, *_: Any, **__: Any) -> None:
        return None

    def resume_reading(self, *_: Any, **__: Any) -> None:
        return None


async def call(app: web.Application, path: str, body: bytes) -> tuple[int, bytes]:
    """One POST through the real application: router, middleware, body limit, handler."""
    loop = asyncio.get_running_loop()
    protocol = _Protocol()
    payload = streams.StreamReader(protocol, 2**16, loop=loop)  # type: ignore[arg-type]
    payload.feed_data(body)
    payload.feed_eof()
    headers = CIMultiDictProxy(
        CIMultiDict({"Content-Type": "application/json", "Content-Length": str(len(body))})
    )
    message = RawRequestMessage(
        "POST", path, HttpVersion11, headers, (), False, None, False, False, URL(path)
    )
    # Stand-ins for the handler, writer and task aiohttp's typed signature asks for.
    request = web.Request(
        message, payload, protocol, None, asyncio.current_task(), loop, client_max_size=MAX_BODY  # type: ignore[arg-type]
    )  # fmt: skip
    response = await app._handle(request)
    assert isinstance(response, web.Response)
    return response.status, bytes(response.body or b"")  # type: ignore[arg-type]


def check_answer(status: int, body: bytes, request: bytes) -> None:
    """Raise AssertionError unless the answer is a well-formed review response or a 400/413."""
    assert status in (200, 400, 413), f"HTTP {status}: {body[:300]!r}"
    answer = json.loads(body)
    if status != 200:
        assert set(answer) == {"error"} and isinstance(answer["error"], str) and answer["error"], answer
        return
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview", answer
    response = answer["response"]
    assert response["uid"] == json.loads(request)["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    if response["allowed"]:
        assert "status" not in response
        if "patch" in response:
            assert response["patchType"] == "JSONPatch"
            assert isinstance(json.loads(base64.b64decode(response["patch"])), list)
    else:
        status_ = response["status"]
        assert isinstance(status_["code"], int) and 400 <= status_["code"] < 600 and status_["message"]
        assert "patch" not in response
    for warning in response.get("warnings", []):
        assert isinstance(warning, str)


class FuzzStats:
    def __init__(self) -> None:
        self.requests = 0
        self.statuses: Counter[int] = Counter()
        self.categories: Counter[str] = Counter()
        self.allowed: Counter[bool] = Counter()


def fuzz(examples: int, variants: int, seed: int) -> FuzzStats:
    """Run ``examples`` hypothesis cases x ``variants`` mutants in a fresh event loop."""
    stats = FuzzStats()
    app = make_app()
    loop = asyncio.new_event_loop()

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(cases())
    def run(case: tuple[str, bytes, int]) -> None:
        path, body, case_seed = case
        for category, target, data in mutants(path, body, case_seed ^ seed, variants):
            status, answer = loop.run_until_complete(call(app, target, data))
            stats.requests += 1
            stats.statuses[status] += 1
            stats.categories[category] += 1
            check_answer(status, answer, data)

    try:
        run()
        # The process keeps serving: a plain, valid review still gets its normal answer.
        good = json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "after-fuzz",
                    "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "operation": "CREATE",
                    "object": {
                        "metadata": {"name": "p"},
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "resources": {
                                        "limits": {
                                            "volcano.sh/vgpu-number": "1",
                                            "volcano.sh/vgpu-memory": "12Gi",
                                        }
                                    },
                                }
                            ]
                        },
                    },
                },
            }
        ).encode()
        status, answer = loop.run_until_complete(call(app, "/validate/pods", good))
        assert status == 200 and json.loads(answer)["response"]["allowed"] is False, answer[:300]
    finally:
        loop.close()
    return stats
