"""The worker's parts import each other in one direction only.

Every import statement counts, also those inside functions (the isolated
child's imports after ``django.setup()``): a cycle hidden in a function is
still two parts that cannot be understood, or tested, one without the other.
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
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pieces = package.split(".")
                base = pieces[: len(pieces) - (node.level - 1)]
                prefix = ".".join([*base, node.module] if node.module else base)
            else:
                prefix = node.module or ""
            targets = [prefix, *(f"{prefix}.{alias.name}" for alias in node.names)]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def worker_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts}
    known = set(paths)
    parts = {m for m in known if m.startswith("django_jobs.worker") or m == "django_jobs.isolation"}
    return {m: imports_of(paths[m], known) & parts for m in parts}


def test_worker_modules__import_each_other_without_a_cycle() -> None:
    graph = worker_graph()
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        if module in path:
            cycle = " -> ".join([*path[path.index(module) :], module])
            raise AssertionError(f"import cycle: {cycle}")
        if module in done:
            return
        for imported in sorted(graph[module]):
            visit(imported, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())
    assert "django_jobs.worker.executor" in graph["django_jobs.worker.process"]


def test_worker_modules__the_isolated_child_needs_no_worker_to_run_an_attempt() -> None:
    graph = worker_graph()
    assert graph["django_jobs.isolation"] == {"django_jobs.worker.runner"}
    assert graph["django_jobs.worker.runner"] == set()
