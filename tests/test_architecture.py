"""The architecture, checked: imports run one way, with no cycle, and each rule has one home.

- Nothing in workflows/ (the deterministic side) imports activities/ (the I/O side); activities
  are called by name and tool specs reach the workflow as data (workflows/tool_catalog.py).
- No import cycle among the project's modules, imports inside functions included (only imports
  under `if TYPE_CHECKING:` are left out: they never run).
- `workflow.patched` is called in workflows/versioning.py alone.
- A client (agent_client) and the workflow's modules load neither provider SDK.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("workflows", "activities", "cli")


def project_modules() -> dict[str, Path]:
    modules = {path.stem: path for path in ROOT.glob("*.py")}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


MODULES = project_modules()


def _runs(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """False for an import under `if TYPE_CHECKING:`."""
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return False
    return True


def imports_of(name: str) -> set[str]:
    """The project modules that `name` imports when it runs."""
    tree = ast.parse(MODULES[name].read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom) or not _runs(node, parents):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1]])
                base = f"{base}.{node.module}" if node.module else base
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        found.update(t for t in targets if t in MODULES and t != name)
    return found


def test_nothing_in_workflows_imports_activities() -> None:
    offending = {
        name: sorted(m for m in imports_of(name) if m.split(".")[0] == "activities")
        for name in MODULES
        if name.split(".")[0] == "workflows"
    }
    assert not {k: v for k, v in offending.items() if v}


def test_there_is_no_import_cycle() -> None:
    graph = {name: imports_of(name) for name in MODULES}
    # A package's __init__ re-exporting its modules lazily is not an edge back.
    done: set[str] = set()
    path: list[str] = []

    def visit(name: str) -> None:
        if name in path:
            cycle = [*path[path.index(name) :], name]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if name in done:
            return
        path.append(name)
        for target in sorted(graph[name]):
            visit(target)
        path.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)


def test_workflow_patched_is_called_in_versioning_alone() -> None:
    callers = {
        name
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr == "patched"
    }
    assert callers == {"workflows.versioning"}


def test_a_client_and_the_workflow_load_neither_provider_sdk() -> None:
    code = (
        "import sys, agent_client, workflows.agent\n"
        "print(sorted(m for m in ('openai', 'anthropic') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_every_top_level_module_is_installed_and_copied_into_the_image() -> None:
    """A module that pip or the Dockerfile leaves out works in the checkout and fails installed."""
    top_level = sorted(path.stem for path in ROOT.glob("*.py"))
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert sorted(config["tool"]["setuptools"]["py-modules"]) == top_level
    copied = {
        word
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY ")
        for word in line.split()[1:-1]
    }
    assert [name for name in top_level if f"{name}.py" not in copied] == []
