"""Kubernetes' OpenAPI schemas (kubernetes-validate's strict files), compiled once per kind.

``kubernetes_validate.validate`` re-reads and re-parses its multi-megabyte definitions file on
every call: seconds per rendered chart, and two thirds of a hypothesis property that validates
every example. The same schema lookup, with the validator kept per (version, apiVersion, kind).
"""

from __future__ import annotations

import gzip
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]  # kubernetes-validate ships no type information
from kubernetes_validate.utils import schema_contents  # type: ignore[import-untyped]  # kubernetes-validate ships no type information
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

__all__ = ["VENDORED", "kube_validate", "vendored_minors"]


# Schemas of minors the installed kubernetes-validate does not ship (1.21-1.24: README there).
VENDORED = Path(__file__).parent / "data" / "kube-schemas"


def vendored_minors() -> set[int]:
    """The minors whose strict schemas are kept in tests/data/kube-schemas."""
    found = (re.fullmatch(r"v1\.(\d+)\.0-local-strict", p.name) for p in VENDORED.iterdir())
    return {int(m[1]) for m in found if m}


def _vendored_validator(version: str, kind_file: str) -> jsonschema.protocols.Validator:
    """kubernetes-validate's older format (draft 7, ``_definitions.json#/definitions/...``)."""
    base = VENDORED / f"v{version}-local-strict"
    try:
        schema = json.loads((base / kind_file).read_text("utf-8"))
    except FileNotFoundError as e:
        raise kubernetes_validate.SchemaNotFoundError(kind=kind_file, version=version, api_version="") from e
    with gzip.open(base / "_definitions.json.gz", "rt", encoding="utf-8") as f:
        definitions = json.load(f)
    registry: Registry[Any] = Registry().with_resource(
        "_definitions.json", DRAFT7.create_resource(definitions)
    )
    return jsonschema.Draft7Validator(schema, registry=registry)


@cache
def _validator(version: str, api_version: str, kind: str) -> jsonschema.protocols.Validator:
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    kind_file = f"{kind.lower()}-{group_version}.json"
    if (VENDORED / f"v{version}-local-strict").is_dir():
        return _vendored_validator(version, kind_file)
    schema_dir = f"kubernetes-json-schema/v{version}-local-strict"
    try:
        schema = schema_contents(f"{schema_dir}/{kind_file}", version)
    except FileNotFoundError as e:
        raise kubernetes_validate.SchemaNotFoundError(
            kind=kind, version=version, api_version=api_version
        ) from e
    definitions = schema_contents(f"{schema_dir}/_definitions.json", version)
    registry: Registry[Any] = Resource.from_contents(definitions) @ (
        Resource.from_contents(schema) @ Registry()
    )
    return jsonschema.Draft202012Validator(schema, registry=registry)


def kube_validate(obj: dict[str, Any], version: str) -> None:
    """Validate like ``kubernetes_validate.validate(obj, version, strict=True)`` for a version the
    library ships (``1.34.0``); raises ``jsonschema.ValidationError``."""
    _validator(version, obj["apiVersion"], obj["kind"]).validate(obj)
