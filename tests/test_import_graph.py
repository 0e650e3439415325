"""gpugauge's import graph has no cycle: a layer reaches up only through a declared interface.

Every import counts, at module level, inside a function or under ``TYPE_CHECKING``: each one
is an arrow a reader follows, and a circle means no module in it can be read, tested or
moved without the others. The graph is read from the source with :mod:`ast`, importing
nothing.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "gpugauge"


def package_dirs(root: Path) -> dict[str, Path]:
    """Each package by the folder its files come from: ``gpugauge`` from ``gpugauge/``,
    and what ``pyproject.toml``'s ``package-dir`` maps elsewhere (the top-level models/)."""
    project = root / "pyproject.toml"
    data = tomllib.loads(project.read_text()) if project.exists() else {}
    mapped = data.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    return {PACKAGE: root / PACKAGE, **{name: root / folder for name, folder in mapped.items()}}


def modules(root: Path) -> dict[str, Path]:
    """Every module of the package under ``root``, by dotted name (a package by its own).

    A mapped package's modules come from its folder, as the wheel's do, not from the
    checkout's pointer in its place.
    """
    out = {}
    dirs = package_dirs(root)
    for package, folder in dirs.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [*package.split("."), *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join(parts)
            if package == PACKAGE and any(
                name == m or name.startswith(m + ".") for m in dirs if m != PACKAGE
            ):
                continue  # the pointer to a mapped package's folder
            out[name] = path
    return out


def _known(name: str, names: Mapping[str, Path]) -> str | None:
    """The deepest module of ours that ``name`` is or lies in; None for another package's."""
    while name and name not in names:
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str, path: Path, names: Mapping[str, Path]) -> set[str]:
    """The modules of ours that ``name`` imports, wherever in the file the import stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {m for a in node.names if (m := _known(a.name, names))}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            for a in node.names:
                sub = f"{base}.{a.name}"  # `from pkg import module` imports the module
                m = sub if sub in names else _known(base, names)
                if m:
                    out.add(m)
    out.discard(name)
    return out


def graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports."""
    names = modules(root)
    return {name: imports(name, path, names) for name, path in names.items()}


def circles(edges: Mapping[str, set[str]]) -> list[set[str]]:
    """The strongly connected groups of more than one module: each is one circle of imports.

    Tarjan's algorithm, iterative (a deep package must not hit the recursion limit).
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, todo = work[-1]
            w = next(todo, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    group.add(w)
                    if w == v:
                        break
                if len(group) > 1:
                    groups.append(group)
    return groups


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle through each circle, as a path that closes."""
    return [loop(group, edges) for group in circles(edges)]


def loop(group: set[str], edges: Mapping[str, set[str]]) -> list[str]:
    """The shortest cycle through the group's first module (breadth-first, within the group)."""
    first = min(group)
    came: dict[str, str] = {}
    frontier = [first]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges[v] & group):
                if w == first:
                    path = [v]
                    while path[-1] != first:
                        path.append(came[path[-1]])
                    return [first, *reversed(path[:-1]), first]
                if w not in came:
                    came[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {first}")  # a strongly connected group has one


def test_gpugauge_imports_form_no_cycle() -> None:
    edges = graph(ROOT)
    found = circles(edges)
    assert not found, "import cycles in gpugauge:\n" + "\n".join(
        f"{' -> '.join(loop(group, edges))}\n  (one circle of {len(group)} modules: "
        f"{', '.join(sorted(group))})"
        for group in found
    )


def packages(edges: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """The graph one level up: each sub-package (``gpugauge.history``) and each loose module
    at the top (``gpugauge.family``) is one node, with an arrow where any module of one
    imports any of the other's."""

    def unit(name: str) -> str:
        return ".".join(name.split(".")[:2])

    out: dict[str, set[str]] = {}
    for name, targets in edges.items():
        out.setdefault(unit(name), set()).update(unit(t) for t in targets)
    for name, targets in out.items():
        targets.discard(name)
    return out


def test_gpugauge_packages_form_no_cycle() -> None:
    """Issue 50: no module cycle, yet history, judging, measure, options, regress and results
    reached each other in a circle through one constant, one string and a validator; a
    package is read, tested and moved as one, so its arrows must not circle either."""
    edges = packages(graph(ROOT))
    found = circles(edges)
    assert not found, "package cycles in gpugauge:\n" + "\n".join(
        " -> ".join(loop(group, edges)) for group in found
    )


def test_a_function_level_import_closes_a_cycle(tmp_path: Path) -> None:
    """The checker itself: an import inside a function, or relative, is an arrow too."""
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from gpugauge.sub import high\n")
    (pkg / "sub" / "high.py").write_text("from .. import low\n")
    (pkg / "ok.py").write_text("import os\nfrom gpugauge import low\n")
    assert cycles(graph(tmp_path)) == [["gpugauge.low", "gpugauge.sub.high", "gpugauge.low"]]
    (pkg / "low.py").write_text("import json\n")  # the arrow back removed
    assert cycles(graph(tmp_path)) == []


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c", "a"]]),
        ({"a": {"b", "c"}, "b": {"a"}, "c": {"b"}}, [["a", "b", "a"]]),
        ({"a": {"b"}, "b": set()}, []),
    ],
)
def test_cycles_names_the_shortest_loop(edges: dict[str, set[str]], expected: list) -> None:
    assert cycles(edges) == expected


def test_the_models_sit_at_the_top_and_are_imported_as_gpugauge_models() -> None:
    """models/ is the layout card's top-level folder, shipped in the wheel as gpugauge.models.

    Nothing imports it by its bare name: a module reachable under two names is two copies.
    """
    assert package_dirs(ROOT)["gpugauge.models"] == ROOT / "models"
    assert (ROOT / "models" / "vgg.py").exists()
    assert sorted(p.name for p in (ROOT / PACKAGE / "models").glob("*.py")) == ["__init__.py"]
    bare = []
    for folder in ("benches", PACKAGE, "models", "tests", "experiments"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and not node.level:
                    names = [node.module or ""]
                if any(n == "models" or n.startswith("models.") for n in names):
                    bare.append(str(path.relative_to(ROOT)))
    assert bare == []
    # a plain checkout, nothing installed: the package points at the top-level folder
    found = subprocess.run(
        [sys.executable, "-S", "-c", "import gpugauge.models as m; print(m.__path__[0])"],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert found.stdout.strip() == str(ROOT / "models"), found.stderr
