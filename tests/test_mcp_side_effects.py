"""MCP calls that change data are applied at most once: a call that may have reached its server
is not sent again after a timeout or a lost worker, unless its server opts in; read-only calls
keep their server's retries. The real server (tests/mcp_server_for_tests.py) ignores idempotency
keys, so its journal counts every application."""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from mcp.types import Tool, ToolAnnotations
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from durable_agent.activities.mcp_config import McpServerConfig
from durable_agent.activities.mcp_tools import McpTools, tool_spec
from durable_agent.encryption import payload_codec
from durable_agent.serving.dev_server import free_port
from durable_agent.workflows.activity_io import ToolActivityInput, ToolActivityResult
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import Limits
from durable_agent.workflows.specs import RetrySettings
from durable_agent.workflows.transcript import Transcript
from tests.helpers import call, eventually, scripted_input, turn
from tests.test_crash_safety import Processes, address_of
from tests.test_mcp import FAST_RETRY, SERVER, config_of, journal_of, mcp_worker, run_with

MAY_HAVE_TAKEN_EFFECT = "It may have taken effect before it stopped: check before calling it again."


def shop(journal: Path, **extra: Any) -> dict[str, Any]:
    """The test server over stdio; a call's attempt times out long before its first `charge` or
    `quote` answers, and long after the call reached the server."""
    server = {
        "command": sys.executable,
        "args": [str(SERVER), "stdio"],
        "env": {"MCP_TEST_JOURNAL": str(journal)},
        "timeout_seconds": 3,
        "retry": FAST_RETRY,
    }
    return {**server, **extra}


def applications(journal: Path, tool: str) -> int:
    return sum(entry.get("tool") == tool for entry in journal_of(journal))


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "journal.jsonl"


async def test_a_side_effecting_call_that_timed_out_is_applied_once_and_its_outcome_unknown(
    client: Client, task_queue: str, journal: Path, tmp_path: Path
) -> None:
    config = config_of({"shop": shop(journal)}, tmp_path)
    script = [turn(call("shop__charge", "c1", amount=5)), turn(text="done")]
    async with mcp_worker(client, task_queue, config):
        run = await run_with(client, task_queue, scripted_input(script))
    assert run.result is not None, run.error
    # The server applied it once; it was not sent again after the attempt timed out.
    assert applications(journal, "charge") == 1
    record = run.trace[0].tool_calls[0]
    assert (record.outcome, record.attempts) == ("error", 1)
    result = run.tool_results()["c1"]
    assert result.startswith("Error: shop__charge ") and result.endswith(MAY_HAVE_TAKEN_EFFECT)
    # In the compensation log, as outcome unknown (an MCP tool has no compensation).
    [effect] = run.result.side_effects
    assert (effect.call.tool, effect.call.tool_call_id) == ("shop__charge", "c1")
    assert (effect.outcome_unknown, effect.compensation, effect.call.result) == (True, None, None)
    # The schedule says so too: one attempt.
    history = await run.handle.fetch_history()
    [scheduled] = [
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "shop__charge"
    ]
    assert scheduled.retry_policy.maximum_attempts == 1


async def test_a_server_that_opts_in_gets_its_side_effecting_calls_retried(
    client: Client, task_queue: str, journal: Path, tmp_path: Path
) -> None:
    config = config_of({"shop": shop(journal, retry_side_effects=True)}, tmp_path)
    script = [turn(call("shop__charge", "c1", amount=5)), turn(text="done")]
    async with mcp_worker(client, task_queue, config):
        run = await run_with(client, task_queue, scripted_input(script))
    assert run.result is not None, run.error
    # Trusted to de-duplicate: a later attempt ran, and this server applied it again. (Each
    # attempt after a timeout reconnects; one whose reconnection outlasted its timeout sent
    # nothing, so count at least two.)
    assert applications(journal, "charge") >= 2
    assert run.tool_results()["c1"] == '{"result": "charged 5"}'
    assert run.trace[0].tool_calls[0].attempts >= 2
    [effect] = run.result.side_effects
    assert effect.outcome_unknown is False


