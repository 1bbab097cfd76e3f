"""The docs teach the face: an app's code takes every name it writes from `durable_agent`.

- Every Python block in README.md and docs/ imports the package as `durable_agent` alone, never
  one of its modules (`durable_agent.workflows.state`), and only names the face lists.
- The prose cites a public name as itself (`ToolError`), not by the module it happens to live in
  (`activities.tools.ToolError`), and sends no reader to such a module for its names.

The modules behind the face may move; the names an app imports stay where they are.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

from tests.package_layout import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.M | re.S)


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """Each Python block of a page, as a user copies it (indented in a list, dedented), with
    the line it starts on."""
    text = path.read_text()
    return [
        (text[: found.start()].count("\n") + 1, textwrap.dedent(found.group(3)))
        for found in FENCE.finditer(text)
        if found.group(2) in ("python", "py", "pycon")
    ]


def import_statements(block: str) -> list[ast.Import | ast.ImportFrom]:
    """The block's imports, read one statement at a time: a block may elide the rest of its
    code (`...` where an argument would be), which a whole-block parse would refuse."""
    lines = block.splitlines()
    found: list[ast.Import | ast.ImportFrom] = []
    for index, line in enumerate(lines):
        if not re.match(r"\s*(from\s+\S+\s+)?import\s", line):
            continue
        statement = line.strip()
        following = iter(lines[index + 1 :])
        while statement.count("(") > statement.count(")"):
            statement += " " + next(following).strip()
        node = ast.parse(statement).body[0]
        assert isinstance(node, ast.Import | ast.ImportFrom)
        found.append(node)
    return found


def face() -> dict[str, str]:
    """Each public name, by the module the face takes it from."""
    stub = ast.parse((ROOT / "durable_agent" / "__init__.pyi").read_text())
    return {
        alias.asname or alias.name: f"durable_agent.{node.module}"
        for node in stub.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_every_python_block_imports_the_package_as_durable_agent_alone() -> None:
    elsewhere, from_the_face = [], 0
    for path in DOCS:
        for line, block in python_blocks(path):
            for node in import_statements(block):
                if isinstance(node, ast.ImportFrom) and node.module == "durable_agent":
                    from_the_face += 1
                    continue
                modules = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else ["." * node.level + (node.module or "")]
                )
                elsewhere += [
                    f"{path.relative_to(ROOT)}:{line} {module}"
                    for module in modules
                    if module.startswith((".", "durable_agent."))
                ]
    assert elsewhere == []
    assert from_the_face >= 10  # the pages' own examples, found


def test_every_name_a_block_imports_from_durable_agent_is_in_the_face() -> None:
    public = face()
    missing = [
        f"{path.relative_to(ROOT)}:{line} {alias.name}"
        for path in DOCS
        for line, block in python_blocks(path)
        for node in import_statements(block)
        if isinstance(node, ast.ImportFrom) and node.module == "durable_agent"
        for alias in node.names
        if alias.name not in public
    ]
    assert missing == []
    # The names issue 48 found reachable through internal modules only, each shown in use.
    shown = {
        alias.name
        for path in DOCS
        for _, block in python_blocks(path)
        for node in import_statements(block)
        if isinstance(node, ast.ImportFrom) and node.module == "durable_agent"
        for alias in node.names
    }
    assert {"CompensationInput", "RetrySettings", "Stores", "approval_predicate"} <= shown
    assert "waiting_runs" in shown


def internal_citations(text: str, public: dict[str, str]) -> list[str]:
    """Inline code that cites a public name by its module (`workflows.errors.AgentError`,
    `forking.ForkError`), or a module that holds public names as where to take them from
    (`durable_agent.client.overview`). A module is matched by its full name or any tail of it.
    An import statement counts when it is one an app could write (`from durable_agent.client
    import ...`); architecture.md's relative imports show the package's inside."""
    homes = set(public.values())
    tails = {".".join(m.split(".")[i:]) for m in homes for i in range(len(m.split(".")))}
    prose = FENCE.sub("", text)
    cited = []
    for span in re.findall(r"`([^`\n]+)`", prose):
        statement = _import_statement(span)
        if statement is not None:
            if statement.startswith("durable_agent."):
                cited.append(statement)
            continue
        for dotted in re.findall(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", span):
            module, _, name = dotted.rpartition(".")
            if (module in tails and name in public) or (dotted in tails and "." in dotted):
                cited.append(dotted)
    return cited


def _import_statement(span: str) -> str | None:
    """The absolute module an inline import statement names ("" for a relative one); None for
    anything else."""
    try:
        node = ast.parse(span).body[0] if re.match(r"(from|import) ", span) else None
    except SyntaxError:
        return None
    if isinstance(node, ast.ImportFrom):
        return "" if node.level else node.module or ""
    return node.names[0].name if isinstance(node, ast.Import) else None


def test_the_prose_cites_a_public_name_as_itself() -> None:
    public = face()
    cited = {
        str(path.relative_to(ROOT)): found
        for path in DOCS
        if (found := internal_citations(path.read_text(), public))
    }
    assert cited == {}


def test_an_internal_citation_is_found() -> None:
    """The check above, on the sentences issue 48 quoted."""
    public = face()
    text = (
        "A tool reads the key with `activities.tools.current_call().idempotency_key`.\n"
        "Raise `workflows.errors.AgentFatalToolError`; see `durable_agent.client.overview`.\n"
        "`client.fork` raises `forking.ForkError`. Import `durable_agent.AgentClient`.\n"
        "`from durable_agent.client.evaluation import evaluate`, not `from .state import X`.\n"
        "```python\nfrom durable_agent.workflows.state import CompensationInput\n```\n"
    )
    assert internal_citations(text, public) == [
        "activities.tools.current_call",
        "workflows.errors.AgentFatalToolError",
        "durable_agent.client.overview",
        "forking.ForkError",
        "durable_agent.client.evaluation",
    ]
