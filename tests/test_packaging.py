"""pyproject.toml declares what the code imports, and nothing more.

`pip install .` in a clean virtual environment must give a working `porter`: every third-party
module that porter/, harness/, targets/ and hwmodels/ import comes from a declared dependency
(numpy was once missing: `porter selftest` died with "No module named 'numpy'"), every declared
dependency is imported, and test-only packages live in the `test` extra. Imports are read with
`ast` (function-level ones too: they run as surely, only later); modules are mapped to their
distributions with `importlib.metadata.packages_distributions()`.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("porter", "harness", "targets", "hwmodels")  # what `pip install .` installs
# The repository's own top-level packages (bench/ and tests/ are used from a checkout only).
FIRST_PARTY = frozenset(
    {*PACKAGES, *(d.name for d in REPO.iterdir() if (d / "__init__.py").is_file())}
)
IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError"})


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _dist_name(requirement: str) -> str:
    """'pytest-xdist>=3' -> 'pytest-xdist'; normalised as PEP 503 does ('PyYAML' -> 'pyyaml')."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return _normalise(match.group(1))


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in IMPORT_ERRORS for t in types)


def third_party_imports(paths: list[Path]) -> dict[str, bool]:
    """Top-level module -> whether some import of it is guarded by `except ImportError`.

    A module the code probes for (a guarded import somewhere, e.g. amdsmi on an NVIDIA machine,
    or a `chart_available()` check before a function that imports matplotlib) is optional and
    may come from an extra; a module never probed for must be installed for the code to run.
    """
    found: dict[str, bool] = {}

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.Try):
            body_guarded = guarded or any(_catches_import_error(h) for h in node.handlers)
            for child in node.body:
                visit(child, body_guarded)
            for child in (*node.handlers, *node.orelse, *node.finalbody):
                visit(child, guarded)
            return
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in FIRST_PARTY or top == "__future__":
                continue
            found[top] = found.get(top, False) or guarded
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    for path in paths:
        visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), False)
    return found


@functools.cache
def _module_dists() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()  # scans every installed distribution


def distributions_of(module: str) -> set[str]:
    """The installed distributions that provide `module`; else the module's own name (a module
    that is not installed here, e.g. amdsmi, is assumed to be published under its own name)."""
    dists = _module_dists().get(module)
    return {_normalise(d) for d in dists} if dists else {_normalise(module)}


def problems(imports: dict[str, bool], required: set[str], optional: set[str]) -> list[str]:
    """What is wrong between imported modules and declared distributions (empty when all is
    right): an unguarded import not in `required`, a guarded one in neither, a required
    distribution nothing imports."""
    out = []
    used: set[str] = set()
    for module, guarded in sorted(imports.items()):
        dists = distributions_of(module)
        used |= dists
        declared = required | optional if guarded else required
        if not dists & declared:
            where = "dependencies or an extra" if guarded else "[project] dependencies"
            out.append(f"module {module!r} (distribution {' or '.join(sorted(dists))}) "
                       f"is imported but not declared in {where}")
    for dist in sorted(required - used):
        out.append(f"{dist} is declared in [project] dependencies but nothing imports it")
    return out


def _package_files() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))]


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = _pyproject()["project"]
    required = {_dist_name(r) for r in project["dependencies"]}
    extras = {
        name: {_dist_name(r) for r in reqs}
        for name, reqs in project.get("optional-dependencies", {}).items()
    }
    return required, extras


def test_runtime_imports_are_declared_and_declarations_used(tmp_path: Path) -> None:
    required, extras = _declared()
    optional = set().union(*(v for k, v in extras.items() if k != "test"))
    imports = third_party_imports(_package_files())
    assert {"torch", "triton", "numpy", "yaml"} <= set(imports)  # the scan sees the code
    assert problems(imports, required, optional) == []

    # The check can fail: numpy left out, or a dependency nothing imports, is reported.
    found = problems(imports, required - {"numpy"}, optional)
    assert any(p.startswith("module 'numpy'") for p in found), found
    # (a made-up name: anthropic, once the example, is imported now, by porter/llm)
    found = problems(imports, required | {"never-imported-dist"}, optional)
    assert any(p.startswith("never-imported-dist is declared") for p in found), found
    # Only a module probed for under `except ImportError` is optional; function-level imports
    # count as much as top-level ones.
    probe = tmp_path / "probe.py"
    probe.write_text(
        "try:\n    import amdsmi\nexcept (ImportError, OSError):\n    amdsmi = None\n"
        "def f():\n    import amdsmi.x\n    import yaml.constructor\n"
        "try:\n    import numpy\nexcept ValueError:\n    pass\n"
    )
    assert third_party_imports([probe]) == {"amdsmi": True, "yaml": False, "numpy": False}
    assert problems({"amdsmi": True}, set(), {"amdsmi"}) == []
    assert problems({"amdsmi": False}, set(), {"amdsmi"}) != []


def test_test_packages_are_an_extra_only() -> None:
    required, extras = _declared()
    assert {"pytest", "pytest-xdist"} <= extras["test"]  # `make test` runs pytest -n 2
    assert not required & {"pytest", "pytest-xdist"}
    makefile = (REPO / "Makefile").read_text()
    assert "-e '.[test]'" in makefile
    # Whatever the tests import comes from the dependencies or the test extra.
    tests = sorted((REPO / "tests").rglob("*.py"))
    missing = [
        m for m, guarded in third_party_imports(tests).items()
        if not guarded and not distributions_of(m) & (required | extras["test"])
    ]
    assert missing == []


def _make_recipe(makefile: str, target: str) -> list[str]:
    """The recipe lines (tab-indented) of `target` in a Makefile's text."""
    lines = makefile.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"{target}:"))
    recipe = []
    for ln in lines[start + 1:]:
        if not ln.startswith("\t"):
            break
        recipe.append(ln.strip())
    return recipe


def test_make_test_lints_with_the_pinned_ruff() -> None:
    """`make test` (what .ci/run runs) checks the tree with ruff before the suite, with a ruff
    the test extra pins exactly (a newer ruff brings new findings: the bar would move)."""
    test_extra = _pyproject()["project"]["optional-dependencies"]["test"]
    ruff = [r.split("#")[0].strip() for r in test_extra if _dist_name(r) == "ruff"]
    assert len(ruff) == 1 and re.fullmatch(r"ruff==[0-9.]+", ruff[0]), ruff
    recipe = _make_recipe((REPO / "Makefile").read_text(), "test")
    lint = [i for i, ln in enumerate(recipe) if "-m ruff check ." in ln]
    suite = [i for i, ln in enumerate(recipe) if "-m pytest" in ln]
    assert lint and suite and lint[0] < suite[0], recipe
    assert _make_recipe("a: b\n\tone\n\ttwo\n\nc:\n\tthree\n", "a") == ["one", "two"]


def test_package_data_globs_match_files() -> None:
    """A glob naming nothing (once `prompts/*.j2`, a folder that does not exist) is dead."""
    data = _pyproject()["tool"]["setuptools"]["package-data"]
    dead = [f"{pkg}: {glob}" for pkg, globs in data.items() for glob in globs
            if not list((REPO / pkg).glob(glob))]
    assert dead == []
