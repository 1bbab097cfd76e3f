"""Continue-as-new at step boundaries: the run goes on with all it had, and nothing a caller sees
changes (workflow id, queries, limits, result, compensation of earlier effects)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput, Limits
from tests.helpers import TEST_WORKER_OPTIONS, Run, call, run_agent, scripted_input, turn


def script(steps: int) -> list:
    turns = [
        turn(call("count_me", key=f"can-{uuid.uuid4()}"), call("count_me", key="same"))
        for _ in range(steps - 1)
    ]
    return [*turns, turn(text="all counted", expect="with these arguments")]


async def continued(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether the latest run of this workflow id is not its first: the chain continued."""
    description = await handle.describe()
    return description.run_id != description.raw_description.workflow_execution_info.first_run_id


def comparable(run: Run) -> tuple[Any, ...]:
    assert run.result is not None
    records = [r.model_dump(exclude={"model_latency_ms"}) for r in run.result.step_records]
    for record in records:
        for tool_call in record["tool_calls"]:
            tool_call.pop("latency_ms")
            tool_call["arguments"] = (
                "-" if "can-" in tool_call["arguments"] else tool_call["arguments"]
            )
    return run.result.answer, run.result.steps, run.result.usage, len(run.transcript), records


async def test_a_run_that_continues_as_new_ends_as_if_nothing_happened(
    client: Client, task_queue: str
) -> None:
    base = script(6)
    plain = await run_agent(client, task_queue, scripted_input(base, tools=["count_me"]))
    chained_input = scripted_input(base, tools=["count_me"], continue_as_new_after_steps=2)
    chained = await run_agent(client, task_queue, chained_input)

    assert await continued(chained.handle)
    assert not await continued(plain.handle)
    # Loop detection counted across runs: the third identical call was fed back in both.
    assert comparable(chained) == comparable(plain)
    assert [m.role for m in chained.transcript] == [m.role for m in plain.transcript]


async def test_limits_and_compensation_span_the_whole_chain(
    client: Client, task_queue: str
) -> None:
    turns = [
        turn(call("cancel_order", order_id=104999, reason="asked")),
        turn(call("count_me", key=f"x-{uuid.uuid4()}")),
        turn(call("count_me", key=f"y-{uuid.uuid4()}")),
        turn(call("count_me", key=f"z-{uuid.uuid4()}")),
        turn(text="never"),
    ]
    agent_input = scripted_input(
        turns,
        tools=["cancel_order", "count_me"],
        limits=Limits(max_steps=4),
        continue_as_new_after_steps=1,
    )
    run = await run_agent(client, task_queue, agent_input)

    assert run.failure.type == "AgentStepLimitExceeded"
    assert "max_steps=4 reached: the run made 4 model calls" in run.failure.message
    # The effect of the first run is undone by the last one.
    compensations = run.failure.details[0]["compensations"]
    assert [(c["tool"], c["status"]) for c in compensations] == [("cancel_order", "completed")]


async def test_the_server_suggests_it_when_the_history_grows(task_queue: str) -> None:
    limit = "limit.historyCount.suggestContinueAsNew=40"
    async with (
        embedded_dev_server(extra_args=["--dynamic-config-value", limit]) as env,
        build_worker(env.client, task_queue, **TEST_WORKER_OPTIONS),
    ):
        agent_input: AgentInput = scripted_input(script(12), tools=["count_me"])
        handle = await env.client.start_workflow(
            AgentWorkflow.run, agent_input, id=f"can-{uuid.uuid4()}", task_queue=task_queue
        )
        result = await handle.result()
        status = await handle.query(AgentWorkflow.status)
        assert await continued(handle)

    assert result.steps == 12 and result.answer == "all counted"
    assert status.step == 12


async def test_a_state_too_large_to_carry_fails_loudly_instead_of_sticking(
    client: Client, task_queue: str
) -> None:
    turns = [turn(call("huge", size=700_000 + i)) for i in range(4)]
    agent_input = scripted_input(
        [*turns, turn(text="never")], tools=["huge"], continue_as_new_after_steps=3
    )
    # Not run_agent: the transcript query itself would be over the 2 MB a query may answer.
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await client.start_workflow(
            AgentWorkflow.run, agent_input, id=f"can-{uuid.uuid4()}", task_queue=task_queue
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()

    error = failure.value.cause
    assert isinstance(error, ApplicationError) and error.type == "AgentBudgetExceeded"
    assert "cannot continue as new" in error.message and "turn on compaction" in error.message
    assert not await continued(handle)


async def test_a_compacted_run_carries_its_whole_transcript_when_it_fits(
    client: Client, task_queue: str
) -> None:
    turns = [turn(call("blob", size=1600 + i)) for i in range(8)]
    agent_input = scripted_input(
        [*turns, turn(text="done")],
        tools=["blob"],
        limits=Limits(max_context_tokens=2000),
        compaction="window",
        continue_as_new_after_steps=6,
    )
    run = await run_agent(client, task_queue, agent_input)

    assert run.result is not None and run.result.answer == "done"
    assert run.result.compactions and await continued(run.handle)
    # The transcript query still answers with every message, though the model saw a window.
    assert len(run.transcript) == 1 + 2 * 8 + 1
    assert not any((m.content or "").endswith("context window]") for m in run.transcript)


async def test_a_compacted_run_too_large_to_carry_whole_carries_its_view(
    client: Client, task_queue: str
) -> None:
    turns = [turn(call("huge", size=400_000 + i)) for i in range(6)]
    agent_input = scripted_input(
        [*turns, turn(text="done")],
        tools=["huge"],
        limits=Limits(max_context_tokens=250_000),
        compaction="window",
        continue_as_new_after_steps=5,
    )
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await client.start_workflow(
            AgentWorkflow.run, agent_input, id=f"can-{uuid.uuid4()}", task_queue=task_queue
        )
        result = await handle.result()
        transcript = await handle.query(AgentWorkflow.transcript)

    assert result.answer == "done" and await continued(handle)
    # The new run starts from the view: the task, then the compaction's note.
    assert transcript[0].content == "where is order 1042"
    assert transcript[1].content.endswith("dropped to fit the context window]")
