"""Code mode and continue-as-new, on a real dev server: a run that becomes due to continue as new
while its script waits for a person goes on waiting (a run hands on only at a step boundary),
takes the person's decision, finishes the script, then continues as new carrying the transcript
and the compensation log, and runs nothing twice (counted by the tools' own effects); a run
that continued as new after a script and then fails undoes the script's effects."""

from __future__ import annotations

import textwrap
import uuid
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

import tests.tools_for_tests as test_tools
from durable_agent.client.agent_client import AgentRun
from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.decisions import ToolCallDecision
from durable_agent.workflows.inputs import AgentInput, CodeMode, Limits, ToolApprovalPolicy
from durable_agent.workflows.transcript import Transcript
from tests.helpers import (
    TEST_WORKER_OPTIONS,
    call,
    chain_histories,
    eventually,
    run_agent,
    scripted_input,
    turn,
)

TOOLS = ["keyed_effect", "count_me"]


def gated_code(tag: str, keys: list[str]) -> str:
    """Reads first (each its own leg), then an effect that waits for a person, then a read."""
    reads = "\n".join(f'await count_me(key="{key}")' for key in keys[:-1])
    return textwrap.dedent(
        f"""
        {{reads}}
        a = await keyed_effect(label="{tag}-a")
        n = await count_me(key="{keys[-1]}")
        print(a["label"], n)
        """
    ).replace("{reads}", reads)


async def continued(handle: WorkflowHandle[Any, Any]) -> bool:
    description = await handle.describe()
    return description.run_id != description.raw_description.workflow_execution_info.first_run_id


async def carried_inputs(client: Client, handle: WorkflowHandle[Any, Any]) -> list[AgentInput]:
    """The input of each run of the chain, first to last."""
    first = (await handle.describe()).raw_description.workflow_execution_info.first_run_id
    inputs = []
    for history in await chain_histories(client, handle.id, first):
        started = history.events[0]
        assert started.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
        payloads = started.workflow_execution_started_event_attributes.input.payloads
        inputs.append((await client.data_converter.decode(payloads, [AgentInput]))[0])
    return inputs


async def wait_for_person_then_finish(
    client: Client, task_queue: str, agent_input: AgentInput, *, by_signal: bool
) -> tuple[AgentRun, Any, list[AgentInput]]:
    """Start the run, wait until the script's effect is the one call waiting, check that the run
    has not continued as new meanwhile, approve it (by update or by signal), and run to the end."""
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await client.start_workflow(
            AgentWorkflow.run, agent_input, id=f"code-can-{uuid.uuid4()}", task_queue=task_queue
        )
        run = AgentRun(handle, client)

        async def waiting() -> list[str]:
            status = await run.status()
            return [a.call_id for a in status.approvals if a.status == "awaiting_approval"]

        await eventually(waiting, what="the script's effect to wait")
        (gated,) = await waiting()
        assert gated.startswith("script_1.")
        # Due to continue as new (or told to), the run waits in its step, where it is.
        assert not await continued(handle)
        if by_signal:
            decision = ToolCallDecision(call_id=gated, approve=True)
            await handle.signal("decide_tool_call", decision)
        else:
            await run.decide_tool_call(gated, approve=True)
        result = await run.result()
        assert Transcript(messages=await run.transcript()).is_complete()
        inputs = await carried_inputs(client, handle)
    return run, result, inputs


async def test_a_script_waiting_for_a_person_when_the_run_is_due_to_continue_as_new(
    client: Client, task_queue: str
) -> None:
    tag = f"t-{uuid.uuid4()}"
    keys = [f"k-{uuid.uuid4()}" for _ in range(2)]
    later = f"l-{uuid.uuid4()}"
    script = [
        turn(call("run_code", id="script_1", code=gated_code(tag, keys))),
        turn(call("count_me", key=later), expect=f"{tag}-a {keys[-1]} has run 1 times"),
        turn(text="done: {last_tool_result}"),
    ]
    agent_input = scripted_input(
        script,
        tools=TOOLS,
        code_mode=CodeMode(),
        tool_approval=ToolApprovalPolicy(),  # the effect waits for a person
        continue_as_new_after_steps=1,
    )
    _, result, inputs = await wait_for_person_then_finish(
        client, task_queue, agent_input, by_signal=False
    )

    assert result.answer == f"done: {later} has run 1 times"
    # A run a step: the first made step 1 with its whole script, and handed on after it.
    assert len(inputs) == 3
    second = inputs[1].carried
    assert second is not None and second.steps == 1
    assert [m.role for m in second.messages] == ["user", "assistant", "tool"]
    assert second.messages[2].tool_call_id == "script_1"
    assert second.messages[2].content == f"{tag}-a {keys[-1]} has run 1 times"
    # The compensation log went on with the run: the script's effect, as a direct call's.
    assert [(e.call.tool_call_id, e.call.result) for e in second.effects] == [
        ("script_1.2", {"label": f"{tag}-a"})
    ]
    (decided,) = [a for a in second.approvals if a.call_id == "script_1.2"]
    assert decided.status == "approved"
    # Nothing ran twice.
    assert [test_tools.executions[k] for k in [*keys, later]] == [1, 1, 1]
    assert [label for label, _, _ in test_tools.keys_seen if label.startswith(tag)] == [f"{tag}-a"]
    assert [r.step for r in result.step_records] == [1, 2, 3]
    assert [r.id for r in result.step_records[0].tool_calls] == [
        "script_1.1",
        "script_1.2",
        "script_1.3",
        "script_1",
    ]


