"""The layering is a test, not a wish: import-linter's contracts must hold (see .importlinter)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--config", str(ROOT / ".importlinter")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert " kept, 0 broken." in result.stdout


def _circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_the_import_graph_has_no_circle() -> None:
    """Issue 45: every module imports only what is below it, type-checking imports included (the
    last circle, the double's table and its watches, went with the Watcher protocol)."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    assert _circles(grimp.build_graph("vgpu_guard")) == []


def test_a_circle_is_found() -> None:
    """The finder itself: two modules importing each other are one circle."""

    class Graph:
        modules = frozenset({"a", "b", "c"})

        def find_modules_directly_imported_by(self, module: str) -> set[str]:
            return {"a": {"b"}, "b": {"a", "c"}, "c": set()}[module]

    assert _circles(Graph()) == [["a", "b"]]  # type: ignore[arg-type]
