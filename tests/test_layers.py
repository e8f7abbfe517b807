"""The house: every module's imports, read with ``ast`` (inside functions and ``TYPE_CHECKING`` blocks too), form no
cycle, and each package imports only the layers below it.

``LAYERS`` is the one statement of the order, bottom first; packages in one
layer do not import each other. Each layer package's docstring says, on its
``Imports:`` lines, exactly which of kvscope's packages it imports, and is
checked against what it does import. The checker itself is tried on small
trees with a cycle and with an upward import, so that it is known to fail.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest
from live_servers import ROOT

# Bottom first. A module may import its own package and the packages of lower layers, never a higher one.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("sim.bounds", "sim.numeric"),
    ("sim.blocks", "sim.costs", "sim.traces"),
    ("sim.tiers", "sim.kvevents"),
    ("sim.workloads",),
    ("sim.engine",),
    ("sim.explain",),
    ("sim.simulation",),
    ("sim.sched",),
    ("sim.fleet",),
    ("sim.calibration",),
    ("sim.analysis",),
    ("sim.advise",),
    ("sim",),  # the package's lazy exports (importlib by name: no static import)
    ("app.budgets", "app.costs_profile", "app.scenario_input"),  # what every surface reads: budgets, profiles, inputs
    ("app.emulator", "app.live"),
    ("app.proxy",),
    ("app.runs",),
    ("app.web",),
    ("app.cli",),
    ("app",),
)


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Dotted module name -> file, for every module below ``root/<package>``."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ``files`` it imports anywhere in its text (a package counts as its ``__init__``)."""

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name`` imports mod.
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            targets.update(t for t in map(known, names) if t is not None and t != module)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def package_of(module: str, layers: Sequence[Sequence[str]]) -> str:
    """The layer package a module belongs to: the longest listed name that is it or a prefix of it."""
    names = [p for layer in layers for p in layer if module == p or module.startswith(p + ".")]
    if not names:
        raise AssertionError(f"{module} belongs to no layer: add its package to LAYERS")
    return max(names, key=len)


def upward_imports(graph: dict[str, set[str]], layers: Sequence[Sequence[str]]) -> list[str]:
    """Each import of a package in the same or a higher layer than the importer's (its own package aside)."""
    rank = {p: i for i, layer in enumerate(layers) for p in layer}
    wrong = []
    for module, targets in sorted(graph.items()):
        mine = package_of(module, layers)
        for target in sorted(targets):
            theirs = package_of(target, layers)
            if theirs != mine and rank[theirs] >= rank[mine]:
                wrong.append(f"{module} imports {target} ({theirs} is not below {mine})")
    return wrong


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(module_files(ROOT, ("sim", "app")))


def test_no_import_cycle_in_sim_or_app(graph: dict[str, set[str]]) -> None:
    assert cycles(graph) == []


def test_every_import_goes_down_the_layers(graph: dict[str, set[str]]) -> None:
    assert upward_imports(graph, LAYERS) == []


def test_sim_imports_nothing_of_app_nor_the_web(graph: dict[str, set[str]]) -> None:
    files = module_files(ROOT, ("sim",))
    web = re.compile(r"^\s*(from|import)\s+(app|fastapi|starlette|uvicorn|httpx|jinja2)\b", re.M)
    assert [m for m, p in files.items() if web.search(p.read_text())] == []


@pytest.mark.parametrize(
    "package", [p for layer in LAYERS for p in layer if (ROOT / p.replace(".", "/") / "__init__.py").is_file() and "." in p]
)
def test_each_package_docstring_names_what_it_imports(graph: dict[str, set[str]], package: str) -> None:
    doc = ast.get_docstring(ast.parse((ROOT / package.replace(".", "/") / "__init__.py").read_text())) or ""
    assert "Imports:" in doc and "Exports:" in doc, f"{package}'s docstring lacks its Imports: and Exports: lines"
    said_text = doc[doc.index("Imports:") : doc.index("Exports:")]
    said = set(re.findall(r"\b(?:sim|app)\.\w+", said_text))
    done = {
        package_of(t, LAYERS)
        for m, targets in graph.items()
        if package_of(m, LAYERS) == package
        for t in targets
        if package_of(t, LAYERS) != package
    }
    assert said == done, f"{package} says it imports {sorted(said)}; it imports {sorted(done)}"


# -- the checker fails where it should ---------------------------------------------------------------


def _tree(tmp_path: Path, modules: dict[str, str]) -> dict[str, set[str]]:
    for name, text in modules.items():
        path = tmp_path / (name.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph(module_files(tmp_path, ("sim",)))


TOY_LAYERS = (("sim.low",), ("sim.high",), ("sim",))


def test_a_lazy_import_that_closes_a_cycle_is_a_cycle(tmp_path: Path) -> None:
    graph = _tree(tmp_path, {
        "sim.__init__": "",
        "sim.low.__init__": "",
        "sim.low.a": "from sim.low.b import x\n",
        # inside a function, as the cost model's fit once was: still a cycle
        "sim.low.b": "def f():\n    from sim.low import a\n    return a\nx = 1\n",
    })
    assert cycles(graph) == [["sim.low.a", "sim.low.b"]]


def test_an_import_of_a_higher_layer_is_refused(tmp_path: Path) -> None:
    graph = _tree(tmp_path, {
        "sim.__init__": "",
        "sim.low.__init__": "",
        "sim.high.__init__": "",
        "sim.high.top": "from sim.low.base import y\n",
        "sim.low.base": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sim.high.top import T\ny = 1\n",
    })
    assert upward_imports(graph, TOY_LAYERS) == ["sim.low.base imports sim.high.top (sim.high is not below sim.low)"]
    assert cycles(graph) == [["sim.high.top", "sim.low.base"]]


def test_relative_imports_are_resolved(tmp_path: Path) -> None:
    graph = _tree(tmp_path, {
        "sim.__init__": "",
        "sim.low.__init__": "from . import a\n",
        "sim.low.a": "from .b import x\n",
        "sim.low.b": "x = 1\n",
    })
    assert graph["sim.low"] == {"sim.low.a"} and graph["sim.low.a"] == {"sim.low.b"}
