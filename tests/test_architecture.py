"""The architecture, checked: each folder is one subpackage, imports run one way, with no cycle,
and each rule has one home.

- Folders are import names: inside the package every import of its own modules is relative
  (`from .state import RunState`, `from ..workflows.inputs import AgentInput`), so a reader and
  every tool resolve it to its file; a folder imported by a bare name from the checkout fails at
  once, naming the package. Outside it (tests, benchmarks, scripts) the project is
  `durable_agent...`, never a bare `workflows` or `worker`.
- workflows/ (the deterministic side) imports nothing of the package but itself; activities are
  called by name, and tool specs reach the workflow as data (workflows/tool_catalog.py).
- Nothing in the library imports the CLI.
- No import cycle among the package's modules, imports inside functions included (only imports
  under `if TYPE_CHECKING:` are left out: they never run).
- One home per public name: each is defined in one module and listed once, by the face
  (durable_agent/__init__.pyi, which type checkers read and lazy_loader attaches); no other
  module re-exports a name.
- `workflow.patched` is called in workflows/versioning.py alone.
- The face, a client and the workflow's modules load neither provider SDK.
- Rooms stay small: no class of the package over 400 lines, no file of workflows/ over 450, and
  the tool-call gate and its rooms under 250 each, so a new concern gets a room of its own.
- docs/architecture.md's map of the rooms is true: it names every module of the package, in its
  folder, and nothing else, and each folder imports only what the map says it may.
"""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.package_layout import PACKAGE_DIRS, ROOT, SETUPTOOLS, project_modules

MODULES = project_modules()
PARSED = {name: ast.parse(path.read_text()) for name, path in MODULES.items()}


def _runs(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """False for an import under `if TYPE_CHECKING:`."""
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return False
    return True


def _absolute(name: str, node: ast.ImportFrom) -> str:
    """The module an ImportFrom names, made absolute from module `name`."""
    if not node.level:
        return node.module or ""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


def imports_of(name: str) -> set[str]:
    """The package's modules that `name` imports when it runs."""
    tree = PARSED[name]
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom) or not _runs(node, parents):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = _absolute(name, node)
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        found.update(t for t in targets if t in MODULES and t != name)
    return found


