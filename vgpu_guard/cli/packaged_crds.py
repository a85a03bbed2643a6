"""The CRDs shipped in the package (``vgpu_guard/data/crds``: ours and Volcano's), as the in-memory
clusters of ``simulate`` and ``sandbox`` serve them.

Parsed once a process with libyaml's parser where PyYAML has it: Python's own parser took ~0.3 s
of every simulation on Volcano's Job CRD alone. Each caller gets its own deep copy, since a store
keeps and changes what it is given.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from importlib import resources

import yaml

from vgpu_guard.engine.objects import Obj

__all__ = ["packaged_crd", "packaged_crds"]

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _parsed(path: str) -> Obj:
    parsed: Obj = yaml.load(resources.files("vgpu_guard").joinpath(path).read_text("utf-8"), Loader=_LOADER)
    return parsed


def packaged_crd(path: str) -> Obj:
    """The CRD at ``path`` inside the package (e.g. ``data/crds/volcano/batch.volcano.sh_jobs.yaml``)."""
    return copy.deepcopy(_parsed(path))


def packaged_crds() -> Iterator[Obj]:
    """Every packaged CRD: ours, then Volcano's, each folder in name order."""
    root = resources.files("vgpu_guard") / "data" / "crds"
    for sub, prefix in ((root, "data/crds"), (root / "volcano", "data/crds/volcano")):
        for entry in sorted(sub.iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".yaml"):
                yield packaged_crd(f"{prefix}/{entry.name}")
