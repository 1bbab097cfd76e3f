"""The architecture, checked: imports run one way, with no cycle, and each rule has one home.

- One import name: every module imports the project as `durable_agent...`, never by a bare
  `workflows`, `activities`, `cli` or a module name that an app's own files would shadow.
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
PACKAGE_DIRS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
    "package-dir"
]
"""The installed package's name for each folder of the checkout (`durable_agent.workflows` is
workflows/)."""


def project_modules() -> dict[str, Path]:
    """Every module of the installed package, by its import name."""
    modules = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in (ROOT / folder).glob("*.py") if package == "durable_agent" else []:
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            modules[name] = path
        if package == "durable_agent":
            continue
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join([package, *(parts[:-1] if parts[-1] == "__init__" else parts)])
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


def room(name: str) -> str:
    """`workflows`, `activities`, `cli`, or the package's own top level (`durable_agent`)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or f"durable_agent.{parts[-1]}" in PACKAGE_DIRS else parts[0]


def test_nothing_in_workflows_imports_activities() -> None:
    offending = {
        name: sorted(m for m in imports_of(name) if room(m) == "activities")
        for name in MODULES
        if room(name) == "workflows"
    }
    assert not {k: v for k, v in offending.items() if v}
    assert room("durable_agent.workflows.agent") == "workflows"
    assert room("durable_agent.activities") == "activities"
    assert room("durable_agent.worker") == "durable_agent"


BARE_NAMES = {
    "workflows",
    "activities",
    "cli",
    "worker",
    "starter",
    *(path.stem for path in (ROOT / "durable_agent").glob("*.py")),
} - {"__init__"}
"""What the checkout's modules were once imported as: each would collide with an app's own
`workflows.py` or `worker.py` (samples-python's layout), or claim a top-level name."""


def test_no_module_imports_the_project_by_a_bare_name() -> None:
    """The package, its scripts, the tests and the benchmarks: all import `durable_agent...`."""
    offending = []
    files = [
        *MODULES.values(),
        *ROOT.glob("*.py"),
        *ROOT.glob("tests/*.py"),
        *ROOT.glob("bench/*.py"),
    ]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            offending += [
                f"{path.relative_to(ROOT)}:{node.lineno} {n}"
                for n in names
                if n.split(".")[0] in BARE_NAMES
            ]
    assert offending == []
    assert len(files) > 150 and {"workflows", "agent_client", "plugin"} <= BARE_NAMES


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
    assert callers == {"durable_agent.workflows.versioning"}


def test_a_client_and_the_workflow_load_neither_provider_sdk() -> None:
    code = (
        "import sys, durable_agent.agent_client, durable_agent.plugin\n"
        "import durable_agent.workflows.agent\n"
        "print(sorted(m for m in ('openai', 'anthropic') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_every_package_folder_is_installed() -> None:
    """A folder that pyproject.toml leaves out works in the checkout and fails installed."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    assert sorted(config["packages"]) == sorted(found)
    assert [
        p
        for p in ROOT.glob("*/__init__.py")
        if p.parent.name not in {*PACKAGE_DIRS.values(), "tests", "bench"}
    ] == []
