"""The package's modules, and the worker's parts, import each other in one direction only.

Every import statement that runs counts, also those inside functions (the
isolated child's imports after ``django.setup()``): a cycle hidden in a
function is still two parts that cannot be understood, or tested, one without
the other. Imports for the type checker only (``if TYPE_CHECKING:``) never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "django_jobs"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The known modules ``path`` imports, relative imports resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    # Imports for the type checker only never run: they make no cycle.
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pieces = package.split(".")
                base = pieces[: len(pieces) - (node.level - 1)]
                prefix = ".".join([*base, node.module] if node.module else base)
            else:
                prefix = node.module or ""
            # ``from . import x`` imports the module x; ``from .m import y``, the module m.
            submodules = [f"{prefix}.{alias.name}" for alias in node.names]
            named = [module for module in submodules if module in known]
            targets = named if len(named) == len(submodules) else [prefix, *named]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def package_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts}
    known = set(paths)
    return {m: imports_of(paths[m], known) for m in known}


def worker_graph() -> dict[str, set[str]]:
    parts = {m for m in package_graph() if m.startswith("django_jobs.worker")}
    parts.add("django_jobs.isolation")
    return {m: imports & parts for m, imports in package_graph().items() if m in parts}


def cycle_in(graph: dict[str, set[str]]) -> str | None:
    """One import cycle of ``graph``, written out, or None."""
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> str | None:
        if module in path:
            return " -> ".join([*path[path.index(module) :], module])
        if module in done:
            return None
        for imported in sorted(graph[module]):
            if found := visit(imported, (*path, module)):
                return found
        done.add(module)
        return None

    for module in sorted(graph):
        if found := visit(module, ()):
            return found
    return None


def test_worker_modules__import_each_other_without_a_cycle() -> None:
    graph = worker_graph()
    assert cycle_in(graph) is None
    assert "django_jobs.worker.executor" in graph["django_jobs.worker.process"]


def test_package__has_no_import_cycle_even_through_imports_inside_functions() -> None:
    """Engine, backend, checks, API: each can be read and tested without the ones it serves."""
    assert cycle_in(package_graph()) is None


def test_worker_modules__the_isolated_child_needs_no_worker_to_run_an_attempt() -> None:
    graph = worker_graph()
    assert graph["django_jobs.isolation"] == {"django_jobs.worker.runner"}
    assert graph["django_jobs.worker.runner"] == set()
