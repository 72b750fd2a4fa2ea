"""The layers run one way, checked from the imports themselves (parsed, not executed).

    flows/                   Prefect flows, the CLI: may import components
    components/<package>/    library code: never imports flows
    components/contracts/    the ground floor: imports nothing else from components or flows

inside components the packages sit in the declared order `PACKAGE_ORDER` (a package imports only
packages below it: evaluation judges with the registry's gate table, the registry never reads
evaluation code; the study reads evaluation's results),
and the import graph of components and flows has no cycle, neither between modules nor between
packages (`components.<first level>`, a package or a module, and `flows`: a cycle of packages is
two packages each needing the other, even when no two modules do). Every import counts, also one inside a function
(a lazy import still ties two modules together). `import a.b.c` and `from a.b import c` (c a module)
depend on module a.b.c; `from a.b import name` depends on a.b (its `__init__` when a.b is a
package). The parent packages an import runs first are not edges: a package's `__init__` that
re-exports its submodules would otherwise form a cycle with each of them.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("components", "flows")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for layer in LAYERS for p in sorted((ROOT / layer).rglob("*.py"))}


def imported_names(module: str, path: Path) -> Iterator[tuple[str, str | None]]:
    """(module named by the import, imported attribute or None) for every import in the file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from .x import y
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                yield source, alias.name


def dependencies(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `module` imports (resolved as in the module docstring)."""
    deps = set()
    for source, attribute in imported_names(module, path):
        if attribute is not None and f"{source}.{attribute}" in modules:
            deps.add(f"{source}.{attribute}")
            continue
        parts = source.split(".")
        for n in range(len(parts), 0, -1):  # the longest prefix that is a project module
            if ".".join(parts[:n]) in modules:
                deps.add(".".join(parts[:n]))
                break
    deps.discard(module)
    return deps


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    return {m: dependencies(m, p, modules) for m, p in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None (iterative depth-first search)."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path, on_path = [start], {start}
        stack = [iter(sorted(graph.get(start, ())))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                done.add(path[-1])
                on_path.discard(path.pop())
            elif nxt in on_path:
                return path[path.index(nxt) :] + [nxt]
            elif nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def package_of(module: str) -> str:
    """`components.<first level>` for a module of components (`components.grpo.update` ->
    `components.grpo`, `components.config` itself), `flows` for a module of flows."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "components" else parts[0]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph with every module replaced by its package (edges inside a package dropped)."""
    packages: dict[str, set[str]] = defaultdict(set)
    for module, deps in graph.items():
        packages[package_of(module)] |= {package_of(d) for d in deps} - {package_of(module)}
    return dict(packages)


def witnesses(graph: dict[str, set[str]], cycle: list[str]) -> list[str]:
    """For each step a -> b of a package cycle, the module imports that make it."""
    return [
        f"{m} imports {d}"
        for a, b in zip(cycle, cycle[1:])
        for m, deps in sorted(graph.items())
        for d in sorted(deps)
        if package_of(m) == a and package_of(d) == b
    ]


MODULES = project_modules()
GRAPH = import_graph(MODULES)


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": {"a"}}) is None


def test_the_package_graph_finds_a_cycle_the_module_graph_does_not():
    graph = {"components.a.x": {"components.b.y"}, "components.b.z": {"components.a.w"}, "components.a.w": set(),
             "components.b.y": set(), "components.c": {"components.a.x"}, "flows.cli": {"components.c"}}  # fmt: skip
    assert find_cycle(graph) is None
    packages = package_graph(graph)
    assert find_cycle(packages) == ["components.a", "components.b", "components.a"]
    assert packages["flows"] == {"components.c"} and packages["components.c"] == {"components.a"}
    assert witnesses(graph, ["components.a", "components.b", "components.a"]) == [
        "components.a.x imports components.b.y", "components.b.z imports components.a.w",
    ]  # fmt: skip


def test_the_resolver_sees_lazy_imports_and_submodules(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "import components.contracts.naming\n"
        "from components.grpo import losses\n"
        "from components.rewards import REWARDS\n"
        "def f():\n    from flows.steps import STEPS\n"
    )
    deps = dependencies("components.m", source, MODULES)
    assert deps == {"components.contracts.naming", "components.grpo.losses", "components.rewards", "flows.steps"}
    assert {"components.grpo.update", "components.contracts", "flows.cli"} <= set(MODULES)


def test_components_never_import_flows():
    offenders = [
        f"{m} imports {source}"
        for m, p in MODULES.items()
        if m.startswith("components")
        for source, _ in imported_names(m, p)
        if source == "flows" or source.startswith("flows.")
    ]
    assert not offenders, offenders


def test_contracts_import_nothing_above_them():
    offenders = [
        f"{m} imports {source}"
        for m, p in MODULES.items()
        if m == "components.contracts" or m.startswith("components.contracts.")
        for source, _ in imported_names(m, p)
        if source.split(".")[0] in LAYERS and not (source == "components.contracts" or source.startswith("components.contracts."))
    ]
    assert not offenders, offenders


def test_the_import_graph_has_no_cycle():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_package_graph_has_no_cycle():
    cycle = find_cycle(package_graph(GRAPH))
    assert cycle is None, "package import cycle: " + " -> ".join(cycle) + "; " + "; ".join(witnesses(GRAPH, cycle))


# bottom to top: a package may import only packages before it in this list (flows sits above all)
PACKAGE_ORDER = (
    "components.contracts", "components.hashing", "components.code_version", "components.formatting", "components", "components.machine", "components.config", "components.fairness_benchmarks", "components.instructions",
    "components.models", "components.tracking", "components.data", "components.validation", "components.rewards",
    "components.generation", "components.embeddings", "components.grpo", "components.plugins", "components.release",
    "components.evaluation", "components.reporting", "components.study",
)  # fmt: skip


def test_packages_import_only_packages_below_them():
    packages = package_graph(GRAPH)
    assert set(packages) - {"flows"} == set(PACKAGE_ORDER), "a new package: place it in PACKAGE_ORDER"
    rank = {name: i for i, name in enumerate(PACKAGE_ORDER)}
    upward = [
        f"{a} imports {b} ({'; '.join(witnesses(GRAPH, [a, b]))})"
        for a, deps in sorted(packages.items())
        if a != "flows"
        for b in sorted(deps)
        if rank[b] >= rank[a]
    ]
    assert not upward, upward