async def test_a_script_waits_through_the_servers_suggestion_and_takes_a_signal(
    task_queue: str,
) -> None:
    """The server suggests continuing as new while the script is still making calls and then
    waits for a person: the script goes on in the same run, and the decision, by signal, reaches
    it there."""
    tag = f"t-{uuid.uuid4()}"
    keys = [f"k-{uuid.uuid4()}" for _ in range(8)]
    script = [
        turn(call("run_code", id="script_1", code=gated_code(tag, keys))),
        turn(text="done: {last_tool_result}", expect=f"{tag}-a"),
    ]
    agent_input = scripted_input(
        script, tools=TOOLS, code_mode=CodeMode(), tool_approval=ToolApprovalPolicy()
    )
    limit = "limit.historyCount.suggestContinueAsNew=30"
    async with embedded_dev_server(extra_args=["--dynamic-config-value", limit]) as env:
        run, result, inputs = await wait_for_person_then_finish(
            env.client, task_queue, agent_input, by_signal=True
        )
        first = (await run.handle.describe()).raw_description.workflow_execution_info
        histories = await chain_histories(env.client, run.handle.id, first.first_run_id)

    assert result.answer == f"done: {tag}-a {keys[-1]} has run 1 times"
    # The whole script ran in the first run, past the suggestion; the run handed on after it.
    assert len(histories) == 2 and len(histories[0].events) > 30
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in histories[0].events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled.count("count_me") == len(keys) and scheduled.count("keyed_effect") == 1
    # The server suggested it before the effect was even asked for, and the run went on.
    events = histories[0].events
    asked = next(
        i
        for i, e in enumerate(events)
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "keyed_effect"
    )
    assert any(
        e.workflow_task_started_event_attributes.suggest_continue_as_new
        for e in events[:asked]
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
    )
    second = inputs[1].carried
    assert second is not None and second.steps == 1
    assert [e.call.tool_call_id for e in second.effects] == [f"script_1.{len(keys)}"]
    assert [test_tools.executions[k] for k in keys] == [1] * len(keys)


async def test_a_run_that_continued_as_new_after_a_script_undoes_it_when_it_fails(
    client: Client, task_queue: str
) -> None:
    tag = f"t-{uuid.uuid4()}"
    code = textwrap.dedent(
        f"""
        import asyncio
        first = await keyed_effect(label="{tag}-a")
        both = await asyncio.gather(keyed_effect(label="{tag}-b"), count_me(key="{tag}"))
        print(first["label"], both[0]["label"])
        """
    )
    script = [
        turn(call("run_code", id="script_1", code=code)),
        turn(call("count_me", key=f"{tag}-x"), expect=f"{tag}-a {tag}-b"),
        turn(call("count_me", key=f"{tag}-y")),
        turn(text="never"),
    ]
    test_tools.undone.clear()
    agent_input = scripted_input(
        script,
        tools=TOOLS,
        code_mode=CodeMode(),
        limits=Limits(max_steps=3),
        continue_as_new_after_steps=1,
    )
    run = await run_agent(client, task_queue, agent_input)

    assert run.failure.type == "AgentStepLimitExceeded"
    assert await continued(run.handle)
    # The last run of the chain undid what the first run's script did, newest first.
    assert test_tools.undone == [f"{tag}-b", f"{tag}-a"]
    compensations = run.failure.details[0]["compensations"]
    assert [(c["tool_call_id"], c["status"]) for c in compensations] == [
        ("script_1.2", "completed"),
        ("script_1.1", "completed"),
    ]
    assert [label for label, _, _ in test_tools.keys_seen if label.startswith(tag)] == [
        f"{tag}-a",
        f"{tag}-b",
    ]
