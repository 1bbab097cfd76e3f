"""Read-only tools declared `@tool(local=True)` run as local activities: one marker in the
history instead of an activity and a workflow task, with the tool's retry policy, its summary in
the marker, its errors for the model, and a history that replays."""

from __future__ import annotations

import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Replayer

from durable_agent.activities.tools import tool
from durable_agent.encryption import payload_codec
from durable_agent.workflows.agent import AgentWorkflow
from tests.helpers import call, run_agent, scripted_input, turn
from tests.tools_for_tests import executions


def event_types(history) -> list[str]:  # type: ignore[no-untyped-def]
    return [EventType.Name(e.event_type) for e in history.events]


async def test_a_local_tool_is_one_marker_a_call(client: Client, task_queue: str) -> None:
    steps = 4
    key = f"k-{uuid.uuid4().hex[:6]}"
    local = [turn(call("local_lookup", key=f"{key}-{i}")) for i in range(steps)]
    remote = [turn(call("count_me", key=f"{key}-{i}")) for i in range(steps)]
    runs = [
        await run_agent(
            client, task_queue, scripted_input([*script, turn(text="done")], tools=[tool_name])
        )
        for script, tool_name in ((local, "local_lookup"), (remote, "count_me"))
    ]
    assert all(r.result is not None for r in runs), [r.error for r in runs]
    local_run = runs[0]
    results = [m.content for m in local_run.transcript if m.role == "tool"]
    assert results == [f"{key}-{i}: found after 1 attempts" for i in range(steps)]
    histories = [await r.handle.fetch_history() for r in runs]
    local_types, remote_types = (event_types(h) for h in histories)
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in histories[0].events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert "local_lookup" not in scheduled
    # Each step saves an activity's three events and a workflow task's three, for one marker.
    assert len(remote_types) - len(local_types) >= steps * (6 - 1) - 2, (
        len(remote_types),
        len(local_types),
    )
    # Every call is in the history as a marker that the Web UI shows with its summary.
    summaries = [
        e.user_metadata.summary.data.decode()
        for e in histories[0].events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED and e.HasField("user_metadata")
    ]
    assert sum("local_lookup" in s and key in s for s in summaries) == steps, summaries
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=payload_codec.data_converter())
    await replayer.replay_workflow(histories[0])


async def test_a_local_tool_keeps_its_retry_policy_and_its_errors_for_the_model(
    client: Client, task_queue: str
) -> None:
    key = f"k-{uuid.uuid4().hex[:6]}"
    script = [
        turn(
            call("local_lookup", "c1", key=key, failures=2),
            call("local_lookup", "c2", key=f"missing-{key}"),
        ),
        turn(text="done"),
    ]
    run = await run_agent(client, task_queue, scripted_input(script, tools=["local_lookup"]))
    assert run.result is not None, run.error
    results = run.tool_results()
    assert results["c1"] == f"{key}: found after 3 attempts"
    assert results["c2"] == f"Error: local_lookup failed: no entry missing-{key}"
    assert executions[f"local_lookup:missing-{key}"] == 1, "a ToolError is not retried"
    records = {r.id: r for r in run.trace[0].tool_calls}
    assert records["c1"].attempts == 3 and records["c1"].outcome == "ok"
    assert records["c2"].outcome == "error"


def test_a_tool_that_changes_data_cannot_be_local() -> None:
    with pytest.raises(ValueError, match="local=True is for read-only tools"):

        @tool(side_effects=True, local=True)
        def write_local(label: str) -> str:
            return label
