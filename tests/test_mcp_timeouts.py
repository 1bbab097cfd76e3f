"""An MCP call or listing that times out says which server, and which call: in the run's history
(what the Web UI shows), the worker's log, and what the model and the run are told. The real
test server (tests/mcp_server_for_tests.py), whose first `charge` and `quote` outlast their
attempt, and whose listing can be made to hang."""

from __future__ import annotations

import dataclasses
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import RawValue, RetryPolicy
from temporalio.testing import ActivityEnvironment

from durable_agent.activities import mcp_tools
from durable_agent.activities.mcp_tools import McpTools
from durable_agent.encryption import payload_codec
from durable_agent.workflows.activity_io import ToolActivityInput, ToolActivityResult
from tests.helpers import call, scripted_input, turn
from tests.test_mcp import config_of, mcp_worker, run_with
from tests.test_mcp_side_effects import MAY_HAVE_TAKEN_EFFECT, shop


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "journal.jsonl"


def failures_of(history: Any, tool: str) -> list[tuple[str, str]]:
    """(type, message) of every failed attempt of `tool`'s activities: the last one's in its
    failed event, the earlier ones' in the started event of the attempt after."""
    scheduled = {
        e.event_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == tool
    }
    found = []
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attributes = e.activity_task_started_event_attributes
            failure = attributes.last_failure
        elif e.event_type in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
        ):
            attributes = (
                e.activity_task_failed_event_attributes
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
                else e.activity_task_timed_out_event_attributes
            )
            failure = attributes.failure
        else:
            continue
        if attributes.scheduled_event_id in scheduled and failure.message:
            found.append((failure.application_failure_info.type, failure.message))
    return found


def logged(caplog: Any, line: str) -> bool:
    """The line is in the log (the activity logger adds the activity's details after it)."""
    return any(r.getMessage().partition(" ({'activity_id'")[0] == line for r in caplog.records)


async def test_a_call_that_times_out_names_its_server_and_call(
    client: Client, task_queue: str, journal: Path, tmp_path: Path, caplog: Any
) -> None:
    """charge changes data (one attempt) and quote is read-only (retried): each first call
    outlasts its 3 s attempt."""
    caplog.set_level(logging.WARNING)
    config = config_of({"shop": shop(journal)}, tmp_path)
    script = [
        turn(call("shop__charge", "c1", amount=5)),
        turn(call("shop__quote", "c2", amount=5)),
        turn(text="done"),
    ]
    async with mcp_worker(client, task_queue, config):
        run = await run_with(client, task_queue, scripted_input(script))
    assert run.result is not None, run.error
    history = await run.handle.fetch_history()
    charge = (
        "MCP server shop did not answer shop__charge (call c1, attempt 1) within its 3 s timeout"
    )
    quote = "MCP server shop did not answer shop__quote (call c2, attempt 1) within its 3 s timeout"
    # The history (what the Web UI shows of each attempt): the worker's words, not the bare
    # "activity StartToClose timeout" of an attempt the Temporal server had to end.
    assert failures_of(history, "shop__charge") == [("McpTimeout", charge)]
    assert failures_of(history, "shop__quote") == [("McpTimeout", quote)]
    # The worker's log, one line each.
    assert logged(caplog, f"step 1: MCP tool shop__charge failed (call c1, attempt 1): {charge}")
    assert logged(caplog, f"step 2: MCP tool shop__quote failed (call c2, attempt 1): {quote}")
    # The model, and the run's trace: the tool's name (its server's, then its own) and the
    # kind of failure; the call is the one whose result this is.
    results = run.tool_results()
    assert results["c1"] == f"Error: shop__charge failed: McpTimeout. {MAY_HAVE_TAKEN_EFFECT}"
    assert results["c2"] == '{"result": "quoted 5"}'
    assert run.trace[0].tool_calls[0].error == results["c1"]


async def test_a_listing_that_times_out_names_its_server(
    client: Client,
    task_queue: str,
    journal: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: Any,
) -> None:
    """At a run's start the run fails, naming the server and what it did not do in time; for
    a call on a worker that had not listed the server yet, the model reads that its call did
    not run, and the log names the call."""
    monkeypatch.setattr(mcp_tools, "LIST_SECONDS", 1.0)
    slow = shop(journal)
    slow["env"]["MCP_TEST_SLOW_LISTING"] = "1"
    config = config_of({"slow": slow}, tmp_path)
    async with mcp_worker(client, task_queue, config):
        run = await run_with(client, task_queue, scripted_input([turn(text="never")]))
    assert run.failure.type == "AgentConfigurationError"
    assert run.failure.message == (
        "MCP server slow is unreachable: it did not list its tools within 1 s"
    )

    caplog.set_level(logging.WARNING)
    hub = McpTools(config)
    try:
        done = await env_run(hub, "slow__lookup", "c7", start_to_close=30)
        # An attempt shorter than the listing's limit: the attempt's runs out first.
        cut_short = await env_run(hub, "slow__lookup", "c8", start_to_close=0.5)
    finally:
        await hub.close()
    listing = "MCP server slow is unreachable: it did not list its tools within 1 s"
    assert isinstance(done, ToolActivityResult) and done.is_error
    assert done.content == (
        f"Error: slow__lookup did not run: {listing}. Nothing was sent to its MCP server."
    )
    assert logged(caplog, f"step 2: MCP tool slow__lookup failed (call c7, attempt 1): {listing}")
    assert cut_short.content == (
        "Error: slow__lookup did not run: MCP server slow did not list its tools in time for "
        "slow__lookup (call c8, attempt 1), whose timeout is 0.5 s. Nothing was sent to its MCP "
        "server."
    )


async def env_run(
    hub: McpTools, tool: str, call_id: str, *, start_to_close: float
) -> ToolActivityResult:
    """One call's last attempt in an activity environment (no Temporal server)."""
    env = ActivityEnvironment()
    env.payload_converter = payload_codec.data_converter().payload_converter
    env.info = dataclasses.replace(
        env.info,
        activity_type=tool,
        start_to_close_timeout=timedelta(seconds=start_to_close),
        retry_policy=RetryPolicy(maximum_attempts=1),
    )
    lookup = ToolActivityInput(
        tool_call_id=call_id, arguments={"key": "k"}, idempotency_key=f"wf/run/{call_id}", step=2
    )
    done = await env.run(hub.call, [RawValue(env.payload_converter.to_payload(lookup))])
    assert isinstance(done, ToolActivityResult)
    return done
