"""Scenarios for ``simulate``: multi-document YAML files of Kubernetes objects, or the built-in one.

A scenario is read like ``kubectl apply -f``: every file, every document, in order. Which of its
objects already exist and which are created through admission is decided by ``simulation`` (see
``is_cluster_state``); this module only reads and names them, so an unreadable file is reported
with the file and the document, exactly as ``review`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from vgpu_guard.cli.documents import Document, read_documents

__all__ = ["DEFAULT_SCENARIO", "Scenario", "default_scenario", "load_scenario"]

# Package data (pyproject's data/**/*.yaml glob ships it); `vgpu-guard simulate` with no -f.
DEFAULT_SCENARIO = "data/scenarios/default.yaml"


@dataclass(frozen=True)
class Scenario:
    """The objects to simulate, in order, and a name for the report (files, or the built-in one)."""

    source: str
    documents: tuple[Document, ...]


def default_scenario() -> Scenario:
    """The embedded scenario that tells the seeds' stories in one run."""
    path = resources.files("vgpu_guard").joinpath(DEFAULT_SCENARIO)
    with resources.as_file(path) as real:
        documents = read_documents(str(real))
    # Sources read "default.yaml#3", not a site-packages path that differs per install.
    named = tuple(Document(f"default.yaml#{d.source.rpartition('#')[2]}", d.object) for d in documents)
    return Scenario(source="built-in default scenario", documents=named)


def load_scenario(paths: Sequence[str]) -> Scenario:
    """All objects of the files, in order; raises ``InputError`` naming the file and the document."""
    documents = tuple(d for path in paths for d in read_documents(path))
    return Scenario(source=", ".join(paths), documents=documents)
