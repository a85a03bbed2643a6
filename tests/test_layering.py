"""The layering is a test, not a wish: import-linter's contracts must hold (see .importlinter)."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import ClassVar

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
    assert _circles(grimp.build_graph("vgpu_guard", cache_dir=None)) == []


def test_a_circle_is_found() -> None:
    """The finder itself: two modules importing each other are one circle."""

    class Graph:
        modules = frozenset({"a", "b", "c"})

        def find_modules_directly_imported_by(self, module: str) -> set[str]:
            return {"a": {"b"}, "b": {"a", "c"}, "c": set()}[module]

    assert _circles(Graph()) == [["a", "b"]]  # type: ignore[arg-type]


# -- every product module is the product's: reachable from where the product starts -------------
SHELLS = ("vgpu_guard.webhook", "vgpu_guard.controller")  # the top-level shells (design card)


def _entry_points() -> set[str]:
    """Where the product starts: the console scripts of pyproject.toml, every ``python -m`` module
    (a ``__main__`` guard, or a package's ``__main__.py``) and the shells' packages."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    found = {target.split(":")[0] for target in scripts.values()}
    for path in (ROOT / "vgpu_guard").resolve().rglob("*.py"):
        rel = path.relative_to((ROOT / "vgpu_guard").resolve()).with_suffix("")
        name = ".".join(("vgpu_guard", *rel.parts)).removesuffix(".__init__")
        tree = ast.parse(path.read_text("utf-8"))
        guarded = any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body)
        if guarded or rel.name == "__main__":
            found.add(name)
    return found | set(SHELLS)


def _dynamic_imports() -> dict[str, set[str]]:
    """Imports grimp cannot see: ``vgpu-guard`` loads each subcommand's module by name."""
    from vgpu_guard.cli import app

    return {"vgpu_guard.cli.app": {f"vgpu_guard.cli.{name}" for name in app._COMMANDS}}


def _not_reached(
    graph: grimp.ImportGraph, package: str, roots: set[str], dynamic: dict[str, set[str]]
) -> list[str]:
    """The modules of ``package`` no chain of imports reaches from ``roots`` (importing ``a.b.c``
    runs ``a`` and ``a.b`` too): what only tests, or nothing, import."""
    missing = sorted(r for r in roots if r not in graph.modules)
    assert not missing, f"entry points that are not modules: {missing}"
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += graph.find_modules_directly_imported_by(module)
        todo += dynamic.get(module, ())
    return sorted(m for m in graph.modules if m.split(".")[0] == package and m not in seen)


def _product_graph() -> grimp.ImportGraph:
    """vgpu_guard and the tests, run-time imports only (an import under TYPE_CHECKING loads nothing)."""
    # No on-disk cache (cache_dir=None): grimp's .grimp_cache shares metadata between graphs built
    # with other options and answered a stale graph (a new module "reached only by tests"); uncached
    # the graph takes 0.1 s.
    return grimp.build_graph("vgpu_guard", "tests", exclude_type_checking_imports=True, cache_dir=None)


def test_no_product_module_is_imported_only_by_tests() -> None:
    """Issue 45: every module of vgpu_guard is reached from an entry point; one only the tests reach
    is test code in the product (it belongs under tests/, as tests/apidouble_support/ does)."""
    graph = _product_graph()
    orphans = _not_reached(graph, "vgpu_guard", _entry_points(), _dynamic_imports())
    who = {
        m: sorted(i for i in graph.find_modules_that_directly_import(m) if i.startswith("tests."))
        for m in orphans
    }
    assert orphans == [], f"product modules no entry point reaches (module: the tests importing it): {who}"


def test_the_entry_points_are_the_products() -> None:
    assert {"vgpu_guard.cli.main", "vgpu_guard.controlplane.__main__", *SHELLS} <= _entry_points()
    assert "vgpu_guard.cli.sandbox" in _dynamic_imports()["vgpu_guard.cli.app"]


def test_a_module_only_tests_import_is_found() -> None:
    """The finder itself, on a graph made up for it: a module only a test imports is reported, a
    subcommand loaded by name is not, and neither is a package whose submodule is imported."""

    class Graph:
        imports: ClassVar[dict[str, set[str]]] = {
            "pkg.cli.main": {"pkg.cli.app"},
            "pkg.cli.app": set(),
            "pkg.cli.review": {"pkg.core.rules"},
            "pkg.core.rules": set(),
            "pkg.core.fakes": {"pkg.core.rules"},
            "pkg.core": set(),
            "pkg.cli": set(),
            "pkg": set(),
            "tests.test_rules": {"pkg.core.fakes", "pkg.core.rules"},
        }
        modules = frozenset(imports)

        def find_modules_directly_imported_by(self, module: str) -> set[str]:
            return self.imports[module]

    found = _not_reached(Graph(), "pkg", {"pkg.cli.main"}, {"pkg.cli.app": {"pkg.cli.review"}})  # type: ignore[arg-type]
    assert found == ["pkg.core.fakes"]
    assert _not_reached(Graph(), "pkg", {"pkg.cli.main"}, {}) == [  # type: ignore[arg-type]
        "pkg.cli.review",
        "pkg.core",
        "pkg.core.fakes",
        "pkg.core.rules",
    ]


def test_the_real_graph_would_show_a_module_the_product_stopped_importing() -> None:
    """A regression, made on the real graph: were ``simulate`` to stop running the double in
    process, the double's client would be imported by tests only, and the test would name it."""
    graph = _product_graph()
    client = "vgpu_guard.apidouble.client"
    for importer in graph.find_modules_that_directly_import(client):
        if importer.startswith("vgpu_guard."):
            graph.remove_import(importer=importer, imported=client)
    orphans = _not_reached(graph, "vgpu_guard", _entry_points(), _dynamic_imports())
    assert client in orphans
