"""Vendor the OpenAPI v2 subset the API double serves from Kubernetes 1.20.2's swagger.json.

    .venv/bin/python -m tests.apidouble.vendor_openapi      # rewrites vgpu_guard/data/openapi/

It also lists the 1.20 resources the double does not serve (``unserved-1.20.json``), so a request
for one is refused by name.

Why vendored, not hand-written: ``kubectl explain`` and kubectl's client-side validation read these
definitions, so they must be the real server's words. Why a subset: the double must never claim
more than it serves, so only the paths of the resources it serves (and the definitions they reach)
are kept. ``tests/apidouble/test_openapi.py`` checks the vendored file equals this output when the
1.20.2 source is on disk.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vgpu_guard.apidouble._types import BUILTIN_TYPES

Obj = dict[str, Any]
SOURCE = Path.home() / ".cache/vgpu-guard/kubernetes-1.20.2/src/api/openapi-spec/swagger.json"
TARGET = Path(__file__).resolve().parents[2] / "vgpu_guard/data/openapi/v2-builtin.json"
UNSERVED = TARGET.with_name("unserved-1.20.json")
_PATH = re.compile(r"^/(?:api/(?P<cv>[^/]+)|apis/(?P<g>[^/]+)/(?P<v>[^/]+))/(?P<rest>.*)$")


def _served() -> dict[tuple[str, str, str], frozenset[str]]:
    """(group, version, plural) -> the subresources served for it."""
    served = {(t.group, v, t.plural): t.subresources for t in BUILTIN_TYPES for v in t.versions}
    served[("authorization.k8s.io", "v1", "selfsubjectaccessreviews")] = frozenset()
    return served


def _path_served(path: str, served: dict[tuple[str, str, str], frozenset[str]]) -> bool:
    groups = {g for g, _, _ in served} | {""}
    if path in ("/api/", "/apis/", "/version/"):
        return True
    if re.fullmatch(r"/apis/[^/]+/", path):
        return path.split("/")[2] in groups
    m = _PATH.match(path)
    if m is None or "/watch/" in path:
        return False
    group, version = (m["g"] or "", m["v"] or m["cv"])
    rest = [s for s in m["rest"].split("/") if s]
    if not rest:
        return any(g == group and v == version for g, v, _ in served)
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[1] == "{namespace}":
        rest = rest[2:]
    plural, tail = rest[0], rest[1:]
    subs = served.get((group, version, plural))
    if subs is None:
        return False
    return len(tail) <= 1 or (len(tail) == 2 and tail[1] in subs)


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value.removeprefix("#/definitions/")
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


_ADM = "io.k8s.api.admissionregistration.v1."
# Fields the double serves past 1.20 (it is v1.33 where the product needs it: docs/apidouble.md).
# A client validating against 1.20's definitions would refuse them (Helm does, for the chart's
# matchConditions), so the served document carries them, as a 1.30+ server's does.
_LATER: dict[str, Obj] = {
    _ADM + "MatchCondition": {
        "description": "MatchCondition represents a condition which must be fulfilled for a request to be "
        "sent to a webhook.",
        "type": "object",
        "required": ["name", "expression"],
        "properties": {
            "expression": {
                "description": "Expression represents the expression which will be evaluated by CEL. Must "
                "evaluate to bool. Required.",
                "type": "string",
            },
            "name": {
                "description": "Name is an identifier for this match condition, used for strategic merging of "
                "MatchConditions, as well as providing an identifier for logging purposes. Required.",
                "type": "string",
            },
        },
    },
}
_MATCH_CONDITIONS: Obj = {
    "description": "MatchConditions is a list of conditions that must be met for a request to be sent to this "
    "webhook. Match conditions filter requests that have already been matched by the rules, "
    "namespaceSelector, and objectSelector. An empty list of matchConditions matches all requests.",
    "type": "array",
    "items": {"$ref": "#/definitions/" + _ADM + "MatchCondition"},
    "x-kubernetes-list-map-keys": ["name"],
    "x-kubernetes-list-type": "map",
    "x-kubernetes-patch-merge-key": "name",
    "x-kubernetes-patch-strategy": "merge",
}


def _with_later_fields(definitions: Obj) -> Obj:
    out = {**definitions, **_LATER}
    for webhook in ("MutatingWebhook", "ValidatingWebhook"):
        name = _ADM + webhook
        out[name] = {
            **out[name],
            "properties": {**out[name]["properties"], "matchConditions": _MATCH_CONDITIONS},
        }
    return out


def subset(doc: Obj) -> Obj:
    """The served paths and every definition they reach (transitively)."""
    served = _served()
    paths = {p: item for p, item in doc["paths"].items() if _path_served(p, served)}
    wanted, todo = set[str](), list(_refs(paths))
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo.extend(_refs(doc["definitions"][name]))
    return {
        "swagger": doc["swagger"],
        "info": {"title": "Kubernetes", "version": "v1.20.2"},
        "paths": dict(sorted(paths.items())),
        "definitions": dict(sorted(_with_later_fields({n: doc["definitions"][n] for n in wanted}).items())),
        "securityDefinitions": doc["securityDefinitions"],
        "security": doc["security"],
    }


def unserved(doc: Obj) -> list[str]:
    """``group/version/plural[/subresource]`` of every 1.20 resource the double does not serve, so
    it can refuse them by name instead of with a bare 404."""
    served = _served()
    out: set[str] = set()
    for path in doc["paths"]:
        m = _PATH.match(path)
        if m is None or "/watch/" in path or _path_served(path, served):
            continue
        rest = [s for s in m["rest"].split("/") if s]
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[1] == "{namespace}":
            rest = rest[2:]
        if not rest or rest[0].startswith("{"):
            continue
        sub = rest[2] if len(rest) >= 3 and rest[1] == "{name}" else ""
        out.add("/".join([m["g"] or "", m["v"] or m["cv"], rest[0]] + ([sub] if sub else [])))
    return sorted(out)


def render(source: Path = SOURCE) -> str:
    return json.dumps(subset(json.loads(source.read_text())), indent=1, sort_keys=True) + "\n"


def render_unserved(source: Path = SOURCE) -> str:
    return json.dumps(unserved(json.loads(source.read_text())), indent=0) + "\n"


def main() -> int:
    if not SOURCE.exists():
        print(f"no Kubernetes 1.20.2 source at {SOURCE}: run scripts/control-plane build", file=sys.stderr)
        return 2
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(render())
    UNSERVED.write_text(render_unserved())
    print(f"wrote {TARGET} and {UNSERVED}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
