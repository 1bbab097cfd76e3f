"""A cancel that cancels: wherever it lands, the run ends CANCELED, after its compensations.

Through the client against the session's dev server, with real activities: a cancel while a
side-effecting tool changes data, while the model thinks, and while a sub-agent works. (A
compaction's summary call goes through the same model gateway as a step's, so it ends the same
way.) The stop button has to work while the agent is changing data."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle

import tests.tools_for_tests as test_tools
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput, AgentResult, Limits
from tests.helpers import TEST_WORKER_OPTIONS, call, eventually, scripted_input, turn


async def cancelled(handle: WorkflowHandle[Any, AgentResult]) -> list[Any]:
    """Cancel, wait for the end, and return the transcript; fails unless the run is CANCELED."""
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.CANCELED
    return list(await handle.query(AgentWorkflow.transcript))


async def start(client: Client, task_queue: str, agent_input: AgentInput) -> Any:
    return await client.start_workflow(
        AgentWorkflow.run, agent_input, id=f"cancel-{uuid.uuid4()}", task_queue=task_queue
    )


async def test_a_cancel_while_a_tool_changes_data_undoes_it_and_ends_canceled(
    client: Client, task_queue: str
) -> None:
    test_tools.slow_effect_started.clear()
    test_tools.slow_effect_finished.clear()
    label = f"effect-{uuid.uuid4()}"
    script = [turn(call("slow_effect", label=label, seconds=1.5)), turn(text="done")]
    agent_input = scripted_input(script, tools=["slow_effect"])
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await start(client, task_queue, agent_input)
        await eventually(test_tools.slow_effect_started.is_set, timeout=10, what="the tool ran")
        transcript = await cancelled(handle)
        # Whatever the run did about it, the tool's thread has applied the effect by now.
        await eventually(test_tools.slow_effect_finished.is_set, timeout=10, what="the tool")

    # The call in flight finished (a sync tool cannot be interrupted): it was recorded as an
    # effect and undone, and the model's transcript says the run was cancelled, not done.
    assert label not in test_tools.applied.values()
    assert transcript[-1].role == "tool"
    assert not any(m.role == "assistant" and m.content == "done" for m in transcript)


async def test_a_cancel_during_a_model_call_ends_canceled_not_failed(
    client: Client, task_queue: str
) -> None:
    script = [turn(text="too late", delay_seconds=5)]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await start(client, task_queue, scripted_input(script))
        await eventually(
            lambda: _has_started_step(handle, 1), timeout=10, what="the model call started"
        )
        await cancelled(handle)


async def test_a_cancel_during_a_sub_agent_ends_both_canceled(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(call("delegate", task="look it up", tools=["block"])),
        # The sub-agent's reply: it blocks until cancelled.
        turn(call("block", seconds=30)),
    ]
    agent_input = scripted_input(script, tools=["block"], sub_agents=True)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await start(client, task_queue, agent_input)
        child = client.get_workflow_handle(f"{handle.id}/call_1_1")

        async def child_running() -> bool:
            try:
                return (await child.query(AgentWorkflow.status)).step >= 1
            except Exception:
                return False

        await eventually(child_running, timeout=15, what="the sub-agent's first step")
        await cancelled(handle)
        assert (await child.describe()).status == WorkflowExecutionStatus.CANCELED


async def _has_started_step(handle: WorkflowHandle[Any, AgentResult], step: int) -> bool:
    status = await handle.query(AgentWorkflow.status)
    return status.details.startswith(f"step {step}: waiting for")


async def test_a_cancel_during_the_undo_lets_it_finish_and_ends_canceled(
    client: Client, task_queue: str
) -> None:
    """The run fails at its step limit and starts undoing; a cancel then does not cut the undo
    short (which would record an undo that completed as failed): it completes, is recorded as
    completed, and the run ends CANCELED."""
    test_tools.slow_undo_started.clear()
    script = [
        turn(call("effect_with_slow_undo", label="u")),
        turn(call("count_me", key="undo-cancel")),
        turn(text="never reached"),
    ]
    agent_input = scripted_input(
        script, tools=["effect_with_slow_undo", "count_me"], limits=Limits(max_steps=2)
    )
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await start(client, task_queue, agent_input)
        await eventually(test_tools.slow_undo_started.is_set, timeout=15, what="the undo")
        await cancelled(handle)
        status = await handle.query(AgentWorkflow.status)
        events = [e async for e in handle.fetch_history_events()]

    assert any(k.endswith("/call_1_1") for k in test_tools.slow_undos)
    assert status.status == "failed" and status.details == "cancelled"
    scheduled = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
    }
    completed = [
        scheduled[e.activity_task_completed_event_attributes.scheduled_event_id]
        for e in events
        if e.HasField("activity_task_completed_event_attributes")
    ]
    assert completed[-1] == "slow_undo"
    assert not any(e.HasField("activity_task_canceled_event_attributes") for e in events)
