"""Reading Kubernetes objects from YAML files, with errors that name the file and the document.

The one reader of ``review`` and ``simulate``: ``-f`` takes files, directories (``-R`` for their
subdirectories, like kubectl) and ``-`` for standard input. Input is bounded, because these
commands run in CI on files nobody vetted: a size cap and a document count (flags), a small number
of YAML aliases (an alias bomb expands a few lines into gigabytes) and a nesting depth (the YAML
composer recurses). Every failure is one ``InputError`` line naming the file; never a traceback.

Exceptions::

    InputError      a file cannot be read, is over a limit, or holds something not an object
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vgpu_guard.cli.argtypes import positive_int

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_ALIASES",
    "MAX_DEPTH",
    "MAX_EXPANDED",
    "STDIN_NAME",
    "Document",
    "InputError",
    "Limits",
    "add_input_arguments",
    "expand_paths",
    "limits_from",
    "parse_documents",
    "read_documents",
    "read_each",
    "read_files",
    "read_inputs",
    "warn_about",
]

# Aliases a file may use, and how deep its collections may nest: Kubernetes objects need neither
# many aliases nor more than a few dozen levels; anything beyond is refused before it is built.
MAX_ALIASES = 100
MAX_DEPTH = 100
# Values a document may hold once its aliases are expanded: a shared subtree is built once but
# every consumer (a deep copy, a JSON dump) walks it per alias; nine rows of nine aliases is 9**9.
MAX_EXPANDED = 1_000_000
# How standard input is named in sources ("stdin#2"), where a path would be.
STDIN_NAME = "stdin"
_SUFFIXES = (".yaml", ".yml", ".json")


class InputError(Exception):
    """Raised when an input file cannot be read, exceeds a limit, or holds no Kubernetes object."""


@dataclass(frozen=True, slots=True)
class Document:
    """One object and where it came from (``file#index``, counting documents from 1), and what its
    YAML did that the reader let through but the user should hear of (``warn_about``)."""

    source: str
    object: dict[str, Any]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-file bounds: bytes read and YAML documents."""

    max_bytes: int = 16 * 1024 * 1024
    max_documents: int = 10_000


DEFAULT_LIMITS = Limits()


def add_input_arguments(parser: argparse.ArgumentParser, *, metavar: str, what: str, required: bool) -> None:
    """``-f``, ``-R``, ``--max-bytes`` and ``--max-documents``, the same on both commands."""
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=required,
        metavar=metavar,
        help=f"{what}: a file, a directory of .yaml/.yml/.json files, or - for stdin (repeatable)",
    )
    parser.add_argument(
        "-R", "--recursive", action="store_true", help="read the directories given with -f recursively"
    )
    parser.add_argument(
        "--max-bytes",
        type=positive_int,
        default=DEFAULT_LIMITS.max_bytes,
        metavar="N",
        help=f"refuse an input file larger than N bytes (default: {DEFAULT_LIMITS.max_bytes})",
    )
    parser.add_argument(
        "--max-documents",
        type=positive_int,
        default=DEFAULT_LIMITS.max_documents,
        metavar="N",
        help=f"refuse an input file of more than N YAML documents (default: {DEFAULT_LIMITS.max_documents})",
    )