async def test_a_read_only_call_is_still_retried(
    client: Client, task_queue: str, journal: Path, tmp_path: Path
) -> None:
    config = config_of({"shop": shop(journal)}, tmp_path)
    script = [turn(call("shop__quote", "c1", amount=5)), turn(text="done")]
    async with mcp_worker(client, task_queue, config):
        run = await run_with(client, task_queue, scripted_input(script))
    assert run.result is not None, run.error
    assert applications(journal, "quote") >= 2
    assert run.tool_results()["c1"] == '{"result": "quoted 5"}'
    assert run.trace[0].tool_calls[0].attempts >= 2
    assert run.result.side_effects == []


async def test_a_side_effecting_call_whose_worker_was_killed_is_not_sent_again(
    client: Client, journal: Path, tmp_path: Path
) -> None:
    """The worker dies (SIGKILL) after `record` reached the server and before its result was
    reported. The fresh worker does not send it again: the attempt times out, the model reads
    that its outcome is unknown, and the failed run reports it as not undone, outcome unknown."""
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"shop": shop(journal)}}))
    db = tmp_path / "demo.db"
    task_queue = f"mcp-crash-{uuid.uuid4()}"
    # One step: the run fails at the next model call, after the call's outcome is in.
    script = [turn(call("shop__record", "c1", note="n")), turn(text="never")]
    agent_input = scripted_input(script, tools=["shop__record"], limits=Limits(max_steps=1))
    processes = Processes(tmp_path)
    try:
        address = address_of(client)
        doomed = await processes.worker(
            "doomed", address, task_queue, db, "after:shop__record", mcp_config=config
        )
        handle = await client.start_workflow(
            AgentWorkflow.run,
            agent_input,
            id=f"mcp-crash-{uuid.uuid4()}",
            task_queue=task_queue,
            # A workflow task lost with the worker goes to the fresh one within seconds.
            task_timeout=timedelta(seconds=3),
        )
        await eventually(lambda: doomed.process.poll() is not None, 30, "the crash")
        assert doomed.process.returncode == -signal.SIGKILL, doomed.output()
        assert applications(journal, "record") == 1
        await processes.worker("fresh", address, task_queue, db, mcp_config=config)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        transcript = await handle.query(AgentWorkflow.transcript)
    finally:
        processes.kill_all()
    assert applications(journal, "record") == 1
    assert Transcript(messages=transcript).is_complete()
    [result] = [m.content for m in transcript if m.role == "tool"]
    assert result.startswith("Error: shop__record ") and result.endswith(MAY_HAVE_TAKEN_EFFECT)
    error = failed.value.cause
    assert isinstance(error, ApplicationError) and error.type == "AgentStepLimitExceeded"
    assert "shop__record c1 (outcome unknown: it stopped before reporting) not undone" in (
        error.message
    )
    [undo] = error.details[0]["compensations"]
    assert (undo["tool"], undo["status"], undo["outcome_unknown"]) == (
        "shop__record",
        "not_undone",
        True,
    )


def test_hints_and_the_opt_in_decide_the_retries() -> None:
    """readOnlyHint (and not destructiveHint) keeps the server's policy; any other tool gets one
    attempt, unless the server opts in or the config calls the tool read-only."""
    retry = RetrySettings(maximum_attempts=4, initial_interval_seconds=0.5)
    server = McpServerConfig(command="x", retry=retry)

    def spec(server: McpServerConfig, **hints: bool) -> tuple[bool, RetrySettings]:
        annotations = ToolAnnotations(**hints) if hints else None
        made = tool_spec("s", server, Tool(name="t", input_schema={}, annotations=annotations))
        return made.side_effects, made.retry

    once = retry.model_copy(update={"maximum_attempts": 1})
    assert spec(server, read_only_hint=True) == (False, retry)
    assert spec(server) == (True, once)
    assert spec(server, read_only_hint=False, idempotent_hint=True) == (True, once)
    assert spec(server, read_only_hint=True, destructive_hint=True) == (True, once)
    opted_in = server.model_copy(update={"retry_side_effects": True})
    assert spec(opted_in) == (True, retry)
    assert spec(opted_in, read_only_hint=True, destructive_hint=True) == (True, retry)
    said_read_only = server.model_copy(update={"read_only": {"t": True}})
    assert spec(said_read_only, destructive_hint=True) == (False, retry)


