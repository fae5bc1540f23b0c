"""The package's shape: no run-time import cycle between its modules.

Imports inside functions count (they run when the function does, so a cycle through one is a
cycle that only shows up late); imports under ``if TYPE_CHECKING:`` do not (they never run).
Importing ``a.b.c`` also runs the ``__init__`` of ``a.b``, so that package counts as imported
too, unless the importer lives inside it (its ``__init__`` is then already running).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "orsd_gym"


def module_files() -> dict[str, Path]:
    files = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def is_type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def imported_names(module: str, path: Path) -> list[str]:
    """Every module name ``module`` imports at run time, relative imports resolved."""
    names: list[str] = []
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if is_type_checking_block(child):
                for branch in child.orelse:
                    visit(branch)
                continue
            if isinstance(child, ast.Import):
                names.extend(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parent = package[: len(package) - child.level + 1]
                    base = ".".join([*parent, base] if base else parent)
                names.extend(f"{base}.{alias.name}" for alias in child.names)
                names.append(base)
            visit(child)

    visit(ast.parse(path.read_text()))
    return names


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    graph: dict[str, set[str]] = {module: set() for module in files}
    for module, path in files.items():
        for name in imported_names(module, path):
            while name and name not in files:  # `from a.b import function` imports a.b
                name = name.rpartition(".")[0]
            while name:
                if name != module and not module.startswith(name + "."):
                    graph[module].add(name)
                name = name.rpartition(".")[0]
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_walker_sees_function_level_imports_and_package_inits():
    graph = import_graph()
    assert "orsd_gym.envs.lookup" in graph["orsd_gym.envs.presentation"]
    # load_policy imports the transformers backend inside the function
    assert "orsd_gym.policies.hf" in graph["orsd_gym.policies.models"]
    # the CLI's train command imports orsd_gym.train.*, which runs orsd_gym/train/__init__.py
    assert "orsd_gym.train" in graph["orsd_gym.cli.train"]


def test_no_run_time_import_cycle():
    assert cycles(import_graph()) == []


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for target in graph[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_training_frame_imports_no_algorithm_internals_and_no_probe():
    """``train/`` knows algorithms by their interface (`orsd_gym.algos.base`) and probes by the
    callback protocol (`orsd_gym.train.callbacks`): ORSD's internals and the probes sit
    elsewhere (the probes above ``train/``, below ``experiments/``)."""
    graph = import_graph()
    frame = [module for module in graph if module == "orsd_gym.train" or module.startswith("orsd_gym.train.")]
    for module in frame:
        wrong = sorted(
            target
            for target in graph[module]
            if target.startswith(("orsd_gym.algos.orsd", "orsd_gym.probes", "orsd_gym.experiments"))
        )
        assert not wrong, f"{module} imports {wrong}"
    probes = [module for module in graph if module.startswith("orsd_gym.probes")]
    assert "orsd_gym.probes.teacher" in probes and "orsd_gym.probes.grad_share" in probes
    for module in probes:
        assert not any(target.startswith("orsd_gym.experiments") for target in graph[module]), module
    # ... above the frame: they build on its callback protocol.
    assert "orsd_gym.train.callbacks" in _reaches(graph, "orsd_gym.probes")
