"""Kubernetes' OpenAPI schemas (kubernetes-validate's strict files), compiled once per kind.

``kubernetes_validate.validate`` re-reads and re-parses its multi-megabyte definitions file on
every call: seconds per rendered chart, and two thirds of a hypothesis property that validates
every example. The same schema lookup, with the validator kept per (version, apiVersion, kind).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]  # kubernetes-validate ships no type information
from kubernetes_validate.utils import schema_contents  # type: ignore[import-untyped]  # kubernetes-validate ships no type information
from referencing import Registry, Resource

__all__ = ["kube_validate"]


@cache
def _validator(version: str, api_version: str, kind: str) -> jsonschema.protocols.Validator:
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema_dir = f"kubernetes-json-schema/v{version}-local-strict"
    try:
        schema = schema_contents(f"{schema_dir}/{kind.lower()}-{group_version}.json", version)
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
