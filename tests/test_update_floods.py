"""What the server does to updates in a flood, and what AgentRun makes of it, on real dev
servers: past its cap of 10 updates in flight a run's server refuses more (RESOURCE_EXHAUSTED),
past its cap of updates a run may take at all (history.maxTotalUpdates) it refuses every one
until the run continues as new, and an update that races the run's continue-as-new can be
aborted. What was not taken is sent again with the same update id; what cannot be is an
AgentUpdateNotDelivered that says what to do."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.worker import (
    ContinueAsNewInput,
    Interceptor,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

import tests.tools_for_tests as test_tools
from durable_agent.client.agent_client import AgentClient, AgentRun, AgentUpdateNotDelivered
from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput
from tests.helpers import (
    TEST_WORKER_OPTIONS,
    call,
    chain_histories,
    eventually,
    scripted_input,
    turn,
)

IN_FLIGHT_CAP = 10
"""The server's history.maxInFlightUpdates, as it ships (the session's server keeps it)."""


def conversation(*script: Any, prompt: str = "first") -> AgentInput:
    return scripted_input(list(script), prompt=prompt, conversation=True, tools=["hold"])


async def user_messages(run: AgentRun) -> list[str]:
    return [m.content for m in await run.transcript() if m.role == "user"]


async def test_a_flood_past_the_cap_of_updates_in_flight_is_delivered_once_each(
    client: Client, task_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="durable_agent.client.agent_client")
    run = await AgentClient(client, task_queue).start(
        conversation(*[turn(text=f"answer {i}") for i in range(20)])
    )
    # No worker yet: every message waits to be accepted, so all of them are in flight at once.
    messages = [f"message {i}" for i in range(IN_FLIGHT_CAP + 2)]
    posting = [asyncio.create_task(run.post(text)) for text in messages]

    def refused_and_sent_again() -> bool:
        return any("in-flight updates" in r.getMessage() for r in caplog.records)

    # Until the fix, the SDK's own retries gave up after ~13 s and post raised the RPCError.
    await eventually(
        lambda: refused_and_sent_again() or any(task.done() for task in posting),
        60,
        "the server to refuse the messages past its cap",
    )
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        turns = await asyncio.gather(*posting)
        taken = await user_messages(run)
        await run.end()

    assert refused_and_sent_again()
    assert all(number >= 1 for number in turns), turns
    # Sent again with the same update id: each message is in the transcript once.
    assert taken[0] == "first" and sorted(taken[1:]) == sorted(messages)


async def test_an_update_refused_for_longer_than_the_client_waits_is_a_typed_error(
    client: Client, task_queue: str
) -> None:
    agents = AgentClient(client, task_queue, update_retry_for=timedelta(0))
    run = await agents.start(conversation(turn(text="never served")))
    posting = [asyncio.create_task(run.post(f"message {i}")) for i in range(IN_FLIGHT_CAP + 1)]
    ended: list[BaseException | None] = []
    try:
        # No worker: the ten in flight wait, and the one past the cap is refused. On a loaded
        # machine the SDK's wait for one in flight may give up first (the server's long poll):
        # that one is the SDK's timeout, not a refusal.
        waiting = set(posting)
        while waiting and not any(isinstance(e, AgentUpdateNotDelivered) for e in ended):
            done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            ended += [task.exception() for task in done]
    finally:
        for task in posting:
            task.cancel()
        await asyncio.gather(*posting, return_exceptions=True)
        await run.handle.terminate("the test is over")

    timed_out = [e for e in ended if isinstance(e, WorkflowUpdateRPCTimeoutOrCancelledError)]
    (error,) = [e for e in ended if e not in timed_out]
    assert isinstance(error, AgentUpdateNotDelivered), error
    assert error.type == "AgentUpdateNotDelivered" and error.reason == "busy"
    assert error.workflow_id == run.id and error.update == "send_message"
    assert "\n" not in error.message
    assert f"{IN_FLIGHT_CAP} updates in flight" in error.message
    assert "nothing reached the run" in error.message and "send it again" in error.message


class ContinueAsNewGate(Interceptor):
    """Holds the first continue-as-new of a run in its workflow task (for at most 1.5 s, under
    the SDK's 2 s deadlock timeout), so that the test can act while that task is in flight."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        gate = self

        class Outbound(WorkflowOutboundInterceptor):
            def continue_as_new(self, input: ContinueAsNewInput) -> Any:
                if not gate.reached.is_set():
                    gate.reached.set()
                    gate.release.wait(1.5)
                return super().continue_as_new(input)

        class Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(Outbound(outbound))

        return Inbound


async def test_an_update_aborted_by_a_race_with_continue_as_new_is_sent_again(
    client: Client, task_queue: str
) -> None:
    """The interrupt ends the turn and the run continues as new in the same workflow task;
    a message that comes by signal meanwhile makes the server fail that task (the signal must
    not be lost with the run), and with it the interrupt the task carried: the server answers
    the interrupt with FAILED_PRECONDITION (WorkflowNotReady), which the client used to raise."""
    key = f"hold-{uuid.uuid4()}"
    agent_input = conversation(turn(call("hold", key=key)), turn(text="after the interrupt"))
    agent_input = agent_input.model_copy(update={"continue_as_new_after_steps": 1})
    gate = ContinueAsNewGate()
    async with build_worker(
        client,
        task_queue,
        workflow_runner=UnsandboxedWorkflowRunner(),  # the gate's events are this process's
        interceptors=[gate],
        **TEST_WORKER_OPTIONS,
    ):
        run = await AgentClient(client, task_queue).start(agent_input)
        await eventually(lambda: key in test_tools.holding, 15, "the turn's tool to run")
        interrupting = asyncio.create_task(run.interrupt())
        await eventually(gate.reached.is_set, 15, "the run to continue as new")
        await run.handle.signal(AgentWorkflow.send_message_by_signal, "and one more thing")
        gate.release.set()
        try:
            interrupted = await interrupting
        finally:
            test_tools.released.add(key)
        await run.turn(2)
        ended = await run.end()

    assert interrupted == 1
    assert [(t.turn, t.outcome) for t in ended.turns] == [(1, "interrupted"), (2, "answered")]
    assert ended.turns[1].message == "and one more thing"
    histories = await chain_histories(client, run.id, run.handle.result_run_id)
    assert len(histories) >= 2, "the run did not continue as new"
    failed = [
        e.workflow_task_failed_event_attributes.cause
        for e in histories[0].events
        if e.HasField("workflow_task_failed_event_attributes")
    ]
    # The race happened: the task that handed on failed because of the signal.
    assert WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND in failed


async def test_past_the_cap_of_updates_a_run_may_take_the_error_says_to_wait_or_signal() -> None:
    """history.maxTotalUpdates is 2,000 as the server ships; lowered here to 4, on a server of
    this test's own. A run that cannot continue as new (its turn's tool runs) takes no more."""
    async with embedded_dev_server(
        extra_args=["--dynamic-config-value", "history.maxTotalUpdates=4"]
    ) as env:
        task_queue = f"total-{uuid.uuid4()}"
        key = f"hold-{uuid.uuid4()}"
        agent_input = conversation(
            turn(call("hold", key=key)), *[turn(text=f"answer {i}") for i in range(10)]
        )
        async with build_worker(env.client, task_queue, **TEST_WORKER_OPTIONS):
            run = await AgentClient(env.client, task_queue).start(agent_input)
            await eventually(lambda: key in test_tools.holding, 15, "the turn's tool to run")
            for i in range(4):
                assert await run.post(f"message {i}") == 1
            try:
                with pytest.raises(AgentUpdateNotDelivered) as refused:
                    await run.post("one too many")
            finally:
                test_tools.released.add(key)
            # The server suggests continuing as new; the run does at its next step boundary,
            # and its next run takes updates again.
            first_run = run.handle.result_run_id

            async def continued() -> bool:
                return (await env.client.get_workflow_handle(run.id).describe()).run_id != first_run

            await eventually(continued, 15, "the run to continue as new")
            # Even through a handle of the first run: updates go to the latest run of the chain.
            first = env.client.get_workflow_handle_for(AgentWorkflow.run, run.id, run_id=first_run)
            assert await AgentRun(first, env.client).post("one too many") >= 1
            taken = await user_messages(run)
            await run.end()

    error = refused.value
    assert error.reason == "total" and error.update == "send_message"
    assert "\n" not in error.message
    assert "4 updates" in error.message and "continues as new" in error.message
    assert "signal" in error.message and "nothing reached the run" in error.message
    assert taken.count("one too many") == 1
