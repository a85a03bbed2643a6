"""YAML the CLI prints: plain, with no anchors or aliases.

PyYAML writes an object met twice in one document as ``&id001`` and then ``*id001``; a report that
reuses one scope or reference dict would print those, which a reader cannot follow and some tools
refuse. Every value is written out where it appears.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

__all__ = ["dump_yaml", "dump_yaml_all"]


class _PlainDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_PlainDumper, sort_keys=False)


def dump_yaml_all(documents: Iterable[Any]) -> str:
    return yaml.dump_all(documents, Dumper=_PlainDumper, sort_keys=False)
