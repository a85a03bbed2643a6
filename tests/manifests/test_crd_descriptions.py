"""Our CRDs describe every field, so ``kubectl explain gpuledger.spec`` (and every level below it,
and GangPlacement's) says what a field is instead of ``<empty>``; the package's copies are the same
files."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CRDS = sorted((ROOT / "manifests" / "crds").glob("*.yaml"))
# Filled in by the API server's object metadata, not ours to describe.
_STANDARD = {"apiVersion", "kind", "metadata"}


def _undescribed(schema: Mapping[str, Any], path: str) -> Iterator[str]:
    if not str(schema.get("description", "")).strip():
        yield path
    for name, child in schema.get("properties", {}).items():
        if not (path == "" and name in _STANDARD):
            yield from _undescribed(child, f"{path}.{name}")
    if "items" in schema:
        yield from _undescribed(schema["items"], f"{path}[]")


@pytest.mark.parametrize("path", CRDS, ids=lambda p: p.name)
def test_every_field_has_a_description(path: Path) -> None:
    crd = yaml.safe_load(path.read_text())
    missing = [
        f"{version['name']}: {field or '(root)'}"
        for version in crd["spec"]["versions"]
        for field in _undescribed(version["schema"]["openAPIV3Schema"], "")
    ]
    assert missing == []


@pytest.mark.parametrize("path", CRDS, ids=lambda p: p.name)
def test_the_package_ships_the_same_crd(path: Path) -> None:
    assert (ROOT / "vgpu_guard" / "data" / "crds" / path.name).read_bytes() == path.read_bytes()
