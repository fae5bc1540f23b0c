"""The package's size promises: no module over 450 lines, no class over 300, no function over
80 lines or 8 parameters.

Lines are physical lines: a module's every line, a class's or function's from its ``class`` /
``def`` line to its last (decorators not counted). Parameters are all a signature names:
positional-only, positional and keyword-only ones, and ``*args`` and ``**kwargs`` one each (a
signature that grows through ``**kwargs`` still grows); a method's ``self`` / ``cls`` does not
count. Aside: the ``__init__`` of an env class (a `gymnasium.Env` subclass under
``orsd_gym/envs/``), which takes Gymnasium's keyword settings through ``gym.make``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "orsd_gym"

MAX_MODULE_LINES = 450
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 8

#: Where the env classes whose constructors are set aside live.
ENVS = PACKAGE / "envs"


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    #: The class's or function's qualified name ("" for the module).
    name: str
    size: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.name or '(module)'} {self.size}"


def parameter_count(args: ast.arguments, *, method: bool) -> int:
    positional = [*args.posonlyargs, *args.args]
    if method and positional and positional[0].arg in ("self", "cls"):
        positional = positional[1:]
    return len(positional) + len(args.kwonlyargs) + (args.vararg is not None) + (args.kwarg is not None)


def _base_name(node: ast.expr) -> str:
    node = node.value if isinstance(node, ast.Subscript) else node  # gym.Env[str, str]
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def env_classes(trees: dict[str, ast.Module]) -> set[str]:
    """Names of the classes under ``orsd_gym/envs/`` that derive from ``gymnasium.Env``
    (directly or through another class of the package, by name)."""
    bases = {
        node.name: {_base_name(b) for b in node.bases}
        for path, tree in trees.items()
        if (ROOT / path).is_relative_to(ENVS)
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    }
    found = {"Env"}
    while True:
        more = {name for name, parents in bases.items() if parents & found} - found
        if not more:
            return found - {"Env"}
        found |= more


def violations(path: str, source: str, env_class_names: set[str] = frozenset()) -> list[Violation]:
    """Every size promise ``source`` (the module at ``path``) breaks."""
    found = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(Violation(path, 1, "", f"{lines} lines"))

    def visit(node: ast.AST, scope: list[str], in_class: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = ".".join([*scope, child.name])
                length = child.end_lineno - child.lineno + 1
                if length > MAX_CLASS_LINES:
                    found.append(Violation(path, child.lineno, name, f"{length} lines"))
                visit(child, [*scope, child.name], child.name)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = ".".join([*scope, child.name])
                length = child.end_lineno - child.lineno + 1
                count = parameter_count(child.args, method=in_class is not None)
                if length > MAX_FUNCTION_LINES:
                    found.append(Violation(path, child.lineno, name, f"{length} lines"))
                env_constructor = child.name == "__init__" and in_class in env_class_names
                if count > MAX_PARAMETERS and not env_constructor:
                    found.append(Violation(path, child.lineno, name, f"{count} parameters"))
                visit(child, [*scope, child.name], None)
            else:
                visit(child, scope, in_class)

    visit(ast.parse(source), [], None)
    return found


def package_violations() -> list[Violation]:
    sources = {str(p.relative_to(ROOT)): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}
    trees = {path: ast.parse(source) for path, source in sources.items()}
    envs = env_classes(trees)
    return [v for path, source in sources.items() for v in violations(path, source, envs)]


def test_the_package_keeps_its_size_promises():
    found = package_violations()
    assert not found, "size promises broken (path:line name size):\n" + "\n".join(map(str, found))


def test_the_measure_finds_each_kind_of_violation():
    many = ", ".join(f"a{i}" for i in range(8))
    long_body = "\n".join(f"    x{i} = {i}" for i in range(80))
    source = "\n".join(
        [
            f"def nine(self, {many}):\n    pass",  # a module-level function's ``self`` counts
            "class Holder:",
            f"    def eight(self, {many}):\n        pass",  # a method's does not
            "    def star(self, a, b, c, d, e, f, g, *args, **kwargs):\n        pass",
            f"def long():\n{long_body}",
            "class Big:\n" + "\n".join(f"    y{i} = {i}" for i in range(300)),
        ]
    )
    source += "\n# padding" * (MAX_MODULE_LINES + 1 - len(source.splitlines()))
    found = {(v.name, v.size) for v in violations("m.py", source)}
    assert found == {
        ("", "451 lines"),
        ("nine", "9 parameters"),
        ("Holder.star", "9 parameters"),
        ("long", "81 lines"),
        ("Big", "301 lines"),
    }


def test_env_constructors_are_set_aside_and_only_they():
    source = (
        "import gymnasium as gym\n"
        "class Base(gym.Env[str, str]):\n    pass\n"
        "class Game(Base):\n"
        "    def __init__(self, a, b, c, d, e, f, g, h, i):\n        pass\n"
        "    def play(self, a, b, c, d, e, f, g, h, i):\n        pass\n"
    )
    path = str((ENVS / "game.py").relative_to(ROOT))
    envs = env_classes({path: ast.parse(source)})
    assert envs == {"Base", "Game"}
    assert [v.name for v in violations(path, source, envs)] == ["Game.play"]
    assert [v.name for v in violations(path, source)] == ["Game.__init__", "Game.play"]
