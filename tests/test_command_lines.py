"""Every command line of the project on one plumbing (issue 49): the CLI, the codec server, the
benchmarks and the tests' worker processes declare their options with click and parse them in
serving/command_line.py, so that a bad command line is said one way everywhere. Nothing there
imports argparse; and the CLI, which says with click and rich what they can declare, stays
within its size, its terminal room within its own."""

from __future__ import annotations

import ast
from pathlib import Path

from durable_agent.cli.args import Following
from tests.package_layout import ROOT, project_modules

CLI_MOST_LINES = 2_303
"""`wc -l cli/*.py` once what click declares (the worker's choices, each command's help) and what
was said twice (a refused update's exit, a run's model settings, "nothing waits") went: from
2,838 (issue 49) to 2,266, against the 2,200 that issue asks for, which no honest cut found so
far reaches (docs/cli.md says what the rest is); then 35 for code mode (issue 50): `--code-mode`
(10 lines, 7 of them the import ruff reflows) and the trace's listing of each script with its
calls under it (25); then 8 for the rest of it: `fork --call` (a fork inside a script, 3) and the
script a waiting call belongs to, in `calls` and the run's prompt (5); then 15 for guardrails
(issue 51): `--guardrail KIND=NAME` and its rules (22) and the trace's `[held]` (3), less the 10
the model settings' own module saved in imports (the trace's verdict lines are reporting.py's,
which the console shows too); then 24 went, 2,324 to 2,300 (issue 49 again, with fresh eyes):
`list --awaiting-approval` answers through Following.answer as the other read commands do (3),
the demo's model is made once, in demo/script.py, for the CLI and `contract --example` (4), a
fork with other settings once, in client/evaluation.py (`fork_with`), for `fork` and `eval`
(16), and `eval`'s totals are added up once (1); then 4 for `serve --agent FILE` (issue 52; the
file is read and checked in serving/served_agent.py), and 4 for `Following.flags`, which the
conversation's hint lacked (it dropped a non-default --namespace), and 3 for `serve
--agent-card FILE` (the operator's words on the A2A card); then 11 went with `main_async`, an
entry only two test files used (tests/helpers.Cli now), and 1 came with a call a remembered
denial decides, which is not shown as waiting; then 2 for showing what a model wrote as a
terminal may show it (serving/command_line.visible: an import, and a tool name's comment). Lower
it as the CLI shrinks; raise it only with a reason in the commit."""
TERMINAL_MOST_LINES = 313
"""`wc -l cli/terminal/*.py`: a person at this terminal, typing; what else the CLI does goes
in cli/*.py, and counts there. 305 when the room was made; 313 since a line typed while a call
waits for a decision taken elsewhere (--address) is refused with a word, not lost."""
ALLOWED_IN_TESTS: set[str] = set()
"""Test files that may import argparse: one that must run against older releases, whose
argparse may differ. None does: tests/record_release.py, which records a release with that
release's own code, reads sys.argv by hand for that reason."""


def imports_argparse(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "argparse":
            return True
    return False


def lines(folder: Path) -> int:
    return sum(len(path.read_text().splitlines()) for path in folder.glob("*.py"))


def test_nothing_in_the_package_or_the_benchmarks_imports_argparse() -> None:
    files = [*project_modules().values(), *(ROOT / "bench").glob("*.py")]
    assert len(files) > 100
    assert [str(path.relative_to(ROOT)) for path in files if imports_argparse(path)] == []


def test_the_tests_import_argparse_only_where_they_must_run_against_older_releases() -> None:
    using = {path.name for path in (ROOT / "tests").glob("*.py") if imports_argparse(path)}
    assert using <= ALLOWED_IN_TESTS


def test_the_cli_stays_within_its_size() -> None:
    assert lines(ROOT / "cli") <= CLI_MOST_LINES
    assert lines(ROOT / "cli" / "terminal") <= TERMINAL_MOST_LINES


def test_a_command_shown_to_be_pasted_names_the_servers_namespace() -> None:
    """`send`, `end`, `approve` and `deny-call` as the CLI shows them for a run it follows on a
    server: with its namespace when not the default, where the conversation's hint lost it."""
    assert Following(json=False, address=None).flags == ""
    assert Following(json=False, address="h:7233").flags == " --address h:7233"
    shop = Following(json=False, address="h:7233", namespace="shop")
    assert shop.flags == " --address h:7233 --namespace shop"
