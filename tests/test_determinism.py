"""The workflow's code keeps the sandbox's rules, though the worker hands it over from outside.

The worker passes the whole `durable_agent.workflows` package through the sandbox
(sandbox_runner.WORKFLOW_RUNNER):
nothing there is imported again, and compiled again, for each run. So the sandbox no longer
catches a clock, a random number or I/O in that code; these tests do:

- no module in workflows/ imports what reads the clock, draws at random or does I/O, or calls
  `datetime.now()`, `open()` and the like;
- a run under the SDK's own strict sandbox, which imports workflows/agent.py afresh and
  restricts it, behaves as under the worker's.
"""

from __future__ import annotations

import ast
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from durable_agent.sandbox_runner import WORKFLOW_RUNNER
from durable_agent.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from tests.helpers import TEST_WORKER_OPTIONS, call, scripted_input, turn

WORKFLOWS = Path(__file__).resolve().parent.parent / "workflows"

NOT_DETERMINISTIC_MODULES = {
    "time",
    "random",
    "secrets",
    "uuid",
    "os",
    "sys",
    "socket",
    "ssl",
    "select",
    "selectors",
    "threading",
    "multiprocessing",
    "concurrent",
    "subprocess",
    "signal",
    "sqlite3",
    "pathlib",
    "shutil",
    "tempfile",
    "glob",
    "io",
    "urllib",
    "http",
    "httpx",
    "requests",
    "logging",
    "activities",
}
"""Clocks, randomness, processes, files and the network; `logging` because workflow.logger is the
one that replay keeps quiet; `activities` because imports point one way."""

NOT_DETERMINISTIC_CALLS = {
    "datetime.now",
    "datetime.utcnow",
    "datetime.today",
    "date.today",
    "datetime.datetime.now",
    "open",
    "input",
    "print",
    "breakpoint",
    "hash",
}
"""`hash` of a str differs between processes, so an order or a key built on it would differ on
replay."""


def offences(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        elif isinstance(node, ast.Call):
            names = []
            called = ast.unparse(node.func)
            if called in NOT_DETERMINISTIC_CALLS:
                found.append(f"{path.name}:{node.lineno}: calls {called}()")
        else:
            continue
        for name in names:
            if name.split(".")[0] in NOT_DETERMINISTIC_MODULES:
                found.append(f"{path.name}:{node.lineno}: imports {name}")
    return found


def test_the_scan_finds_what_the_sandbox_would_refuse(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import time\nfrom datetime import datetime\nfrom random import choice\n"
        "def f():\n    return datetime.now(), open('x')\n"
    )
    assert offences(sample) == [
        "sample.py:1: imports time",
        "sample.py:3: imports random",
        "sample.py:5: calls datetime.now()",
        "sample.py:5: calls open()",
    ]


def test_no_workflow_module_reads_a_clock_draws_at_random_or_does_io() -> None:
    paths = sorted(WORKFLOWS.glob("*.py"))
    assert len(paths) > 20
    assert [offence for path in paths for offence in offences(path)] == []


def test_the_worker_passes_the_workflows_package_through() -> None:
    assert "durable_agent.workflows" in WORKFLOW_RUNNER.restrictions.passthrough_modules


async def test_a_run_under_the_strict_sandbox_is_the_same_run(
    client: Client, task_queue: str
) -> None:
    """The default sandbox imports workflows/agent.py afresh for the run and restricts what it
    calls: a clock or I/O there would fail this run (TEST_WORKER_OPTIONS fails a run on any
    workflow error rather than retrying its task)."""
    answers = []
    for runner in (SandboxedWorkflowRunner(), WORKFLOW_RUNNER):
        key = f"k-{uuid.uuid4().hex[:6]}"
        script = [
            turn(call("count_me", key=f"{key}-1"), call("local_lookup", key=f"{key}-2")),
            turn(text="done: {last_tool_result}"),
        ]
        queue = f"{task_queue}-{len(answers)}"
        async with build_worker(client, queue, workflow_runner=runner, **TEST_WORKER_OPTIONS):
            result = await client.execute_workflow(
                AgentWorkflow.run,
                scripted_input(script, tools=["count_me", "local_lookup"]),
                id=f"test-{uuid.uuid4()}",
                task_queue=queue,
            )
        assert result.steps == 2
        answers.append(result.answer.replace(key, "KEY"))
    strict, passed_through = answers
    assert strict == passed_through == "done: KEY-2: found after 1 attempts"
