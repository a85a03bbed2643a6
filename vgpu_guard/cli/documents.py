"""Reading Kubernetes objects from YAML files, with errors that name the file and the document."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["Document", "InputError", "read_documents"]


class InputError(Exception):
    """Raised when an input file cannot be read or holds something that is not a Kubernetes object."""


@dataclass(frozen=True, slots=True)
class Document:
    """One object and where it came from (``file#index``, counting documents from 1)."""

    source: str
    object: dict[str, Any]


def _objects(data: Any, where: str) -> Iterator[dict[str, Any]]:
    if data is None:
        return
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a Kubernetes object (a mapping), got {type(data).__name__}")
    if data.get("kind") == "List" or (str(data.get("kind", "")).endswith("List") and "items" in data):
        for index, item in enumerate(data.get("items") or []):
            yield from _objects(item, f"{where} items[{index}]")
        return
    if not isinstance(data.get("kind"), str) or not isinstance(data.get("apiVersion"), str):
        raise InputError(f"{where}: missing apiVersion or kind")
    yield data


def read_documents(path: str) -> list[Document]:
    """All objects of a multi-document YAML file (``-`` reads standard input)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text: {e}") from e
    out: list[Document] = []
    try:
        for index, data in enumerate(yaml.safe_load_all(text), start=1):
            out.extend(Document(f"{path}#{index}", obj) for obj in _objects(data, f"{path} document {index}"))
    except yaml.YAMLError as e:
        raise InputError(f"{path}: not valid YAML: {e}") from e
    return out
