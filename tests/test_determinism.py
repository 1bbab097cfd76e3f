"""The workflow's code keeps the sandbox's rules, under either of the worker's sandboxes.

The fast runner (sandbox_runner.WORKFLOW_RUNNER, the default) passes the whole
`durable_agent.workflows` package through the sandbox: nothing there is imported again for each
run, so nothing restricts it at run time. The stock one (`AGENT_SANDBOX=stock`) is the SDK's
SandboxedWorkflowRunner as it ships: it imports every module of the loop afresh for each run and
restricts what it calls; only workflows/registry.py, plain data, is shared. These tests hold the
code to the sandbox's rules either way:

- a scan: no module in workflows/ imports what reads the clock, draws at random or does I/O, or
  calls `datetime.now()`, `open()` and the like, under whatever name it imported them;
- one run that goes through the whole loop (model, tools, plan approval, compaction, a
  sub-agent, continue-as-new) under the stock sandbox, with every module of the loop checked to
  be the sandbox's own copy, and its histories replayed there (tests/test_replay.py replays the
  committed histories under the stock sandbox too);
- the committed histories replayed in processes with other string hash seeds, since neither a
  sandbox nor a scan sees code that depends on the order of a set.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import (
    SandboxedWorkflowRunner,
    SandboxRestrictions,
    _runner as sdk,
)

from durable_agent.serving.sandbox_runner import WORKFLOW_RUNNER, sandbox_from_env
from durable_agent.serving.worker import build_worker, replayer
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.errors import AgentConfigurationError
from durable_agent.workflows.inputs import Limits
from durable_agent.workflows.model_settings import ModelSettings
from tests.clock_workflow import ClockWorkflow
from tests.helpers import (
    FAST_MODEL_RETRY,
    TEST_WORKER_OPTIONS,
    call,
    chain_histories,
    eventually,
    scripted_input,
    turn,
)

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
    "datetime.datetime.now",
    "datetime.datetime.utcnow",
    "datetime.datetime.today",
    "datetime.date.today",
    "importlib.import_module",
    "__import__",
    "open",
    "input",
    "print",
    "breakpoint",
    "hash",
}
"""`hash` of a str differs between processes, so an order or a key built on it would differ on
replay; `import_module` and `__import__` because what they import is a string the scan does not
follow."""


def _imported_names(tree: ast.AST) -> dict[str, str]:
    """What each name a module binds by importing stands for: `dt` -> `datetime` for `import
    datetime as dt`, `D` -> `datetime.datetime` for `from datetime import datetime as D`."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _resolved(called: str, names: dict[str, str]) -> str:
    head, dot, rest = called.partition(".")
    return names[head] + dot + rest if head in names else called


ALLOWED = "# deterministic:"
"""A line that says why its call is deterministic after all (its reason follows) is let be."""


def offences(path: Path) -> list[str]:
    found = []
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    imported = _imported_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        elif isinstance(node, ast.Call):
            names = []
            called = _resolved(ast.unparse(node.func), imported)
            if called in NOT_DETERMINISTIC_CALLS and ALLOWED not in lines[node.lineno - 1]:
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
        "sample.py:5: calls datetime.datetime.now()",
        "sample.py:5: calls open()",
    ]


