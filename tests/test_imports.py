"""House rules for imports, checked from the source (ast, every import at any depth, type-only
imports under `if TYPE_CHECKING:` left out):

- no import cycles among the modules of `porter`, `harness`, `targets`, `hwmodels`;
- dependencies point one way, porter -> harness -> targets -> hwmodels (DESIGN.md): no package
  imports one above it;
- no module imports another module's private (underscore) name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("porter", "harness", "targets", "hwmodels")  # top (uses all) to bottom (uses none)
LAYER = {name: i for i, name in enumerate(reversed(PACKAGES))}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _type_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(module: str, path: Path) -> list[tuple[str, str, int]]:
    """(imported module, imported name or "", line) for every runtime import in `path`."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, str, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_only(child):
                for sub in child.orelse:
                    visit(sub)
                continue
            if isinstance(child, ast.Import):
                found.extend((a.name, "", child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                for a in child.names:
                    found.append((base, a.name, child.lineno))
            visit(child)

    visit(tree)
    return found


def _target(base: str, name: str) -> str | None:
    """The module of ours an import lands on: `from a.b import c` is a.b.c when that is a
    module, else a.b; None outside our packages."""
    if name and f"{base}.{name}" in MODULES:
        return f"{base}.{name}"
    parts = base.split(".")
    while parts:  # `import a.b.c` of a name in a module: its longest module prefix
        if ".".join(parts) in MODULES:
            return ".".join(parts)
        parts.pop()
    return None


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for mod, path in MODULES.items():
        for base, name, _ in _imports(mod, path):
            dst = _target(base, name)
            if dst is not None and dst != mod:
                graph[mod].add(dst)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_no_upward_imports() -> None:
    bad = []
    for mod, path in MODULES.items():
        for base, _name, line in _imports(mod, path):
            top = base.split(".")[0]
            if top in LAYER and LAYER[top] > LAYER[mod.split(".")[0]]:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {base}")
    assert bad == []


def test_no_private_names_across_modules() -> None:
    bad = []
    for mod, path in MODULES.items():
        for base, name, line in _imports(mod, path):
            dst = _target(base, name)
            if dst is None or dst == mod:
                continue
            private = name.startswith("_") and not name.startswith("__") and (
                f"{base}.{name}" not in MODULES)
            if private or any(p.startswith("_") and p != "__init__" for p in dst.split(".")):
                bad.append(f"{path.relative_to(ROOT)}:{line} takes {base}.{name or ''}")
    assert bad == []


@pytest.mark.parametrize("source, expect", [
    ("import harness.check\n", "harness.check"),
    ("def f():\n    from harness import check\n", "harness.check"),
])
def test_the_checker_sees_function_level_imports(tmp_path: Path, source: str, expect: str) -> None:
    path = tmp_path / "m.py"
    path.write_text(source)
    got = {_target(base, name) for base, name, _ in _imports("hwmodels.m", path)}
    assert expect in got
