"""The package's layers hold: every import inside compileiq goes to its own stage or a lower one, no
modules import each other in a circle, and each stage's docstring names what it may import.

Read from the source (ast), lazy and TYPE_CHECKING imports included: an import inside a function
is still a dependency of the design.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "compileiq"

# Lowest first. A module may import its own stage and the stages before it, never one after it.
LAYERS = ("core", "source", "build", "search", "evaluate", "store", "results", "tuning", "gating", "report",
          "app", "cli", "api", "compileiq")
STAGES = LAYERS[:10]  # subpackages whose docstrings say what they may import


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if "migrations" in parts:  # Alembic's scripts: loaded by Alembic, import nothing of ours
            continue
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The compileiq modules ``name`` imports (a `from pkg import submodule` names the submodule)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
    return {_owner(t, modules) for t in targets if t == "compileiq" or t.startswith("compileiq.")} - {name}


def _owner(target: str, modules: dict[str, Path]) -> str:
    while target not in modules:
        target = target.rpartition(".")[0]
    return target


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return "compileiq"
    return parts[1]


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
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
            visit(node)
    return found


def _declared(stage: str) -> set[str]:
    doc = ast.get_docstring(ast.parse((PACKAGE / stage / "__init__.py").read_text())) or ""
    match = re.search(r"^May import: (.*?)\.(?: |$)", doc, re.MULTILINE)
    assert match, f"compileiq/{stage}/__init__.py: its docstring has no 'May import: ...' line"
    named = match.group(1).strip()
    return set() if named.startswith("nothing") else {part.strip() for part in named.split(",")}


def test_every_module_belongs_to_a_layer() -> None:
    strays = sorted(name for name in _graph() if _layer(name) not in LAYERS)
    assert not strays, f"modules outside every layer (add them to a stage, or the stage to LAYERS): {strays}"


def test_no_import_runs_up_the_layers() -> None:
    upward = [f"{name} imports {target}" for name, targets in sorted(_graph().items()) for target in sorted(targets)
              if LAYERS.index(_layer(target)) > LAYERS.index(_layer(name))]
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert _cycles(_graph()) == []


def test_each_stage_imports_only_what_its_docstring_names() -> None:
    used: dict[str, set[str]] = {stage: set() for stage in STAGES}
    for name, targets in _graph().items():
        if _layer(name) in used:
            used[_layer(name)].update(_layer(t) for t in targets if _layer(t) != _layer(name))
    for stage in STAGES:
        declared = _declared(stage)
        assert declared <= set(LAYERS[: LAYERS.index(stage)]), f"{stage} declares a stage above it: {declared}"
        assert used[stage] <= declared, f"{stage} imports {sorted(used[stage] - declared)} beyond its docstring"


def test_the_checks_find_an_upward_import_and_a_circle() -> None:
    graph = {"compileiq.core.a": {"compileiq.results.b"}, "compileiq.results.b": {"compileiq.core.a"}}
    assert _cycles(graph) == [["compileiq.core.a", "compileiq.results.b"]]
    assert LAYERS.index(_layer("compileiq.results.b")) > LAYERS.index(_layer("compileiq.core.a"))


# Each heavy dependency has one home stage: the rest of the code reaches it through that stage.
HOMES = {"ray": "build", "skopt": "search", "sklearn": "search", "sqlalchemy": "store", "alembic": "store",
         "typer": "cli", "rich": "cli"}


def test_each_heavy_dependency_is_imported_by_its_stage_alone() -> None:
    strays = []
    for name, path in sorted(_modules().items()):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0):
                for top in {(alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
                            for alias in node.names}:
                    if top in HOMES and _layer(name) != HOMES[top]:
                        strays.append(f"{name} imports {top} (its home is compileiq/{HOMES[top]}/)")
    assert not strays, "\n".join(strays)


# The house's size hint for a module: past it, split the module along a seam into modules of one job
# each (re-exporting what other code imports from it), rather than let it grow.
MAX_LINES = 400


def _over_the_hint(paths: list[Path]) -> list[tuple[Path, int]]:
    """Each file of ``paths`` longer than MAX_LINES, with its length in lines."""
    return [(path, n) for path in sorted(paths) if (n := len(path.read_text().splitlines())) > MAX_LINES]


def test_no_module_is_over_the_size_hint() -> None:
    over = [f"{path.relative_to(PACKAGE.parent)}: {n} lines" for path, n in _over_the_hint(list(PACKAGE.rglob("*.py")))]
    assert not over, f"modules over {MAX_LINES} lines (split each along a seam):\n" + "\n".join(over)


def test_the_size_check_finds_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert _over_the_hint(list(tmp_path.glob("*.py"))) == [(tmp_path / "long.py", MAX_LINES + 1)]