def test_the_scan_follows_the_names_things_were_imported_as(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import datetime as dt\nimport importlib\nfrom datetime import datetime as D\n"
        "def f():\n    return dt.datetime.now(), D.now(), dt.date.today()\n"
        "def g():\n    return importlib.import_module('random'), __import__('time')\n"
    )
    assert offences(sample) == [
        "sample.py:5: calls datetime.datetime.now()",
        "sample.py:5: calls datetime.datetime.now()",
        "sample.py:5: calls datetime.date.today()",
        "sample.py:7: calls importlib.import_module()",
        "sample.py:7: calls __import__()",
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


def test_the_sandbox_setting_is_fast_or_stock() -> None:
    assert sandbox_from_env({}) == "fast"
    assert sandbox_from_env({"AGENT_SANDBOX": "stock"}) == "stock"
    with pytest.raises(AgentConfigurationError, match="AGENT_SANDBOX='strict': use fast"):
        sandbox_from_env({"AGENT_SANDBOX": "strict"})


sandbox_modules: dict[str, bool] = {}
"""Each durable_agent.workflows module a stock-sandboxed run used: True when it was the
sandbox's own copy, False when it was the worker's, passed through."""


class _Recording(sdk._Instance):
    def activate(self, act: Any) -> Any:
        completion = super().activate(act)
        for name, module in self.importer.new_modules.items():
            if name.startswith("durable_agent.workflows"):
                sandbox_modules[name] = sys.modules.get(name) is not module
        return completion


class _RecordingSandbox(SandboxedWorkflowRunner):
    """The SDK's runner as it ships, noting which modules each run's sandbox held."""

    def create_instance(self, det: Any) -> Any:
        return _Recording(det, self.runner_class, self.restrictions)


async def test_a_whole_run_under_the_sdks_own_sandbox(client: Client, task_queue: str) -> None:
    """Model, tools, plan approval, compaction, a sub-agent, continue-as-new: every room of the
    loop runs, imported afresh and restricted by the sandbox, and the histories replay there."""
    stock = build_worker(client, f"{task_queue}-unused", sandbox="stock").config()[
        "workflow_runner"
    ]
    assert type(stock) is SandboxedWorkflowRunner
    assert stock.restrictions == SandboxRestrictions.default

    child = ModelSettings(
        provider="scripted",
        retry=FAST_MODEL_RETRY,
        script=[
            turn(call("cancel_order", order_id=104999, reason="asked")),
            turn(text="Order 104999 is cancelled."),
        ],
    )
    script = [
        turn(call("get_order", order_id=1042), call("submit_plan", steps=["Delegate", "Read"])),
        turn(call("delegate", task="Cancel order 104999.", tools=["cancel_order"])),
        *[turn(call("blob", size=3000 + i, id=f"b{i}")) for i in range(3)],
        turn(text="done"),
    ]
    agent_input = scripted_input(
        script,
        tools=["get_order", "cancel_order", "blob"],
        plan=True,
        sub_agents=True,
        sub_agent_model=child,
        compaction="window",
        limits=Limits(max_context_tokens=4000, max_steps=20),
        continue_as_new_after_steps=2,
    )
    sandbox_modules.clear()
    runner = _RecordingSandbox(restrictions=stock.restrictions)
    async with build_worker(client, task_queue, workflow_runner=runner, **TEST_WORKER_OPTIONS):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            agent_input,
            id=f"stock-{uuid.uuid4()}",
            task_queue=task_queue,
            execution_timeout=timedelta(seconds=60),
        )

        async def awaiting_approval() -> bool:
            return (await handle.query(AgentWorkflow.status)).status == "awaiting_approval"

        await eventually(awaiting_approval, what="the plan to wait for approval")
        await handle.signal(AgentWorkflow.approve_plan, "go ahead")
        result = await handle.result()

    assert result.answer == "done"
    assert result.compactions and [e.call.tool for e in result.side_effects] == ["cancel_order"]
    histories = await chain_histories(client, handle.id, handle.first_execution_run_id)
    assert len(histories) >= 2, "the run never continued as new"
    histories.append(await client.get_workflow_handle(f"{handle.id}/call_2_1").fetch_history())
    for history in histories:
        replayed = await replayer("stock").replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None

    rooms = {"agent", "dispatch", "saga", "tool_call_gate", "context_window", "continuation"}
    rooms |= {"compaction", "plan_gate", "call_approvals", "sub_agent_relay"}
    assert {f"durable_agent.workflows.{room}" for room in rooms} <= set(sandbox_modules)
    shared = {name for name, fresh in sandbox_modules.items() if not fresh}
    assert shared == {"durable_agent.workflows.registry"}


@pytest.mark.parametrize(
    ("runner", "reads_the_clock"),
    [(SandboxedWorkflowRunner(), False), (WORKFLOW_RUNNER, True)],
    ids=["stock", "fast"],
)
async def test_what_the_fast_runner_gives_up(
    client: Client, task_queue: str, runner: SandboxedWorkflowRunner, reads_the_clock: bool
) -> None:
    """A clock read the scan would have missed (`dt.datetime.now()`), in a module the runner
    passes through as the fast runner passes the loop's: the stock sandbox fails the run, the
    fast one lets it read the clock. The loop's own modules are held to the stock sandbox's
    rules by the run above, not at run time."""
    if reads_the_clock:
        runner = SandboxedWorkflowRunner(
            restrictions=runner.restrictions.with_passthrough_modules("tests.clock_workflow")
        )
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[ClockWorkflow],
        workflow_runner=runner,
        **TEST_WORKER_OPTIONS,
    ):
        run = client.execute_workflow(
            ClockWorkflow.run, id=f"clock-{uuid.uuid4()}", task_queue=task_queue
        )
        if reads_the_clock:
            assert await run
        else:
            with pytest.raises(WorkflowFailureError) as failure:
                await run
            assert "datetime.datetime.now" in str(failure.value.cause)


def test_the_committed_histories_replay_whatever_the_hash_seed() -> None:
    """Neither the sandbox nor the scan sees code that leans on the order of a set of strings,
    which changes with the process's hash seed: the committed histories (recorded by processes
    with random seeds) replay in processes with other fixed ones."""
    for seed in ("0", "1"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-m", "tests.replay_histories", "--sandbox", "stock"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.startswith("replayed "), done.stdout
