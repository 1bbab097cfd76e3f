"""Running scripted agent runs against the session's dev server."""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import subprocess
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle, WorkflowHistory
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from durable_agent.cli import starter
from durable_agent.serving.command_line import CommandLineError
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput, AgentResult, Limits, ToolApprovalPolicy
from durable_agent.workflows.model_settings import ModelSettings, ScriptedCall, ScriptedTurn
from durable_agent.workflows.specs import RetrySettings
from durable_agent.workflows.state import StepRecord
from durable_agent.workflows.transcript import Message, Transcript

STRICT_VARIABLE = "AGENT_TESTS_STRICT"
"""Set (to 1) by .ci/run: a test that would skip for a program the machine lacks fails instead,
so CI always runs the browser's and Node's tests."""


def program(names: tuple[str, ...], install: str) -> str:
    """The path of the first of `names` on PATH. Where none is, the test skips and says what
    to install (`pytest -rs` lists it in the summary), or fails under AGENT_TESTS_STRICT=1."""
    for name in names:
        if found := shutil.which(name):
            return found
    reason = f"no {names[0]} on this machine: {install}"
    if os.environ.get(STRICT_VARIABLE, "") not in ("", "0"):
        pytest.fail(f"{reason} ({STRICT_VARIABLE} is set: this run must not skip it)")
    pytest.skip(reason)


def npm_installed(source: Path, where: Path, files: tuple[str, ...]) -> Path:
    """`files` of the Node client in `source` (its package.json first), copied to `where` (the
    checkout gets no node_modules) and its packages installed there from npm. Skips, or fails
    under AGENT_TESTS_STRICT=1, on a machine without node and npm."""
    program(("node",), "apt-get install nodejs npm")
    npm = program(("npm",), "apt-get install npm")
    for name in files:
        shutil.copy(source / name, where / name)
    installed = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    return where


def tsc_compiled(where: Path) -> Path:
    """The TypeScript project in `where` (its tsconfig.json, `npm_installed` with typescript)
    compiled by tsc, which type-checks it as it does; `where`, its .js files beside the .ts."""
    compiled = subprocess.run(
        [str(where / "node_modules" / ".bin" / "tsc"), "-p", "."],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    return where


TEST_WORKER_OPTIONS: dict[str, Any] = {
    # A bug in workflow code fails the test's run at once instead of retrying the task forever.
    "workflow_failure_exception_types": [Exception],
}
FAST_MODEL_RETRY = RetrySettings(maximum_attempts=3, initial_interval_seconds=0.05)
TRUSTED = ToolApprovalPolicy(approve_all=True)


def call(name: str, id: str | None = None, **arguments: Any) -> ScriptedCall:
    return ScriptedCall(name=name, arguments=arguments, id=id)


def turn(*calls: ScriptedCall, text: str | None = None, **options: Any) -> ScriptedTurn:
    return ScriptedTurn(text=text, calls=list(calls), **options)


def scripted_input(
    script: list[ScriptedTurn],
    *,
    prompt: str = "where is order 1042",
    tools: list[str] | None = None,
    **options: Any,
) -> AgentInput:
    limits = options.pop("limits", Limits())
    # Tests of other behaviour run as trusted jobs; tests/test_tool_approval.py covers the
    # default, which makes side-effecting calls wait for a person.
    options.setdefault("tool_approval", TRUSTED)
    return AgentInput(
        prompt=prompt,
        tools=tools,
        model=ModelSettings(provider="scripted", script=script, retry=FAST_MODEL_RETRY),
        limits=limits,
        **options,
    )


@dataclass
class Run:
    handle: WorkflowHandle[Any, AgentResult]
    result: AgentResult | None
    error: ApplicationError | None
    transcript: list[Message]
    trace: list[StepRecord]

    @property
    def failure(self) -> ApplicationError:
        assert self.error is not None, f"the run completed: {self.result}"
        return self.error

    def tool_results(self) -> dict[str, str]:
        return {m.tool_call_id: m.content for m in self.transcript if m.role == "tool"}


async def run_agent(client: Client, task_queue: str, agent_input: AgentInput) -> Run:
    """Run to the end on a fresh worker; the transcript is read before the worker stops."""
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await client.start_workflow(
            AgentWorkflow.run, agent_input, id=f"test-{uuid.uuid4()}", task_queue=task_queue
        )
        result: AgentResult | None = None
        error: ApplicationError | None = None
        try:
            result = await handle.result()
        except WorkflowFailureError as failure:
            assert isinstance(failure.cause, ApplicationError), failure.cause
            error = failure.cause
        transcript = await handle.query(AgentWorkflow.transcript)
        trace = await handle.query(AgentWorkflow.trace)
    # Whatever happened, what the run holds must be a transcript a provider accepts.
    assert Transcript(messages=transcript).is_complete(), "a tool call was left without result"
    return Run(handle, result, error, transcript, trace)


async def eventually(
    check: Callable[[], bool | Awaitable[bool]],
    timeout: float = 15,
    what: str | None = None,
    *,
    interval: float = 0.05,
) -> None:
    """Return as soon as `check()` holds, calling it every `interval` seconds; fail once `timeout`
    seconds have passed, saying what was awaited (`what`, else the check's name). `check` may be
    a plain function or a coroutine function: it reads state, and never waits for it itself."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        outcome = check()
        if await outcome if inspect.isawaitable(outcome) else outcome:
            return
        if loop.time() >= deadline:
            awaited = what or f"{getattr(check, '__name__', repr(check))}() to hold"
            raise AssertionError(f"gave up after {timeout:g} s waiting for {awaited}")
        await asyncio.sleep(interval)


async def chain_histories(
    client: Client, workflow_id: str, first_run_id: str | None
) -> list[WorkflowHistory]:
    """The histories of every run of a workflow id, first to last: each run that continued as
    new names the next."""
    histories: list[WorkflowHistory] = []
    run_id = first_run_id
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        histories.append(history)
        # Empty unless the run ended by continuing as new, naming the next run.
        last = history.events[-1]
        run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return histories


class Cli:
    """The CLI in this process's event loop, against the session's server, one command at a
    time: (exit code, stdout, stderr). A run or a subcommand, as `starter.main` would parse and
    dispatch it; not `worker`, `serve` or `contract`, which run their own event loop."""

    def __init__(
        self, env: WorkflowEnvironment, task_queue: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        self.address = env.client.service_client.config.target_host
        self.task_queue = task_queue
        self.capsys = capsys

    async def __call__(self, *argv: str) -> tuple[int, str, str]:
        self.capsys.readouterr()  # what came before is not this command's
        try:
            words = [*argv, "--address", self.address]
            code = await starter.dispatch(starter.parse_command_line(words))
        except CommandLineError as stop:
            code = int(stop.code or 0)
        out, err = self.capsys.readouterr()
        return code, out, err
