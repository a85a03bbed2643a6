"""Small builders for the objects the double's tests create."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from vgpu_guard.kube.resources import Resource

Obj = dict[str, Any]
WIDGETS = Resource("example.com", "v1", "widgets", "Widget", namespaced=True)


def pod(name: str, *, namespace: str = "default", labels: dict[str, str] | None = None, **spec: Any) -> Obj:
    container: Obj = {"name": "main", "image": "busybox"}
    if "resources" in spec:
        container["resources"] = spec.pop("resources")
    meta: Obj = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container], **spec}}


def node(name: str, *, labels: dict[str, str] | None = None, unschedulable: bool = False) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"unschedulable": unschedulable},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def volcano_crd(name: str) -> Obj:
    """One of the Volcano CRDs shipped as package data (e.g. ``scheduling.volcano.sh_queues``)."""
    text = resources.files("vgpu_guard").joinpath(f"data/crds/volcano/{name}.yaml").read_text()
    crd: Obj = yaml.safe_load(text)
    return crd


def widget_crd(*, status: bool = True, versions: tuple[str, ...] = ("v1",), served_old: bool = False) -> Obj:
    """A small CRD exercising every schema feature the double implements."""
    schema: Obj = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["size"],
                "properties": {
                    "size": {"type": "integer", "minimum": 1, "maximum": 10},
                    "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                    "port": {"x-kubernetes-int-or-string": True},
                    "name": {"type": "string", "pattern": "^[a-z]+$"},
                    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "limits": {"type": "object", "additionalProperties": {"type": "integer"}},
                },
            },
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
        },
    }
    vers = []
    for i, v in enumerate(versions):
        entry: Obj = {"name": v, "served": True, "storage": i == 0, "schema": {"openAPIV3Schema": schema}}
        if status:
            entry["subresources"] = {"status": {}}
        vers.append(entry)
    if served_old:
        vers.append({"name": "v0", "served": False, "storage": False, "schema": {"openAPIV3Schema": schema}})
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": vers,
        },
    }


def widget(name: str, *, namespace: str = "default", **spec: Any) -> Obj:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"size": 1, **spec},
    }