def room(name: str) -> str:
    """The subpackage a module is in (`workflows`, `cli`, ...), or `durable_agent` for the face."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _ours(module: str) -> bool:
    return module.split(".")[0] == "durable_agent"


def test_imports_inside_the_package_are_relative() -> None:
    absolute = [
        f"{MODULES[name].relative_to(ROOT)}:{node.lineno}"
        for name, tree in PARSED.items()
        for node in ast.walk(tree)
        if (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and "durable_agent" in (node.module or "")
        )
        or (
            isinstance(node, ast.Import)
            and any(a.name.startswith("durable_agent") for a in node.names)
        )
    ]
    assert absolute == []


@pytest.mark.parametrize(
    "folder", sorted(f for p, f in PACKAGE_DIRS.items() if p != "durable_agent")
)
def test_a_folder_imported_by_a_bare_name_fails_naming_the_package(folder: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import {folder}"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"ImportError: this folder is durable_agent.{folder}: import durable_agent.{folder}"
    )


def test_workflows_import_nothing_of_the_package_but_workflows() -> None:
    offending = {
        name: sorted(m for m in imports_of(name) if room(m) != "workflows")
        for name in MODULES
        if room(name) == "workflows"
    }
    assert not {k: v for k, v in offending.items() if v}
    assert room("durable_agent.workflows.agent") == "workflows"
    assert room("durable_agent") == "durable_agent"


def test_nothing_in_the_library_imports_the_cli() -> None:
    offending = {
        name: sorted(m for m in imports_of(name) if room(m) == "cli")
        for name in MODULES
        if room(name) != "cli"
    }
    assert not {k: v for k, v in offending.items() if v}


BARE_NAMES = {*PACKAGE_DIRS.values(), "worker", "starter", "agent_client", "plugin", "forking"} - {
    "durable_agent"
}
"""What the checkout's modules were once imported as: each would collide with an app's own
`workflows.py` or `worker.py` (samples-python's layout), or claim a top-level name."""


def test_no_module_outside_the_package_imports_it_by_a_bare_name() -> None:
    """Its scripts, the tests and the benchmarks: all import `durable_agent...`."""
    offending = []
    files = [*ROOT.glob("*.py"), *ROOT.glob("tests/*.py"), *ROOT.glob("bench/*.py")]
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
    assert len(files) > 100 and {"workflows", "activities", "client", "cli"} <= BARE_NAMES


def test_there_is_no_import_cycle() -> None:
    graph = {name: imports_of(name) for name in MODULES}
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


def _defined(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_every_public_name_has_one_home_and_only_the_face_re_exports() -> None:
    import durable_agent

    face = ast.parse((ROOT / "durable_agent" / "__init__.pyi").read_text())
    public = [
        alias.asname or alias.name
        for node in face.body
        if isinstance(node, ast.ImportFrom) and node.level
        for alias in node.names
    ]
    assert all(hasattr(durable_agent, name) for name in public)
    homes = {name: [m for m, tree in PARSED.items() if name in _defined(tree)] for name in public}
    assert {name: found for name, found in homes.items() if len(found) != 1} == {}
    re_exports = [
        f"{MODULES[name].relative_to(ROOT)}:{node.lineno} {alias.name}"
        for name, tree in PARSED.items()
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname == alias.name
    ]
    assert re_exports == []
    assert {"AgentClient", "AgentInput", "AgentPlugin", "tool"} <= set(public)


def test_workflow_patched_is_called_in_versioning_alone() -> None:
    callers = {
        name
        for name, tree in PARSED.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "patched"
    }
    assert callers == {"durable_agent.workflows.versioning"}


def test_the_face_a_client_and_the_workflow_load_neither_provider_sdk() -> None:
    code = (
        "import sys, durable_agent, durable_agent.client.agent_client\n"
        "import durable_agent.serving.plugin, durable_agent.workflows.agent\n"
        "print(sorted(m for m in ('openai', 'anthropic', 'mcp') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_every_package_folder_is_installed() -> None:
    """A folder that pyproject.toml leaves out works in the checkout and fails installed."""
    found = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    assert sorted(SETUPTOOLS["packages"]) == sorted(found)
    assert [
        p
        for p in ROOT.glob("*/__init__.py")
        if p.parent.name not in {*PACKAGE_DIRS.values(), "tests", "bench"}
    ] == []


MAX_CLASS_LINES = 400
MAX_WORKFLOWS_FILE_LINES = 450
MAX_GATE_LINES = 250
GATE_ROOMS = {
    "tool_call_gate": "ToolCallGate",
    "call_approvals": "CallApprovals",
    "auto_review": "AutoReview",
    "sub_agent_relay": "SubAgentRelay",
    "plan_gate": "PlanGate",
}
"""The tool-call gate (the surface the loop and the handlers call), its three rooms, and the plan
gate: each once one class of 572 lines between them (issue 49)."""


def _class_lines() -> dict[str, int]:
    """Each class of the package, by `module.Class`: its lines, decorators included."""
    sizes = {}
    for name, tree in PARSED.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                sizes[f"{name}.{node.name}"] = node.end_lineno - first + 1
    return sizes


def test_no_class_of_the_package_is_over_400_lines() -> None:
    sizes = _class_lines()
    assert {name: n for name, n in sizes.items() if n > MAX_CLASS_LINES} == {}
    assert len(sizes) > 100 and "durable_agent.workflows.agent.AgentWorkflow" in sizes


def test_no_file_of_workflows_is_over_450_lines() -> None:
    lengths = {
        MODULES[name].name: len(MODULES[name].read_text().splitlines())
        for name in MODULES
        if room(name) == "workflows"
    }
    assert {file: n for file, n in lengths.items() if n > MAX_WORKFLOWS_FILE_LINES} == {}
    assert len(lengths) > 50


def test_the_gates_rooms_are_under_250_lines_each() -> None:
    sizes = _class_lines()
    gates = {
        cls: sizes[f"durable_agent.workflows.{module}.{cls}"] for module, cls in GATE_ROOMS.items()
    }
    assert {cls: n for cls, n in gates.items() if n > MAX_GATE_LINES} == {}


ARCHITECTURE = ROOT / "docs" / "architecture.md"
ONE_SCREEN = (50, 100)
"""The map's most lines, and most characters a line."""


def _the_map() -> list[str]:
    """The lines of docs/architecture.md's map: the first `text` block under "## The map"."""
    section = ARCHITECTURE.read_text().split("\n## The map\n", 1)[1]
    return section.split("```text\n", 1)[1].split("\n```", 1)[0].splitlines()


def _read_map() -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    """The modules the map names (as import names, in the order named) and the rooms each
    folder may import, by the folder's room. A folder's line starts at the margin; under it,
    `  label: names` lines, continued by indented lines, and one `  imports:` line."""
    package_of = {folder: package for package, folder in PACKAGE_DIRS.items()}
    named: dict[str, list[str]] = {}
    may_import: dict[str, set[str]] = {}
    package = label = ""
    for line in _the_map():
        if not line.startswith(" "):
            package = package_of[line.split()[0].rstrip("/")]
            named[room(package)] = []
            continue
        head, colon, rest = line.strip().partition(":")
        if line[2] != " " and colon:
            label, line = head, rest
        names = line.split()
        if label == "imports":
            folders = [] if names == ["nothing"] else [package_of[n.rstrip("/")] for n in names]
            may_import[room(package)] = {room(p) for p in folders}
        else:
            named[room(package)] += [f"{package}.{n.replace('/', '.')}" for n in names]
    return named, may_import


def test_the_map_fits_one_screen() -> None:
    lines = _the_map()
    assert len(lines) <= ONE_SCREEN[0]
    assert [line for line in lines if len(line) > ONE_SCREEN[1]] == []


def test_the_map_names_every_module_once_in_its_folder_and_nothing_else() -> None:
    named, may_import = _read_map()
    assert set(named) == set(may_import) == {room(p) for p in PACKAGE_DIRS}
    modules = {
        folder: {n for n in MODULES if room(n) == folder and MODULES[n].name != "__init__.py"}
        for folder in named
    }
    missing = {folder: sorted(modules[folder] - set(names)) for folder, names in named.items()}
    unknown = {folder: sorted(set(names) - modules[folder]) for folder, names in named.items()}
    twice = sorted(n for names in named.values() for n in set(names) if names.count(n) > 1)
    assert {folder: names for folder, names in missing.items() if names} == {}
    assert {folder: names for folder, names in unknown.items() if names} == {}
    assert twice == []
    assert (
        len(named["workflows"]) > 50
        and "durable_agent.workflows.tool_call_gate" in (named["workflows"])
    )


def test_each_folder_imports_only_what_the_map_allows() -> None:
    _, may_import = _read_map()
    offending = {
        name: sorted(m for m in imports_of(name) if room(m) not in may_import[room(name)])
        for name in MODULES
    }
    assert {name: found for name, found in offending.items() if found} == {}
    assert may_import["workflows"] == {"workflows"} and may_import["durable_agent"] == set()