def _activity(name: str, attempt: int, maximum_attempts: int) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.payload_converter = payload_codec.data_converter().payload_converter
    env.info = dataclasses.replace(
        env.info,
        activity_type=name,
        attempt=attempt,
        retry_policy=RetryPolicy(maximum_attempts=maximum_attempts),
    )
    return env


def _call_input(env: ActivityEnvironment) -> list[RawValue]:
    tool_input = ToolActivityInput(
        tool_call_id="c1", arguments={"note": "n"}, idempotency_key="wf/run/c1", step=1
    )
    return [RawValue(env.payload_converter.to_payload(tool_input))]


async def test_a_retry_recorded_before_this_release_is_not_sent_again(
    journal: Path, tmp_path: Path
) -> None:
    """A run started before this release recorded its side-effecting MCP tools with the
    server's retries: their second attempt reaches no server, and fails for good."""
    hub = McpTools(config_of({"shop": shop(journal)}, tmp_path))
    try:
        await hub.list_server("shop")
        env = _activity("shop__record", attempt=2, maximum_attempts=3)
        with pytest.raises(ApplicationError) as refused:
            await env.run(hub.call, _call_input(env))
        assert refused.value.non_retryable and refused.value.type == "McpCallNotRepeated"
        assert applications(journal, "record") == 0
        # A read-only tool's retry still goes out.
        env = _activity("shop__lookup", attempt=2, maximum_attempts=3)
        lookup = ToolActivityInput(tool_call_id="c2", arguments={"key": "k"}, idempotency_key="k")
        done = await env.run(hub.call, [RawValue(env.payload_converter.to_payload(lookup))])
        assert isinstance(done, ToolActivityResult) and not done.is_error
    finally:
        await hub.close()
    opted_in = McpTools(config_of({"shop": shop(journal, retry_side_effects=True)}, tmp_path))
    try:
        await opted_in.list_server("shop")
        env = _activity("shop__record", attempt=2, maximum_attempts=3)
        done = await env.run(opted_in.call, _call_input(env))
        assert not done.is_error and applications(journal, "record") == 1
    finally:
        await opted_in.close()


async def test_a_call_that_never_reached_its_server_says_it_did_not_run(tmp_path: Path) -> None:
    """Its server cannot be reached: on its last attempt the model is told that nothing was
    sent (and the run logs no effect of unknown outcome); before that, it is retried."""
    down = {"url": f"http://127.0.0.1:{free_port()}/mcp", "retry": FAST_RETRY}
    hub = McpTools(config_of({"gone": down}, tmp_path))
    try:
        env = _activity("gone__record", attempt=1, maximum_attempts=1)
        done = await env.run(hub.call, _call_input(env))
        assert isinstance(done, ToolActivityResult) and done.is_error
        assert done.content.startswith("Error: gone__record did not run: MCP server gone is "
                                       "unreachable: "), done.content  # fmt: skip
        assert done.content.endswith("Nothing was sent to its MCP server.")
        env = _activity("gone__record", attempt=1, maximum_attempts=3)
        with pytest.raises(ApplicationError) as retried:
            await env.run(hub.call, _call_input(env))
        assert not retried.value.non_retryable
    finally:
        await hub.close()


async def test_a_malformed_result_of_a_call_that_changes_data_is_an_unknown_outcome(
    client: Client, task_queue: str, journal: Path, tmp_path: Path
) -> None:
    """The request reached the server, which may have applied it before its reply went wrong:
    logged for compensation as outcome unknown, and the model is told to check (issue 38)."""
    server = {
        "command": sys.executable,
        "args": [str(Path(__file__).parent / "mcp_malformed_server.py")],
        "env": {"MCP_TEST_JOURNAL": str(journal)},
    }
    config = config_of({"bank": server}, tmp_path)
    script = [turn(call("bank__pay", "p1", amount=5)), turn(text="done", expect="check before")]
    async with mcp_worker(client, task_queue, config):
        run = await run_with(client, task_queue, scripted_input(script))

    assert run.result is not None, run.error
    assert applications(journal, "pay") == 1
    result = run.tool_results()["p1"]
    assert result.startswith("Error: bank__pay's MCP server sent a malformed result.")
    assert result.endswith(MAY_HAVE_TAKEN_EFFECT)
    [effect] = run.result.side_effects
    assert (effect.call.tool_call_id, effect.outcome_unknown) == ("p1", True)
