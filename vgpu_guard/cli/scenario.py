"""Scenarios for ``simulate``: multi-document YAML files of Kubernetes objects, or the built-in one.

A scenario is read like ``kubectl apply -f``: every file, every document, in order. Which of its
objects already exist and which are created through admission is decided by ``simulation`` (see
``is_cluster_state``); this module only reads and names them, so an unreadable file is reported
with the file and the document, exactly as ``review`` does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from vgpu_guard.cli.documents import (
    DEFAULT_LIMITS,
    Document,
    InputError,
    Limits,
    expand_paths,
    parse_documents,
    read_files,
)

__all__ = ["DEFAULT_SCENARIO", "EXAMPLES_DIR", "Scenario", "default_scenario", "load_scenario"]

# Package data (pyproject's data/**/*.yaml glob ships it); `vgpu-guard simulate` with no -f.
DEFAULT_SCENARIO = "data/scenarios/default.yaml"
# Where its sections come from, in the repository (the README links them).
EXAMPLES_DIR = "examples/simulate"
# A section starts at the "---" before its "# ===== FILE =====" line.
_SECTION = re.compile(r"^---\n(?=# ===== )", re.MULTILINE)
_MARKER = re.compile(r"# ===== (\S+) =")


@dataclass(frozen=True)
class Scenario:
    """The objects to simulate, in order, and a name for the report (files, or the built-in one).

    ``cluster`` holds the objects of the cluster it runs on when that is not the scenario's own
    (``--cluster FILE``, ``--kubeconfig``, the built-in cluster): they exist before the story
    starts, so they are stored as they are, every kind, without admission.
    """

    source: str
    documents: tuple[Document, ...]
    cluster: tuple[Document, ...] = ()


def default_scenario() -> Scenario:
    """The embedded scenario that tells the examples' stories in one run.

    It is examples/simulate/*.yaml concatenated, each behind a ``# ===== FILE =====`` line; every
    object is named after the example file and document it comes from
    (``examples/simulate/overcommit.yaml#9``), a file users can open, not the package's.
    """
    text = resources.files("vgpu_guard").joinpath(DEFAULT_SCENARIO).read_text(encoding="utf-8")
    documents: list[Document] = []
    for chunk in _SECTION.split(text)[1:]:
        name = _MARKER.match(chunk)
        if name is None:  # pragma: no cover - the split keeps only chunks that start with a marker
            raise InputError(f"{DEFAULT_SCENARIO}: a section without its # ===== FILE ===== line")
        documents += parse_documents(chunk, f"{EXAMPLES_DIR}/{name.group(1)}")
    return Scenario(source="built-in default scenario", documents=tuple(documents))


def load_scenario(
    paths: Sequence[str], *, recursive: bool = False, limits: Limits = DEFAULT_LIMITS
) -> Scenario:
    """All objects of the files (directories expanded), in order; raises ``InputError`` naming the file."""
    files = expand_paths(paths, recursive=recursive)
    documents = tuple(read_files(files, limits))
    return Scenario(source=", ".join("stdin" if p == "-" else p for p in files), documents=documents)