def limits_from(args: argparse.Namespace) -> Limits:
    return Limits(max_bytes=args.max_bytes, max_documents=args.max_documents)


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses too many aliases and too deep nesting while composing."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.aliases = 0
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise InputError(
                    f"line {mark.line + 1}: more than {MAX_ALIASES} YAML aliases (*name); "
                    "write the values out (aliases can expand a small file into gigabytes)"
                )
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise InputError(
                    f"line {mark.line + 1}: nested deeper than {MAX_DEPTH} levels; "
                    "a Kubernetes object is far shallower"
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _expanded(node: yaml.Node, memo: dict[int, int]) -> int:
    # Count values as if every alias were written out; memo keeps the count linear in the graph.
    if id(node) in memo:
        return memo[id(node)]
    total = 1
    if isinstance(node, yaml.SequenceNode):
        total += sum(_expanded(child, memo) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        total += sum(_expanded(k, memo) + _expanded(v, memo) for k, v in node.value)
    memo[id(node)] = total
    return total


def _repeated_keys(node: yaml.Node) -> list[str]:
    """Each key given twice in one mapping, with both lines. YAML forbids it, yet kubectl (1.32,
    against kube-apiserver 1.20) applies such a file with the last value, as PyYAML reads it; so it
    is reviewed as applied, and said, since the first value usually is the one that was meant (two
    ``resources:`` blocks, the second overriding the limits above it)."""
    found: list[tuple[int, str]] = []
    stack, seen = [node], set()
    while stack:
        current = stack.pop()
        if id(current) in seen:  # an alias: its subtree is walked once
            continue
        seen.add(id(current))
        if isinstance(current, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in current.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    line = key.start_mark.line + 1
                    if key.value in first:
                        found.append((line, f'line {line}: key "{key.value}" is given twice in one '
                                            f"mapping (first on line {first[key.value]}); the last value "
                                            "is used, as kubectl applies it"))  # fmt: skip
                    else:
                        first[key.value] = line
                stack.append(value)
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
    return [text for _, text in sorted(found)]


def warn_about(documents: Iterable[Document]) -> None:
    """Each document's warnings on standard error, ``warning: source: text`` (as kubectl prints
    its warnings there: standard output stays the report, parseable in every output format)."""
    for document in documents:
        for text in document.warnings:
            print(f"warning: {document.source}: {text}", file=sys.stderr)


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
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        got = "nothing" if metadata is None else type(metadata).__name__
        raise InputError(f"{where}: {data['kind']} needs metadata with a name (a mapping), got {got}")
    for field in ("name", "generateName"):
        value = metadata.get(field)
        if value is not None and not isinstance(value, str):
            raise InputError(
                f"{where}: {data['kind']} metadata.{field} must be text, got {type(value).__name__}"
            )
    if not _text(metadata.get("name")) and not _text(metadata.get("generateName")):
        # As kubectl refuses it ("resource name may not be empty"): a review of it would be of
        # an object no API server accepts, shown as "Pod default/".
        raise InputError(f"{where}: {data['kind']} has no metadata.name (or generateName); name it")
    yield data


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _read_bytes(path: str, limit: int) -> bytes:
    if path == "-":
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:  # a text-only stdin (tests, embedding)
            return sys.stdin.read(limit + 1).encode("utf-8")
        data: bytes = stream.read(limit + 1)
        return data
    with open(path, "rb") as f:
        return f.read(limit + 1)


def _yaml_error(e: yaml.YAMLError) -> str:
    # PyYAML's str() spans lines and names `<unicode string>`; one line with our own position.
    if isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        return f"{where}{e.problem or e.context or 'invalid'}"
    return " ".join(str(e).split())


def read_documents(path: str, limits: Limits = DEFAULT_LIMITS) -> list[Document]:
    """All objects of a multi-document YAML file (``-`` reads standard input), within ``limits``."""
    name = STDIN_NAME if path == "-" else path
    try:
        raw = _read_bytes(path, limits.max_bytes)
    except OSError as e:
        raise InputError(f"{name}: cannot read: {e.strerror or e}") from e
    if len(raw) > limits.max_bytes:
        raise InputError(
            f"{name}: larger than {limits.max_bytes} bytes; split it, or raise --max-bytes if it is trusted"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{name}: not UTF-8 text (byte {e.start})") from e
    return parse_documents(text, name, limits)


def parse_documents(text: str, name: str, limits: Limits = DEFAULT_LIMITS) -> list[Document]:
    """All objects of YAML ``text``, their sources ``name#n``; the limits but the size apply."""
    out: list[Document] = []
    loader = _BoundedLoader(text)
    try:
        index = 0
        while loader.check_data():  # type: ignore[no-untyped-call]
            index += 1
            if index > limits.max_documents:
                raise InputError(
                    f"{name}: more than {limits.max_documents} YAML documents; split it, "
                    "or raise --max-documents if it is trusted"
                )
            node = loader.get_node()
            if node is not None and _expanded(node, {}) > MAX_EXPANDED:
                raise InputError(
                    f"document {index}: its aliases expand to more than {MAX_EXPANDED} values; "
                    "write the values out (aliases can expand a small file into gigabytes)"
                )
            # Before constructing: that merges ``<<`` keys into their mapping's node in place.
            repeated = _repeated_keys(node) if node is not None else []
            data = loader.construct_document(node) if node is not None else None
            found = [Document(f"{name}#{index}", obj) for obj in _objects(data, f"{name} document {index}")]
            if found and repeated:
                found[0] = Document(found[0].source, found[0].object, tuple(repeated))
            out.extend(found)
    except InputError as e:
        message = str(e)
        raise InputError(message if message.startswith(f"{name}") else f"{name}: {message}") from None
    except yaml.YAMLError as e:
        raise InputError(f"{name}: not valid YAML: {_yaml_error(e)}") from e
    except RecursionError as e:  # a belt to the depth limit's braces: never a traceback
        raise InputError(f"{name}: nested too deeply to read") from e
    finally:
        loader.dispose()
    return out


def expand_paths(paths: Sequence[str], *, recursive: bool) -> list[str]:
    """Files of ``-f`` arguments: a directory gives its .yaml/.yml/.json files in name order."""
    out: list[str] = []
    for path in paths:
        p = Path(path)
        if path == "-" or not p.is_dir():
            out.append(path)
            continue
        found = sorted(
            f for f in (p.rglob("*") if recursive else p.iterdir()) if f.suffix in _SUFFIXES and f.is_file()
        )
        if not found:
            hint = "" if recursive else " (add -R to read its subdirectories)"
            raise InputError(f"{path}: a directory with no .yaml, .yml or .json files{hint}")
        out.extend(str(f) for f in found)
    return out


def read_inputs(paths: Sequence[str], *, recursive: bool, limits: Limits = DEFAULT_LIMITS) -> list[Document]:
    """All objects of the ``-f`` arguments, in order (``read_files``)."""
    return read_files(expand_paths(paths, recursive=recursive), limits)


def read_files(files: Sequence[str], limits: Limits = DEFAULT_LIMITS) -> list[Document]:
    """All objects of ``files``, in order; none at all is an error, as for kubectl ("no objects
    passed"): an empty file reviewed as "0 allowed, 0 denied" reads like a pass."""
    return [d for _, documents in read_each(files, limits) for d in documents]


def read_each(files: Sequence[str], limits: Limits = DEFAULT_LIMITS) -> list[tuple[str, list[Document]]]:
    """Each file's name (``stdin`` for ``-``) and objects, in order; no object in any is an error
    (``read_files``), one empty file among others is not."""
    each = [(STDIN_NAME if path == "-" else path, read_documents(path, limits)) for path in files]
    if not any(documents for _, documents in each):
        names = ", ".join(name for name, _ in each)
        raise InputError(f"{names}: no Kubernetes objects (the input is empty, or only comments and ---)")
    return each
