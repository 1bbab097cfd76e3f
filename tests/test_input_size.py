"""One bound for a run's input, at the start and at every continue-as-new (issue 37).

A prompt over about 0.9 MB used to start (the server takes 2 MB) and then fail the run at its
first continue-as-new, carried twice: in the input and as the transcript's first message. A 3 MB
prompt reached the server and came back as a raw `RPCError: Blob data size exceeds limit`.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

import durable_agent.workflows.continuation as continuation
from durable_agent.client.agent_client import AgentClient
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.errors import AgentInputTooLarge
from durable_agent.workflows.input_limits import MAX_INPUT_BYTES
from durable_agent.workflows.inputs import AgentInput, Limits
from tests.helpers import TEST_WORKER_OPTIONS, call, chain_histories, scripted_input, turn
from tests.test_starter_prompt import starter

MEGABYTE = 1_000_000


def with_prompt(chars: int, **options: object) -> AgentInput:
    return scripted_input(
        [turn(call("count_me", key="a")), turn(call("count_me", key="b")), turn(text="done")],
        prompt="p" * chars,
        tools=["count_me"],
        limits=Limits(max_context_tokens=None),
        **options,
    )


async def test_a_prompt_that_may_start_is_carried_once_and_the_run_hands_on(
    client: Client, task_queue: str
) -> None:
    agent_input = with_prompt(MEGABYTE, continue_as_new_after_steps=1)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await AgentClient(client, task_queue).start(agent_input)
        result = await run.result()
        transcript = await run.transcript()
    histories = await chain_histories(client, run.id, run.handle.first_execution_run_id)

    assert result.answer == "done"
    assert len(histories) == 3  # two hand-ons, each carrying the megabyte once
    assert transcript[0].content == agent_input.prompt
    carried = histories[1].events[0].workflow_execution_started_event_attributes.input
    assert MEGABYTE < len(carried.payloads[0].data) < 1.2 * MEGABYTE


async def test_a_prompt_over_the_bound_is_refused_before_it_is_sent(
    client: Client, task_queue: str
) -> None:
    workflow_id = f"too-large-{uuid.uuid4()}"
    with pytest.raises(AgentInputTooLarge) as refused:
        await AgentClient(client, task_queue).start(
            with_prompt(3 * MEGABYTE), workflow_id=workflow_id
        )

    assert "MAX_INPUT_BYTES" in refused.value.message and "3,000,000 characters" in str(
        refused.value
    )
    with pytest.raises(RPCError, match="not found"):
        await client.get_workflow_handle(workflow_id).describe()


async def test_an_input_over_the_bound_that_another_client_sent_fails_as_it_starts(
    client: Client, task_queue: str
) -> None:
    """Between the bound and the server's 2 MB: it would start, and fail at its first hand-on."""
    agent_input = with_prompt(MAX_INPUT_BYTES + 50_000)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await client.start_workflow(
            AgentWorkflow.run, agent_input, id=f"raw-{uuid.uuid4()}", task_queue=task_queue
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        status = await handle.query(AgentWorkflow.status)

    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "AgentInputTooLarge"
    assert status.step == 0


async def test_the_command_line_refuses_a_prompt_over_the_bound_in_one_line(
    tmp_path: Path,
) -> None:
    prompt = tmp_path / "huge.txt"
    prompt.write_text("p" * 3 * MEGABYTE)

    code, out, err = await starter("--prompt-file", str(prompt), cwd=tmp_path)

    assert code == 2, err
    assert err.count("\n") == 1 and "MAX_INPUT_BYTES" in err, err
    assert "Traceback" not in err and out == ""


def test_the_bound_is_the_carry_bound() -> None:
    assert continuation.MAX_CARRIED_BYTES == MAX_INPUT_BYTES < 2 * MEGABYTE
